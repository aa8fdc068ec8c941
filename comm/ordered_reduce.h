// Rank-ordered sums: a reduce-scatter and an all-reduce whose result, for
// every element, is the contributions of ranks 0, 1, ..., N-1 added left to
// right, whatever the message size, the backend's algorithm or how the data
// is cut into collectives.
#pragma once

#include <cstddef>
#include <functional>

#include "comm/communicator.h"
#include "core/dtype.h"

// [Note: rank-ordered reduction]
// MPI and NCCL choose the order in which a sum combines the ranks' operands:
// Open MPI's ring all-reduce starts each element's sum at a rank that depends
// on the element's position in the message, its reduce_scatter_block uses
// another order, and both change with the message size. Floating-point
// addition is not associative, so the same gradients reduced by stage 0/1
// (all-reduce) and stage 2/3 (reduce-scatter), or in buckets of another
// size, differ in the last bits, and Adam's division by sqrt(v) amplifies
// those bits into visibly different losses. Here the reduction is built
// from collectives that only move data, plus a local sum whose order is
// fixed:
//   reduce-scatter(send = N blocks of c elements, block r for rank r):
//     1. all-to-all: rank r receives every rank's block r (block j of the
//        scratch buffer is rank j's);
//     2. local: recv = scratch block 0 + block 1 + ... + block N-1, left to
//        right (kernels/cpu/sum_blocks.h, or the compute device's form).
//   all-reduce(buf = N blocks of b elements, in place):
//     1-2. as above over buf's blocks, the sum landing in buf block rank();
//     3. all-gather of the N summed blocks, in place.
// Each element is then the left-to-right sum of its ranks' values in the
// reduction dtype (fp32; bf16/f16 rounded after each add, [Note: 16-bit
// reductions] in comm/mpi/mpi_types.h), identical on every rank and for
// every stage, bucket size and overlap setting. The cost: the same bytes on
// the wire as a ring (each rank sends and receives (N-1)/N of the buffer per
// phase) but the all-to-all is not pipelined with the sum and the sum reads
// all N blocks at once (bench/collectives/README.md has the figures).
// ReductionOrder::native keeps the backend's own collectives (faster for
// some sizes; bitwise reproducible only for one configuration).
//
// SPMD and progress: the all-reduce posts its all-gather only in advance()
// (or wait()), never from test(), because a test that succeeds on one rank
// and not yet on another would post the all-gather at different points of
// the ranks' collective sequences, which MPI forbids (collectives must be
// issued in the same order on every rank) and which deadlocks. Callers call
// advance() at the same point of their sequence on every rank.

namespace zeroshard {

/// How gradient reductions sum the ranks' contributions (ds_config
/// "zeroshard": {"reduction_order": ...}).
enum class ReductionOrder {
  rank,    ///< rank 0 + rank 1 + ... left to right ([Note: rank-ordered reduction]); the default
  native,  ///< the backend's all-reduce / reduce-scatter, in the order it chooses
};

/// "rank" or "native".
const char* reduction_order_name(ReductionOrder order);

/// The local sum of [Note: rank-ordered reduction]: dst[i] = block 0 + ... +
/// block (blocks-1) at element i, left to right, where block j is the count
/// elements at src + j * count; dst is src itself or disjoint from it. The
/// contract of kernels::sum_blocks, in the memory the collective's buffers
/// live in.
using BlockSum = std::function<void(void* dst, const void* src, std::size_t blocks, std::size_t count, DType dtype)>;

/// kernels::sum_blocks, for buffers in host memory.
BlockSum host_block_sum();

/// One rank-ordered reduce-scatter or all-reduce in flight (see the note).
/// Move-only; destroying one waits for its collective (as CommWork) but
/// starts nothing. The buffers must stay alive and untouched until it is
/// complete. Only ReduceOp::sum. Thread safety: the thread that started it.
class OrderedReduction {
 public:
  /// Empty: complete.
  OrderedReduction() = default;
  OrderedReduction(OrderedReduction&&) noexcept = default;
  OrderedReduction& operator=(OrderedReduction&&) noexcept = default;
  OrderedReduction(const OrderedReduction&) = delete;
  OrderedReduction& operator=(const OrderedReduction&) = delete;

  /// Starts a reduce-scatter: send holds comm.world_size() blocks of count
  /// elements (block r: this rank's contribution to rank r's part); scratch
  /// (count * world_size() elements) must not overlap send; recv (count
  /// elements) receives this rank's part, summed in rank order; recv may be
  /// scratch itself (block 0) but must not overlap send. Collective (the
  /// all-to-all). Throws InvariantError for null or overlapping buffers,
  /// CommError as Communicator::iall_to_all.
  static OrderedReduction reduce_scatter(Communicator& comm, const void* send, void* scratch, void* recv,
                                         std::size_t count, DType dtype, BlockSum sum);

  /// Starts an in-place all-reduce of buf, comm.world_size() blocks of
  /// `block` elements (pad a buffer to a multiple of the world size; padding
  /// is summed only with padding); scratch (the same size) must not overlap
  /// buf. Collective (the all-to-all); advance() posts the all-gather.
  /// Throws as reduce_scatter.
  static OrderedReduction all_reduce(Communicator& comm, void* buf, void* scratch, std::size_t block,
                                     DType dtype, BlockSum sum);

  /// Completes the all-to-all and the local sum, and for an all-reduce
  /// starts the all-gather (a collective: call it at the same point of the
  /// collective sequence on every rank). No-op once past that point.
  /// Throws CommError.
  void advance();
  /// True once complete. Never starts a collective: a reduce-scatter sums
  /// once its all-to-all has completed; an all-reduce is incomplete until
  /// advance() posted its all-gather and that completed. Throws CommError.
  bool test();
  /// advance(), then blocks until complete. Throws CommError.
  void wait();
  /// True while something is left to do.
  bool pending() const { return phase_ != Phase::done; }
  /// True once the local sum has run (every collective that reads the
  /// contributions is complete; the all-reduce's all-gather may still run).
  bool summed() const { return phase_ == Phase::gathering || phase_ == Phase::done; }

 private:
  enum class Phase { exchanging, gathering, done };
  /// Posts the all-to-all of `send` (world_size() blocks of `count`
  /// elements) into scratch; the sum later goes to `buf` (reduce-scatter:
  /// recv; all-reduce: this rank's block of buf). Throws as reduce_scatter.
  static OrderedReduction post(Communicator& comm, const void* send, void* buf, void* scratch, std::size_t count,
                               DType dtype, BlockSum sum, bool all_reduce);
  void sum_now();

  Communicator* comm_ = nullptr;
  BlockSum sum_;
  CommWork work_;
  Phase phase_ = Phase::done;
  bool all_reduce_ = false;
  void* buf_ = nullptr;  ///< all-reduce: the buffer; reduce-scatter: recv
  void* scratch_ = nullptr;
  std::size_t count_ = 0;  ///< elements per block
  DType dtype_ = DType::f32;
};

}  // namespace zeroshard
