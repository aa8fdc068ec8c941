// ZeRO++'s quantized gradient reduce-scatter (qgZ: Wang et al., "ZeRO++",
// 2023, arXiv 2306.10209, section 4.3): a hierarchical all-to-all of int4 /
// int8 blocks, summed in fp32 inside each node and then across nodes. The
// GradReducer (runtime/sharding/grad_reducer.h) runs its stage 2/3 buckets
// through it when zero_optimization.zero_quantized_gradients is on.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "kernels/quant/symmetric_quant.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"

// [Note: hierarchical quantized reduce-scatter]
// The data-parallel group's N ranks must be laid out node by node: H nodes
// of L ranks each, rank r = node(r) * L + local(r) (NodeGroups from
// comm/node_groups.h, checked by the GradReducer, which otherwise keeps the
// plain reduce-scatter). The input is the reduce-scatter's send buffer: N
// blocks of c elements (block r is this rank's contribution to rank r's
// part), in the communication dtype. With format f, C = sym_quant_chunk_bytes(c, f):
//   1. quantize each block r (kernels/quant/symmetric_quant.h), with error
//      feedback when given a residual (block r's residual at r * c), into
//      segment local(r) of the send buffer, slot node(r): segment l holds
//      the H chunks bound for the ranks of local rank l, node by node;
//   2. hop 1, all-to-all inside the node (the `local` communicator, H x C
//      bytes per peer): this rank, of local rank l, receives from each
//      local peer j the H chunks for the ranks (m, l), m = 0 .. H-1;
//   3. for each node m, acc_m = sum over j = 0 .. L-1 of the dequantized
//      chunk (m from peer j), in fp32, left to right in local rank order
//      (dequantize, then dequantize-accumulate);
//   4. quantize each acc_m into slot m of a second send buffer; hop 2,
//      all-to-all across nodes (the `cross` communicator: the ranks of
//      local rank l, one per node, in node order; C bytes per peer): this
//      rank receives from each node m the chunk of acc sums for its own
//      part;
//   5. out = sum over m = 0 .. H-1 of the dequantized chunks, in fp32, in
//      node order.
// A hop whose group has one member is skipped together with its
// quantization: one node (H = 1) sums after hop 1 into `out`; one rank
// per node (L = 1) quantizes the blocks into hop 2's slots directly. So
// every element of the result is (sum over nodes m of (sum over node m's
// ranks of their quantized values), requantized) in a fixed association
// given by the layout: two runs, and every rank, get the same bits. Cross-
// host bytes per call: N (H - 1) C in total (hop 2), against N (N - L) c
// times the dtype's size for the plain rank-ordered reduce-scatter.
// Error of an element, the fp32 sums' rounding aside: at most the sum of
// the per-element bounds e(s) = s (1/2 + 2^-16) of [Note: symmetric block
// quantization] over the quantizations it went through, with s the scale
// of its block in each: one per rank (step 1; step 4 when L = 1), plus one
// per node (step 4) when both hops run. Error feedback covers step
// 1: the rank's own quantization error is carried to its next call for the
// same elements (the caller keeps the residual); step 4's sums belong to
// several ranks and are not fed back.
// SPMD: start() posts the first collective, advance() the second (call it
// at the same point of the collective sequence on every rank, as
// OrderedReduction's advance, comm/ordered_reduce.h); test() only drives
// the hop in flight.

namespace zeroshard {

/// A data-parallel group laid out node by node ([Note: hierarchical
/// quantized reduce-scatter]): the node-local and cross-node communicators
/// of one rank (NodeGroups::local, ::cross) and the layout's sizes.
struct NodeLayout {
  Communicator* local = nullptr;  ///< this rank's node, local rank = rank in it
  Communicator* cross = nullptr;  ///< the ranks of this rank's local rank, one per node, in node order
  int nodes = 1;                  ///< H
  int ranks_per_node = 1;         ///< L
};

/// One quantized hierarchical reduce-scatter in flight (see the note).
/// Move-only; destroying one waits for its collectives (their buffers are
/// leases it holds). The caller's buffers (send, residual, out) must stay
/// untouched until it completes. Thread safety: the thread that started
/// it.
class QuantizedReduceScatter {
 public:
  /// Empty: complete.
  QuantizedReduceScatter() = default;
  QuantizedReduceScatter(QuantizedReduceScatter&&) noexcept = default;
  QuantizedReduceScatter& operator=(QuantizedReduceScatter&&) noexcept = default;
  QuantizedReduceScatter(const QuantizedReduceScatter&) = delete;
  QuantizedReduceScatter& operator=(const QuantizedReduceScatter&) = delete;

  /// Quantizes `send` (nodes x ranks_per_node blocks of `count` elements of
  /// `dtype`: f32, bf16 or f16; ops' memory) and posts the first hop; `out`
  /// (count floats, ops' memory) receives this rank's part. `residual`
  /// (null, or N x count floats: block r's error feedback at r x count) is
  /// read and rewritten during this call. Buffers from `pool` (which must
  /// outlive the reduction), in bytes: N x C twice for hop 1 (when L > 1),
  /// H x count x 4 for the sums and H x C twice for hop 2 (when H > 1).
  /// Collective over nodes.local (or nodes.cross when L = 1). Throws
  /// InvariantError for a layout whose sizes do not multiply to the
  /// communicators' or null buffers; what the communicator and the pool
  /// throw.
  static QuantizedReduceScatter start(const NodeLayout& nodes, DeviceOps& ops, BufferPool& pool, const void* send,
                                      DType dtype, std::size_t count, kernels::SymQuantFormat f, float* residual,
                                      float* out);

  /// Completes hop 1, sums and posts hop 2 (a collective over nodes.cross:
  /// call it at the same point of the collective sequence on every rank);
  /// no-op once past that point. Throws CommError.
  void advance();
  /// True once complete (wait() has run). Drives the hop in flight (its
  /// CommWork's test) and does nothing else: it never posts a collective,
  /// sums or releases a buffer, so the leases a step holds follow the call
  /// sequence alone, as [Note: step replay] (runtime/plan/memory_replay.h)
  /// needs. Throws CommError.
  bool test();
  /// advance(), then blocks until `out` holds the result. Throws CommError.
  void wait();
  /// True while something is left to do.
  bool pending() const { return phase_ != Phase::done; }

 private:
  enum class Phase { hop1, hop2, done };
  void sum_hop1();
  void post_hop2();
  void sum_hop2();

  NodeLayout nodes_;
  DeviceOps* ops_ = nullptr;
  BufferPool* pool_ = nullptr;
  kernels::SymQuantFormat format_;
  std::size_t count_ = 0;
  std::size_t chunk_ = 0;  ///< C: bytes of one block's chunk
  float* out_ = nullptr;
  Phase phase_ = Phase::done;
  PoolLease send1_, recv1_, sums_, send2_, recv2_;
  CommWork work_;  ///< the hop in flight (declared last: waited on first)
};

}  // namespace zeroshard
