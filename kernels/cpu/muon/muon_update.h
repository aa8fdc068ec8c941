// Muon's element-wise parts around the Newton-Schulz iteration
// (kernels/cpu/muon/newton_schulz.h), in the order of the reference
// implementation's muon_update and step (KellerJordan/Muon):
//   momentum.lerp_(grad, 1 - beta)
//   update = grad.lerp_(momentum, beta) if nesterov else momentum
//   O = newton_schulz(update)           (the whole matrix: the owner rank)
//   p.mul_(1 - lr * weight_decay); p.add_(O * scale, alpha = -lr)
// The scale matches the update's RMS to AdamW's (Moonshot AI 2025, "Muon is
// Scalable for LLM Training": 0.2 sqrt(max(rows, cols))) or is the
// reference's shape factor sqrt(max(1, rows / cols)). lerp_ is torch's:
// fma(w, end - self, self) for |w| < 0.5, else fma(w - 1, end - self, end).
// Each function works on any contiguous range (a shard), so the momentum
// can live sharded where the optimizer state lives. Thread safety: touches
// only its arguments.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

/// Which scale multiplies the orthogonalized update.
enum class MuonScale {
  rms_match,  ///< 0.2 sqrt(max(rows, cols)) (Moonshot AI 2025)
  shape,      ///< sqrt(max(1, rows / cols)) (the reference implementation)
};

/// The scale for a rows x cols matrix. rows, cols >= 1 (InvariantError).
float muon_scale(MuonScale kind, std::size_t rows, std::size_t cols);

/// n elements: momentum = lerp(momentum, grad, 1 - beta); update =
/// lerp(grad, momentum, beta) with nesterov, else momentum (fp32, torch's
/// lerp). update may alias grad (the reference updates grad in place);
/// momentum must not alias either. beta in [0, 1) (InvariantError).
void muon_momentum(float* momentum, const float* grad, float* update, std::size_t n, float beta, bool nesterov);

/// n elements of a shard: p = p * (1 - lr * weight_decay), then p = p - lr
/// * (o * scale), each product rounded to fp32 (o: the orthogonalized
/// update's elements for the same range).
void muon_apply(float* p, const float* o, std::size_t n, float lr, float weight_decay, float scale);

}  // namespace zeroshard::kernels
