// What the column- and row-parallel linear layers share
// (column_parallel_linear.h, row_parallel_linear.h): the shape checks and
// the split of one dimension in granules over the tensor-parallel group,
// and one rank's part of Y = X W^T + b forward and backward, with the
// all-reduce where Megatron's f (column: dX in backward) or g (row: Y in
// forward) operator puts it. See [Note: tensor-parallel layer conventions]
// in column_parallel_linear.h.
#pragma once

#include <cstddef>
#include <span>

#include "comm/communicator.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// The base of ColumnParallelLinear and RowParallelLinear. This rank holds
/// weight [y_width, x_width] and bias [y_width] (or none), reads x [tokens,
/// x_width] and writes y [tokens, y_width]: x_width = in and y_width = the
/// local outputs when the output features are split (column), x_width = the
/// local inputs and y_width = out when the input features are (row; the
/// bias is then replicated). Not constructed on its own. Thread safety: one
/// thread at a time per communicator.
class ParallelLinear {
 public:
  /// The layer's (unsplit) inputs and outputs, and whether it has a bias.
  std::size_t in_features() const { return in_; }
  std::size_t out_features() const { return out_; }
  bool has_bias() const { return bias_; }
  /// Elements of this rank's weight: y_width x x_width.
  std::size_t weight_elements() const { return y_width_ * x_width_; }
  /// Elements of this rank's bias: y_width, or 0 without bias.
  std::size_t bias_elements() const { return bias_ ? y_width_ : 0; }

  /// y [tokens, y_width] = x [tokens, x_width] * weight^T, summed over the
  /// group by an all-reduce when the input features are split (Megatron's
  /// g), then + bias [y_width] (empty without bias) on every row. Throws
  /// InvariantError naming the layer and the span whose size does not
  /// match; CommError from the all-reduce.
  void forward(std::span<const float> x, std::size_t tokens, std::span<const float> weight,
               std::span<const float> bias, std::span<float> y) const;

  /// From dy [tokens, y_width] (the gradient of this rank's y) and
  /// forward's x and weight: dweight [y_width, x_width] += dy^T x; dbias
  /// [y_width] += the column sums of dy, row by row in token order (empty
  /// without bias); dx [tokens, x_width] = dy * weight, summed over the
  /// group by an all-reduce when the output features are split (Megatron's
  /// f backward). An empty dx skips the product and the all-reduce; every
  /// rank of the group must then pass an empty dx. Errors as forward.
  void backward(std::span<const float> x, std::span<const float> dy, std::size_t tokens,
                std::span<const float> weight, std::span<float> dx, std::span<float> dweight,
                std::span<float> dbias) const;

 protected:
  /// Which dimension of W [out, in] is split over the group.
  enum class Split { out_features, in_features };

  /// A layer `name` (in errors) of `in_features` inputs and `out_features`
  /// outputs whose `split` dimension is split over `tp_group` (kept by
  /// reference; must outlive the layer) in blocks of `granule` features
  /// ([Note: uneven split] over split-dimension / granule blocks). Throws
  /// ConfigError naming the layer when in_features or out_features is 0, or
  /// granule is 0 or does not divide the split dimension.
  ParallelLinear(const char* name, Communicator& tp_group, std::size_t in_features,
                 std::size_t out_features, bool bias, std::size_t granule, Split split);
  ~ParallelLinear() = default;
  ParallelLinear(const ParallelLinear&) = default;
  ParallelLinear& operator=(const ParallelLinear&) = delete;

  /// The slice of the split dimension this rank holds.
  Slice slice() const { return slice_; }

 private:
  const char* name_;
  Communicator& tp_;
  std::size_t in_;
  std::size_t out_;
  bool bias_;
  Split split_;
  Slice slice_;
  std::size_t x_width_;
  std::size_t y_width_;
};

}  // namespace zeroshard::parallel
