// Column-parallel linear layer (Shoeybi et al., 2019, "Megatron-LM", section
// 3, figure 3a): Y = X W^T + b, as torch.nn.Linear, with W [out, in] split
// by output rows across the tensor-parallel group.
//
// [Note: tensor-parallel layer conventions]
// Activations are row-major [tokens, features] fp32 arrays; weights are
// row-major [out, in] as torch.nn.Linear stores them; every size is in
// elements. A layer object holds only its shape and the tensor-parallel
// communicator: the caller owns the weights and gradients (for instance as
// Engine parameters, whose shard the data-parallel group keeps), so a layer
// can be used with any storage. Backward *adds* weight and bias gradients
// into the buffers it is given (as torch accumulates into param.grad and as
// Engine::grad expects) and *overwrites* the input gradient. Every rank of
// the tensor-parallel group calls forward and backward in the same order
// with the same token count (SPMD: the collectives pair up). The products
// are fp32 cblas_sgemm (parallel/gemm.h); results differ from an unsplit
// layer only by summation order. Thread safety: one thread at a time per
// communicator.
#pragma once

#include <cstddef>
#include <span>

#include "comm/communicator.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// Y = X W^T + b with W [out, in] split by rows: tp rank t holds rows
/// out_slice() = split_slice(out, tp, t) of W as its weight
/// [local_out, in] (parallel/partition.h, [Note: uneven split]) and the same
/// slice of b. X [tokens, in] is the full input, the same on every rank of
/// the group; each rank produces its columns of Y, [tokens, local_out].
///
/// Communication (Megatron's "f" operator): forward none (identity);
/// backward one all-reduce (sum) of dX, tokens x in fp32 elements, over the
/// tensor-parallel group. See [Note: tensor-parallel layer conventions].
class ColumnParallelLinear {
 public:
  /// A layer of `in_features` inputs and `out_features` outputs split over
  /// `tp_group` (kept by reference; must outlive the layer). `granule`
  /// rows move together: the split is [Note: uneven split] over
  /// out_features / granule blocks of `granule` rows (1: single rows; an
  /// attention's heads: a head's rows). Throws ConfigError when
  /// in_features or out_features is 0, or granule is 0 or does not divide
  /// out_features.
  ColumnParallelLinear(Communicator& tp_group, std::size_t in_features, std::size_t out_features,
                       bool bias = true, std::size_t granule = 1);

  std::size_t in_features() const { return in_; }
  std::size_t out_features() const { return out_; }
  bool has_bias() const { return bias_; }
  /// This rank's rows of W (and entries of b).
  Slice out_slice() const { return slice_; }
  std::size_t local_out() const { return slice_.size; }
  /// Elements of this rank's weight: local_out x in.
  std::size_t weight_elements() const { return slice_.size * in_; }
  /// Elements of this rank's bias: local_out, or 0 without bias.
  std::size_t bias_elements() const { return bias_ ? slice_.size : 0; }

  /// y [tokens, local_out] = x [tokens, in] * weight^T + bias, with weight
  /// [local_out, in] and bias [local_out] (empty without bias). No
  /// communication. Throws InvariantError when a span's size does not match.
  void forward(std::span<const float> x, std::size_t tokens, std::span<const float> weight,
               std::span<const float> bias, std::span<float> y) const;

  /// From dy [tokens, local_out] (the gradient of this rank's columns of Y)
  /// and forward's x and weight: dweight [local_out, in] += dy^T x;
  /// dbias [local_out] += the column sums of dy (empty without bias);
  /// dx [tokens, in] = the all-reduce (sum over the group) of dy * weight,
  /// the full dL/dX on every rank. An empty dx skips the product and the
  /// all-reduce; every rank of the group must then pass an empty dx. Throws
  /// InvariantError when a span's size does not match; CommError from the
  /// all-reduce.
  void backward(std::span<const float> x, std::span<const float> dy, std::size_t tokens,
                std::span<const float> weight, std::span<float> dx, std::span<float> dweight,
                std::span<float> dbias) const;

 private:
  Communicator& tp_;
  std::size_t in_;
  std::size_t out_;
  bool bias_;
  Slice slice_;
};

}  // namespace zeroshard::parallel
