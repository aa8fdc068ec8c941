// Row-parallel linear layer (Shoeybi et al., 2019, "Megatron-LM", section 3,
// figure 3): Y = X W^T + b, as torch.nn.Linear, with W [out, in] split by
// input columns across the tensor-parallel group; the layer that follows a
// ColumnParallelLinear, whose output columns are its input columns.
#pragma once

#include <cstddef>
#include <span>

#include "comm/communicator.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// Y = X W^T + b with W [out, in] split by columns: tp rank t holds columns
/// in_slice() = split_slice(in, tp, t) of W as its weight [out, local_in]
/// (row o holds W[o, in_slice]; parallel/partition.h, [Note: uneven split]).
/// X arrives split the same way along its last dimension: x [tokens,
/// local_in] holds columns in_slice of X (a ColumnParallelLinear of `in`
/// outputs over the same group produces exactly that). The bias b [out] is
/// replicated: every rank holds all of it, adds it once after the
/// all-reduce, and gets the same full gradient for it.
///
/// Communication (Megatron's "g" operator): forward one all-reduce (sum) of
/// Y, tokens x out fp32 elements, over the tensor-parallel group; backward
/// none (identity). See [Note: tensor-parallel layer conventions] in
/// column_parallel_linear.h.
class RowParallelLinear {
 public:
  /// A layer of `in_features` inputs and `out_features` outputs split over
  /// `tp_group` (kept by reference; must outlive the layer). `granule`
  /// columns move together: the split is [Note: uneven split] over
  /// in_features / granule blocks of `granule` columns (1: single columns; an
  /// attention's heads: a head's columns). Throws ConfigError when
  /// in_features or out_features is 0, or granule is 0 or does not divide
  /// in_features.
  RowParallelLinear(Communicator& tp_group, std::size_t in_features, std::size_t out_features,
                    bool bias = true, std::size_t granule = 1);

  std::size_t in_features() const { return in_; }
  std::size_t out_features() const { return out_; }
  bool has_bias() const { return bias_; }
  /// This rank's columns of W (and of X).
  Slice in_slice() const { return slice_; }
  std::size_t local_in() const { return slice_.size; }
  /// Elements of this rank's weight: out x local_in.
  std::size_t weight_elements() const { return out_ * slice_.size; }
  /// Elements of the (replicated) bias: out, or 0 without bias.
  std::size_t bias_elements() const { return bias_ ? out_ : 0; }

  /// y [tokens, out] = all-reduce-sum over the group of x [tokens, local_in]
  /// * weight^T ([out, local_in]), then + bias [out] (empty without bias):
  /// the full Y on every rank. Throws InvariantError when a span's size does
  /// not match; CommError from the all-reduce.
  void forward(std::span<const float> x, std::size_t tokens, std::span<const float> weight,
               std::span<const float> bias, std::span<float> y) const;

  /// From dy [tokens, out] (the full dL/dY, the same on every rank) and
  /// forward's x and weight: dx [tokens, local_in] = dy * weight (this rank's
  /// columns of dL/dX; an empty dx skips it); dweight [out, local_in] +=
  /// dy^T x; dbias [out] += the column sums of dy (empty without bias). No
  /// communication. Throws InvariantError when a span's size does not match.
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
