#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/muon/muon_update.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zeroshard::kernels {

namespace {

// torch's lerp(self, end, w) in fp32.
inline float lerp(float self, float end, float w) {
  return std::abs(w) < 0.5f ? std::fma(w, end - self, self) : std::fma(w - 1.0f, end - self, end);
}

}  // namespace

float muon_scale(MuonScale kind, std::size_t rows, std::size_t cols) {
  ZS_CHECK(rows > 0 && cols > 0, "muon_scale: a {} x {} matrix has no elements", rows, cols);
  if (kind == MuonScale::rms_match) {
    return static_cast<float>(0.2 * std::sqrt(static_cast<double>(std::max(rows, cols))));
  }
  return static_cast<float>(std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols))));
}

void muon_momentum(float* momentum, const float* grad, float* update, std::size_t n, float beta, bool nesterov) {
  ZS_CHECK(beta >= 0.0f && beta < 1.0f, "muon_momentum: momentum (beta) must be in [0, 1), got {}", beta);
  const float w = 1.0f - beta;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = lerp(momentum[i], g, w);
    momentum[i] = m;
    update[i] = nesterov ? lerp(g, m, beta) : m;
  }
}

void muon_apply(float* p, const float* o, std::size_t n, float lr, float weight_decay, float scale) {
  const float decay = 1.0f - lr * weight_decay;
  for (std::size_t i = 0; i < n; ++i) {
    const float scaled = o[i] * scale;
    const float step = lr * scaled;
    p[i] = p[i] * decay - step;
  }
}

}  // namespace zeroshard::kernels
