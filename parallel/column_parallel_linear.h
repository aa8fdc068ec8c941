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

#include "comm/communicator.h"
#include "parallel/parallel_linear.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// Y = X W^T + b with W [out, in] split by rows: tp rank t holds rows
/// out_slice() = split_slice(out, tp, t) of W as its weight
/// [local_out, in] (parallel/partition.h, [Note: uneven split]) and the same
/// slice of b. X [tokens, in] is the full input, the same on every rank of
/// the group; each rank produces its columns of Y, [tokens, local_out].
/// So ParallelLinear's x_width is in and y_width local_out: forward gives
/// y [tokens, local_out] from weight [local_out, in] and bias [local_out];
/// backward adds dweight [local_out, in] and dbias [local_out] from dy
/// [tokens, local_out] and writes dx [tokens, in], the full dL/dX on every
/// rank.
///
/// Communication (Megatron's "f" operator): forward none (identity);
/// backward one all-reduce (sum) of dX, tokens x in fp32 elements, over the
/// tensor-parallel group. See [Note: tensor-parallel layer conventions].
class ColumnParallelLinear : public ParallelLinear {
 public:
  /// A layer of `in_features` inputs and `out_features` outputs split over
  /// `tp_group` (kept by reference; must outlive the layer). `granule`
  /// rows move together: the split is [Note: uneven split] over
  /// out_features / granule blocks of `granule` rows (1: single rows; an
  /// attention's heads: a head's rows). Throws ConfigError when
  /// in_features or out_features is 0, or granule is 0 or does not divide
  /// out_features.
  ColumnParallelLinear(Communicator& tp_group, std::size_t in_features, std::size_t out_features,
                       bool bias = true, std::size_t granule = 1)
      : ParallelLinear("ColumnParallelLinear", tp_group, in_features, out_features, bias, granule,
                       Split::out_features) {}

  /// This rank's rows of W (and entries of b), and their count.
  Slice out_slice() const { return slice(); }
  std::size_t local_out() const { return slice().size; }
};

}  // namespace zeroshard::parallel
