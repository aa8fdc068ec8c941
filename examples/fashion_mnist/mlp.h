// A multi-layer perceptron classifier whose parameters live in a zeroshard
// Engine: one unit per Linear layer, forward and backward written out with
// row-major OpenBLAS GEMMs.
//
// Layer l (1-based name "fc<l>") maps [n, in_l] to [n, out_l]:
//   z = h W^T + b, W: [out_l, in_l] ("fc<l>.weight"), b: [out_l] ("fc<l>.bias");
// every layer but the last is followed by ReLU; the last produces logits and
// the loss is softmax cross-entropy averaged over the micro-batch
// (torch.nn.CrossEntropyLoss with reduction="mean").
//
// [Note: MLP precision]
// The GEMMs always run in fp32. In fp32 training they read engine.param()
// and accumulate straight into engine.grad() (beta = 1). With bf16/fp16
// parameters (ds_config bf16.enabled / fp16.enabled) a layer's weight and
// bias are widened into fp32 scratch buffers after unshard, its gradient is
// computed into fp32 scratch and added into the 16-bit gradient buffer with
// one rounding per element (kernels::accumulate_cast). The loss gradient is
// multiplied by engine.loss_scale() (1 unless fp16), which step() undoes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "examples/fashion_mnist/classifier.h"
#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// The MLP on the CPU (OpenBLAS). Holds a reference to the Engine (which
/// must outlive it) and its own activation buffers, allocated once for up to
/// max_batch samples. It also declares the parameters that CudaMlp
/// (cuda_mlp.h) computes with on a GPU. Thread safety: one thread, the one
/// that drives the Engine.
class Mlp final : public Classifier {
 public:
  /// Declares one unit per layer in `engine` (which must not be finalized
  /// yet): "fc<l>" with "fc<l>.weight" [out, in] in the default group and
  /// "fc<l>.bias" [out] in a parameter group "no_decay" (weight_decay 0).
  /// layer_sizes = {inputs, hidden..., classes}, at least 2 entries, all
  /// >= 1; max_batch >= 1 samples per forward call. Call engine.finalize()
  /// before initialize(). Throws InvariantError on invalid sizes.
  Mlp(Engine& engine, std::vector<std::int64_t> layer_sizes, std::size_t max_batch);

  /// Sets every parameter like torch.nn.Linear's default (Kaiming-uniform):
  /// W and b ~ U(-1/sqrt(in), 1/sqrt(in)), drawn from std::mt19937_64(seed)
  /// layer by layer (weight, then bias) with a portable float mapping, so
  /// every rank and platform gets identical values. No collective.
  void initialize(std::uint64_t seed);

  /// Forward and backward of one micro-batch of n <= max_batch samples:
  /// x is [n, inputs] (row-major floats), labels [n] (each < classes).
  /// Adds the gradient of the mean loss (times engine.loss_scale()) into the
  /// engine's gradient buffer of every parameter and calls
  /// engine.reduce_gradients for every unit, in reverse layer order; does
  /// not call engine.step(). Returns the mean loss (nats, unscaled).
  /// Collective at every stage (unshard/reduce_gradients). Allocation-free.
  double forward_backward(std::span<const float> x, std::span<const std::uint8_t> labels,
                          std::size_t n) override;

  /// Forward only over n <= max_batch samples (n may be 0: the unshard /
  /// reshard collectives are still issued so that ranks stay in step).
  /// Returns the loss sum and the number of correct predictions.
  EvalCounts evaluate(std::span<const float> x, std::span<const std::uint8_t> labels,
                      std::size_t n) override;

