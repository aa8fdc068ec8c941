#include "parallel/layer_norm.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "parallel/check_size.h"

namespace zeroshard::parallel {

namespace {
constexpr const char* kName = "LayerNorm";
}

LayerNorm::LayerNorm(std::size_t dim, float eps) : dim_(dim), eps_(eps) {
  if (dim_ == 0 || !(eps_ >= 0.0f) || !std::isfinite(eps_)) {
    throw ConfigError(fmt::format("{}: dim={} must be >= 1 and eps={} finite and >= 0", kName,
                                  dim_, eps_));
  }
}

void LayerNorm::forward(std::span<const float> x, std::size_t tokens, std::span<const float> gamma,
                        std::span<const float> beta, std::span<float> y, std::span<float> mean,
                        std::span<float> rstd) const {
  const std::size_t D = dim_;
  check_size(kName, "forward x", x.size(), tokens * D);
  check_size(kName, "forward gamma", gamma.size(), D);
  check_size(kName, "forward beta", beta.size(), D);
  check_size(kName, "forward y", y.size(), tokens * D);
  check_size(kName, "forward mean", mean.size(), tokens);
  check_size(kName, "forward rstd", rstd.size(), tokens);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* xr = x.data() + t * D;
    double s = 0.0;
    for (std::size_t d = 0; d < D; ++d) s += xr[d];
    const double mu = s / static_cast<double>(D);
    double v = 0.0;
    for (std::size_t d = 0; d < D; ++d) v += (xr[d] - mu) * (xr[d] - mu);
    const double r = 1.0 / std::sqrt(v / static_cast<double>(D) + static_cast<double>(eps_));
    float* yr = y.data() + t * D;
    for (std::size_t d = 0; d < D; ++d) {
      yr[d] = static_cast<float>((xr[d] - mu) * r * gamma[d] + beta[d]);
    }
    mean[t] = static_cast<float>(mu);
    rstd[t] = static_cast<float>(r);
  }
}

void LayerNorm::backward(std::span<const float> x, std::span<const float> dy, std::size_t tokens,
                         std::span<const float> gamma, std::span<const float> mean,
                         std::span<const float> rstd, std::span<float> dx,
                         std::span<float> dgamma, std::span<float> dbeta) const {
  const std::size_t D = dim_;
  check_size(kName, "backward x", x.size(), tokens * D);
  check_size(kName, "backward dy", dy.size(), tokens * D);
  check_size(kName, "backward gamma", gamma.size(), D);
  check_size(kName, "backward mean", mean.size(), tokens);
  check_size(kName, "backward rstd", rstd.size(), tokens);
  check_size(kName, "backward dx", dx.size(), tokens * D);
  check_size(kName, "backward dgamma", dgamma.size(), D);
  check_size(kName, "backward dbeta", dbeta.size(), D);
  std::vector<double> xhat(D), g(D);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* xr = x.data() + t * D;
    const float* dyr = dy.data() + t * D;
    const double mu = mean[t];
    const double r = rstd[t];
    double mean_g = 0.0, mean_gx = 0.0;
    for (std::size_t d = 0; d < D; ++d) {
      xhat[d] = (xr[d] - mu) * r;
      g[d] = static_cast<double>(dyr[d]) * gamma[d];
      mean_g += g[d];
      mean_gx += g[d] * xhat[d];
      dgamma[d] += static_cast<float>(dyr[d] * xhat[d]);
      dbeta[d] += dyr[d];
    }
    mean_g /= static_cast<double>(D);
    mean_gx /= static_cast<double>(D);
    // dy is fully read above, so dx may alias it.
    float* dxr = dx.data() + t * D;
    for (std::size_t d = 0; d < D; ++d) {
      dxr[d] = static_cast<float>(r * (g[d] - mean_g - xhat[d] * mean_gx));
    }
  }
}

}  // namespace zeroshard::parallel
