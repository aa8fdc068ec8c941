// Row-parallel linear layer (Shoeybi et al., 2019, "Megatron-LM", section 3,
// figure 3): Y = X W^T + b, as torch.nn.Linear, with W [out, in] split by
// input columns across the tensor-parallel group; the layer that follows a
// ColumnParallelLinear, whose output columns are its input columns.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "parallel/parallel_linear.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// Y = X W^T + b with W [out, in] split by columns: tp rank t holds columns
/// in_slice() = split_slice(in, tp, t) of W as its weight [out, local_in]
/// (row o holds W[o, in_slice]; parallel/partition.h, [Note: uneven split]).
/// X arrives split the same way along its last dimension: x [tokens,
/// local_in] holds columns in_slice of X (a ColumnParallelLinear of `in`
/// outputs over the same group produces exactly that). The bias b [out] is
/// replicated: every rank holds all of it, adds it once after the
/// all-reduce, and gets the same full gradient for it. So ParallelLinear's
/// x_width is local_in and y_width out: forward gives the full y [tokens,
/// out] on every rank from weight [out, local_in] and bias [out]; backward
/// takes dy [tokens, out] (the full dL/dY, the same on every rank), adds
/// dweight [out, local_in] and dbias [out] and writes dx [tokens, local_in]
/// (this rank's columns of dL/dX).
///
/// Communication (Megatron's "g" operator): forward one all-reduce (sum) of
/// Y, tokens x out fp32 elements, over the tensor-parallel group; backward
/// none (identity). See [Note: tensor-parallel layer conventions] in
/// column_parallel_linear.h.
class RowParallelLinear : public ParallelLinear {
 public:
  /// A layer of `in_features` inputs and `out_features` outputs split over
  /// `tp_group` (kept by reference; must outlive the layer). `granule`
  /// columns move together: the split is [Note: uneven split] over
  /// in_features / granule blocks of `granule` columns (1: single columns; an
  /// attention's heads: a head's columns). Throws ConfigError when
  /// in_features or out_features is 0, or granule is 0 or does not divide
  /// in_features.
  RowParallelLinear(Communicator& tp_group, std::size_t in_features, std::size_t out_features,
                    bool bias = true, std::size_t granule = 1)
      : ParallelLinear("RowParallelLinear", tp_group, in_features, out_features, bias, granule,
                       Split::in_features) {}

  /// This rank's columns of W (and of X), and their count.
  Slice in_slice() const { return slice(); }
  std::size_t local_in() const { return slice().size; }
};

}  // namespace zeroshard::parallel
