// The interface the training loop drives: a classifier whose parameters live
// in a zeroshard Engine and whose forward/backward runs on some device. The
// CPU MLP (mlp.h, OpenBLAS) and the cuBLAS MLP (cuda_mlp.h, --device cuda)
// implement it; Trainer (trainer.h) only sees this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace zeroshard::examples {

/// Loss and accuracy counts of a forward pass over some samples.
struct EvalCounts {
  double loss_sum = 0.0;     ///< sum over samples of the cross-entropy (nats)
  std::int64_t correct = 0;  ///< samples whose arg-max logit is the label
  std::int64_t samples = 0;  ///< samples evaluated
};

/// A classifier trained through an Engine. Inputs are row-major fp32
/// [n, layer_sizes().front()] on the host, labels uint8 [n] on the host,
/// whatever device computes. Thread safety: one thread, the one that drives
/// the Engine. Every call is collective over the Engine's communicator (it
/// unshards and reduces units); see [Note: SPMD] in runtime/engine/engine.h.
class Classifier {
 public:
  virtual ~Classifier() = default;

  /// Forward and backward of one micro-batch of 1 <= n <= max_batch()
  /// samples. Adds the gradient of the mean loss (times
  /// engine.loss_scale()) into the engine's gradient buffer of every
  /// parameter and calls engine.reduce_gradients for every unit, in reverse
  /// layer order; does not call engine.step(). Returns the mean loss (nats,
  /// unscaled). Throws InvariantError for bad sizes or labels, and what the
  /// Engine or the device throws.
  virtual double forward_backward(std::span<const float> x, std::span<const std::uint8_t> labels,
                                  std::size_t n) = 0;

  /// Forward only over 0 <= n <= max_batch() samples (n == 0 still issues
  /// the unshard/reshard collectives so that ranks stay in step). Returns
  /// the loss sum and the number of correct predictions.
  virtual EvalCounts evaluate(std::span<const float> x, std::span<const std::uint8_t> labels,
                              std::size_t n) = 0;

  /// Largest n accepted by forward_backward/evaluate.
  virtual std::size_t max_batch() const = 0;
  /// {inputs, hidden..., classes}.
  virtual const std::vector<std::int64_t>& layer_sizes() const = 0;
  /// Total parameter elements (Psi).
  virtual std::size_t num_parameters() const = 0;
};

}  // namespace zeroshard::examples
