// Causal multi-head self-attention with its heads split across the
// tensor-parallel group (Shoeybi et al., 2019, "Megatron-LM", section 3,
// figure 3b; the attention of Vaswani et al., 2017, masked as GPT-2's):
//   [q k v] = X W_qkv^T + b_qkv                  (column-parallel, by heads)
//   for each head h: P_h = softmax(q_h k_h^T / sqrt(hd) + causal mask)
//                    c_h = P_h v_h
//   Y = [c_0 .. c_{H-1}] W_o^T + b_o             (row-parallel, by heads)
//
// [Note: attention head layout]
// dim = heads x hd (hd = head_dim). W_qkv [3 dim, dim] is stored head-major,
// as Megatron's fused query_key_value weight: rows [3 hd h, 3 hd (h + 1))
// hold head h's query rows, then its key rows, then its value rows (hd each);
// b_qkv [3 dim] likewise. W_o [dim, dim] is torch's [out, in] and its input
// column hd h + i is feature i of head h's context. Tp rank t holds heads
// head_slice() = split_slice(heads, tp, t) ([Note: uneven split]): rows
// [3 hd h0, 3 hd h1) of W_qkv and b_qkv (a ColumnParallelLinear with granule
// 3 hd) and columns [hd h0, hd h1) of W_o (a RowParallelLinear with granule
// hd); b_o is replicated. Tokens are row-major [batch x seq, dim] with row
// b seq + s holding position s of sequence b; position s attends to
// positions 0..s of its own sequence.
//
// Communication: forward one all-reduce of Y (tokens x dim fp32); backward
// one all-reduce of dX (tokens x dim fp32); both over the tensor-parallel
// group. Projections are fp32 cblas_sgemm, and so is each head's core
// ([Note: attention by matrix products]). See [Note: tensor-parallel layer
// conventions] in column_parallel_linear.h.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/partition.h"
#include "parallel/row_parallel_linear.h"

// [Note: attention by matrix products]
// Per sequence and head, with Q, K, V the head's [seq, hd] column blocks of
// the fused qkv rows (read in place through the GEMM's leading dimension):
// forward S = Q K^T / sqrt(hd) into the saved probabilities P, each row's
// causal softmax in place (exp in fp32, the row's sum in fp64, entries
// above the diagonal exactly 0), C = P V; backward dP = dC V^T, dV = P^T dC,
// dS = P (dP - rowsum(P dP)) / sqrt(hd) (the rowsum in fp64), dQ = dS K,
// dK = dS^T Q. The masked entries cost the full square's products (twice
// the causal half's) and still win: two sgemm calls forward and four
// backward in place of scalar loops in fp64. A head's numbers depend only
// on its own q, k, v and the sizes, not on its position in the rows or the
// number of heads a rank holds (tests/parallel/test_gemm.cpp: strides do
// not change sgemm's bits), so every tensor-parallel split gives the same
// bits per head.

namespace zeroshard::parallel {

/// This rank's slices of the attention weights ([Note: attention head
/// layout]); sizes as qkv().weight_elements() etc.
struct AttentionWeights {
  std::span<const float> qkv_weight;   ///< [3 hd local_heads, dim]
  std::span<const float> qkv_bias;     ///< [3 hd local_heads]
  std::span<const float> proj_weight;  ///< [dim, hd local_heads]
  std::span<const float> proj_bias;    ///< [dim], replicated
};

/// This rank's gradient slices, same shapes as AttentionWeights; backward
/// adds into them.
struct AttentionGrads {
  std::span<float> qkv_weight;
  std::span<float> qkv_bias;
  std::span<float> proj_weight;
  std::span<float> proj_bias;
};

/// What forward keeps for backward (owned; reused across calls).
struct AttentionSaved {
  std::vector<float> qkv;      ///< [tokens, 3 hd local_heads]
  std::vector<float> probs;    ///< [batch, local_heads, seq, seq], 0 above the diagonal
  std::vector<float> context;  ///< [tokens, hd local_heads]
};

/// Causal self-attention over `heads` heads of dim / heads features, heads
/// split across the tensor-parallel group (see the file comment).
class ParallelSelfAttention {
 public:
  /// Attention of width `dim` with `heads` heads over `tp_group` (kept by
  /// reference; must outlive the layer). Throws ConfigError when dim or
  /// heads is 0 or heads does not divide dim.
  ParallelSelfAttention(Communicator& tp_group, std::size_t dim, std::size_t heads);

  std::size_t dim() const { return dim_; }
  std::size_t heads() const { return heads_; }
  std::size_t head_dim() const { return hd_; }
  /// This rank's heads.
  Slice head_slice() const { return heads_slice_; }
  std::size_t local_heads() const { return heads_slice_.size; }
  /// The QKV projection (sizes of this rank's qkv weight and bias).
  const ColumnParallelLinear& qkv() const { return qkv_; }
  /// The output projection (sizes of this rank's proj weight and bias).
  const RowParallelLinear& proj() const { return proj_; }

  /// y [batch x seq, dim] (the full output, the same on every rank) from
  /// x [batch x seq, dim] (the same on every rank); fills `saved`. Throws
  /// InvariantError when a span's size does not match; CommError from the
  /// all-reduce.
  void forward(std::span<const float> x, std::size_t batch, std::size_t seq,
               const AttentionWeights& w, std::span<float> y, AttentionSaved& saved) const;

  /// From dy [batch x seq, dim] (the full dL/dY, the same on every rank):
  /// dx [batch x seq, dim] = the full dL/dX on every rank (overwritten), and
  /// this rank's weight and bias gradients added into `g` (the replicated
  /// b_o's gradient is the same full sum on every rank). Throws
  /// InvariantError when a size does not match; CommError from the
  /// all-reduce.
  void backward(std::span<const float> x, std::span<const float> dy, std::size_t batch,
                std::size_t seq, const AttentionWeights& w, const AttentionSaved& saved,
                std::span<float> dx, const AttentionGrads& g) const;

 private:
  std::size_t dim_;
  std::size_t heads_;
  std::size_t hd_;
  Slice heads_slice_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
};

}  // namespace zeroshard::parallel
