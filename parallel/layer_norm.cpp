#include "parallel/layer_norm.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/activation/layer_norm.h"
#include "parallel/check_size.h"

namespace zeroshard::parallel {

namespace {
constexpr const char* kLayerNormName = "LayerNorm";
}

LayerNorm::LayerNorm(std::size_t dim, float eps) : dim_(dim), eps_(eps) {
  if (dim_ == 0 || !(eps_ >= 0.0f) || !std::isfinite(eps_)) {
    throw ConfigError(fmt::format("{}: dim={} must be >= 1 and eps={} finite and >= 0", kLayerNormName, dim_, eps_));
  }
}

void LayerNorm::forward(std::span<const float> x, std::size_t tokens, std::span<const float> gamma,
                        std::span<const float> beta, std::span<float> y, std::span<float> mean,
                        std::span<float> rstd) const {
  const std::size_t D = dim_;
  check_size(kLayerNormName, "forward x", x.size(), tokens * D);
  check_size(kLayerNormName, "forward gamma", gamma.size(), D);
  check_size(kLayerNormName, "forward beta", beta.size(), D);
  check_size(kLayerNormName, "forward y", y.size(), tokens * D);
  check_size(kLayerNormName, "forward mean", mean.size(), tokens);
  check_size(kLayerNormName, "forward rstd", rstd.size(), tokens);
  kernels::layer_norm_forward(x.data(), tokens, D, gamma.data(), beta.data(), eps_, y.data(),
                              mean.data(), rstd.data());
}

void LayerNorm::backward(std::span<const float> x, std::span<const float> dy, std::size_t tokens,
                         std::span<const float> gamma, std::span<const float> mean,
                         std::span<const float> rstd, std::span<float> dx,
                         std::span<float> dgamma, std::span<float> dbeta) const {
  const std::size_t D = dim_;
  check_size(kLayerNormName, "backward x", x.size(), tokens * D);
  check_size(kLayerNormName, "backward dy", dy.size(), tokens * D);
  check_size(kLayerNormName, "backward gamma", gamma.size(), D);
  check_size(kLayerNormName, "backward mean", mean.size(), tokens);
  check_size(kLayerNormName, "backward rstd", rstd.size(), tokens);
  check_size(kLayerNormName, "backward dx", dx.size(), tokens * D);
  check_size(kLayerNormName, "backward dgamma", dgamma.size(), D);
  check_size(kLayerNormName, "backward dbeta", dbeta.size(), D);
  kernels::layer_norm_backward(x.data(), dy.data(), tokens, D, gamma.data(), mean.data(),
                               rstd.data(), dx.data(), dgamma.data(), dbeta.data());
}

}  // namespace zeroshard::parallel