  /// Number of Linear layers (K).
  int num_layers() const { return static_cast<int>(units_.size()); }
  /// Inputs and outputs of layer l in [0, num_layers()).
  std::size_t layer_in(int l) const { return std::size_t(sizes_.at(std::size_t(l))); }
  std::size_t layer_out(int l) const { return std::size_t(sizes_.at(std::size_t(l) + 1)); }
  /// The largest layer width (inputs or outputs) and the largest weight
  /// (out x in), in elements: the sizes of per-layer scratch buffers.
  std::size_t widest() const { return widest_; }
  std::size_t largest_weight() const { return largest_weight_; }
  /// The Engine calls of a forward pass around `compute`, layer by layer:
  /// unshard(unit(l)), compute(l), reshard(unit(l)). Every classifier of
  /// this model (this one, CudaMlp) runs its passes through these two, so
  /// all issue the same collectives in the same order.
  template <class Compute>
  void forward_units(Compute&& compute) {
    for (int l = 0; l < num_layers(); ++l) {
      engine_.unshard(unit(l));
      compute(l);
      engine_.reshard(unit(l));
    }
  }
  /// The backward pass's: for l from the last layer down, unshard(unit(l)),
  /// compute(l) (which adds layer l's gradients), reduce_gradients(unit(l)),
  /// reshard(unit(l)).
  template <class Compute>
  void backward_units(Compute&& compute) {
    for (int l = num_layers() - 1; l >= 0; --l) {
      engine_.unshard(unit(l));
      compute(l);
      engine_.reduce_gradients(unit(l));
      engine_.reshard(unit(l));
    }
  }
  /// Throws InvariantError unless min_n <= n <= max_batch(), x holds n x
  /// inputs floats and labels n entries, each below the number of classes;
  /// `what` names the batch in the message ("micro-batch", ...).
  void check_batch(const char* what, std::span<const float> x,
                   std::span<const std::uint8_t> labels, std::size_t n, std::size_t min_n) const;
  /// {inputs, hidden..., classes}.
  const std::vector<std::int64_t>& layer_sizes() const override { return sizes_; }
  /// Total parameter elements (Psi).
  std::size_t num_parameters() const override;
  /// Unit and parameter ids of layer l in [0, num_layers()).
  UnitId unit(int l) const { return units_.at(std::size_t(l)); }
  ParamId weight(int l) const { return weights_.at(std::size_t(l)); }
  ParamId bias(int l) const { return biases_.at(std::size_t(l)); }
  /// Largest n accepted by forward_backward/evaluate.
  std::size_t max_batch() const override { return max_batch_; }
  /// The Engine the parameters live in.
  Engine& engine() const { return engine_; }

 private:
  /// Forward through every layer, keeping each layer's output in acts_;
  /// returns the logits [n, classes].
  const float* forward(const float* x, std::size_t n);
  /// Layer l's weight [out, in] / bias [out] as fp32; l must be unsharded.
  /// See [Note: MLP precision].
  const float* weight_f32(int l);
  const float* bias_f32(int l);
  /// Parameter p as fp32: the engine's buffer in fp32, else cast into
  /// `wide` (at least p's elements). p's unit must be unsharded.
  const float* param_f32(ParamId p, std::vector<float>& wide);
  /// Adds layer l's gradients for dL/dz = delta [n, out] and input h [n, in].
  void accumulate_grads(int l, const float* delta, const float* h_below, std::size_t n);

  Engine& engine_;
  DType dtype_;  ///< the engine's compute dtype
  std::vector<std::int64_t> sizes_;
  std::size_t max_batch_;
  std::vector<UnitId> units_;
  std::vector<ParamId> weights_;
  std::vector<ParamId> biases_;
  std::vector<std::vector<float>>
      acts_;                    ///< acts_[l]: [max_batch, out_l], post-ReLU (logits for the last)
  std::size_t widest_ = 0;
  std::size_t largest_weight_ = 0;
  std::vector<float> delta_a_;  ///< [max_batch, max width]: dL/dz of the current layer
  std::vector<float> delta_b_;  ///< [max_batch, max width]: dL/dz of the layer below
  // fp32 scratch for 16-bit training only (empty in fp32): a layer's widened
  // weight and bias, and its gradients before they are added into the engine.
  std::vector<float> wide_w_, wide_b_, wide_gw_, wide_gb_;
};

/// Softmax cross-entropy of one row of `classes` logits against `label`;
/// writes dL/dlogits scaled by `scale` (softmax - onehot) * scale into
/// dlogits (may be null to skip). Returns the loss (nats).
double softmax_cross_entropy_row(const float* logits, std::size_t classes, std::uint8_t label,
                                 float scale, float* dlogits);

/// The sum over n rows of logits [n, classes] of softmax_cross_entropy_row
/// against labels [n], each row's dL/dlogits (scaled by `scale`) written to
/// the same row of dlogits [n, classes]. Returns the loss sum (nats).
double softmax_cross_entropy_sum(const float* logits, const std::uint8_t* labels, std::size_t n,
                                 std::size_t classes, float scale, float* dlogits);

/// Loss sum and correct predictions (arg-max logit == label) of logits [n,
/// classes] against labels [n].
EvalCounts count_predictions(const float* logits, const std::uint8_t* labels, std::size_t n,
                             std::size_t classes);

}  // namespace zeroshard::examples
