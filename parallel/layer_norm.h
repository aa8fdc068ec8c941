// Layer normalisation over the feature dimension (Ba et al., 2016, "Layer
// Normalization"; torch.nn.LayerNorm(dim, eps) with elementwise affine):
//   mean_t = (1/D) sum_d x[t,d],  var_t = (1/D) sum_d (x[t,d] - mean_t)^2
//   rstd_t = 1 / sqrt(var_t + eps),  xhat = (x - mean_t) rstd_t
//   y = xhat * gamma + beta
// with the biased variance, as torch. Backward, with g = dy * gamma:
//   dx = rstd_t (g - mean_d(g) - xhat mean_d(g xhat))
//   dgamma += sum_t dy xhat,  dbeta += sum_t dy.
// In a Megatron transformer the LayerNorms are replicated: every rank of a
// tensor-parallel group holds the whole gamma and beta and normalises the
// same (all-reduced) activations, so it computes the same gradients; no
// communication. Per-token sums are accumulated in fp64 over vectors
// (kernels/cpu/activation/layer_norm.h, [Note: vector LayerNorm]), results
// stored as fp32. Thread safety: none needed (no state besides the shape).
#pragma once

#include <cstddef>
#include <span>

namespace zeroshard::parallel {

/// LayerNorm over rows of dim features (see the file comment).
class LayerNorm {
 public:
  /// Normalises rows of `dim` features with `eps` added to the variance.
  /// Throws ConfigError when dim is 0 or eps is negative or not finite.
  explicit LayerNorm(std::size_t dim, float eps = 1e-5f);

  std::size_t dim() const { return dim_; }
  float eps() const { return eps_; }

  /// y [tokens, dim] from x [tokens, dim], gamma [dim], beta [dim]; writes
  /// mean [tokens] and rstd [tokens] for backward. y may alias x. Throws
  /// InvariantError when a span's size does not match.
  void forward(std::span<const float> x, std::size_t tokens, std::span<const float> gamma,
               std::span<const float> beta, std::span<float> y, std::span<float> mean,
               std::span<float> rstd) const;

  /// From dy [tokens, dim] and forward's x, gamma, mean and rstd:
  /// dx [tokens, dim] = dL/dx (overwritten; may alias dy), dgamma [dim] +=
  /// sum_t dy xhat, dbeta [dim] += sum_t dy. Throws InvariantError when a
  /// span's size does not match.
  void backward(std::span<const float> x, std::span<const float> dy, std::size_t tokens,
                std::span<const float> gamma, std::span<const float> mean,
                std::span<const float> rstd, std::span<float> dx, std::span<float> dgamma,
                std::span<float> dbeta) const;

 private:
  std::size_t dim_;
  float eps_;
};

}  // namespace zeroshard::parallel
