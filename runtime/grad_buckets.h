// Bucketed gradient reduction and bucketed post-step all-gather: DeepSpeed's
// reduce_bucket_size / allgather_bucket_size / overlap_comm
// (runtime/config.h has the key semantics). Private to the engine: included
// by runtime/engine_state.h and used by runtime/engine_step.cpp.
//
// [Note: gradient buckets]
// reduce_gradients(u) hands unit u's gradient to the open bucket, piece by
// piece; when the bucket is full its collective starts, and a new bucket
// opens for the rest of u (so a unit larger than a bucket is split, and
// small units share one). At the end of a micro-batch (step()) the partly
// filled bucket is started and every bucket completed.
//  - Stages 0/1 (at the accumulation boundary): a bucket is up to
//    reduce_bucket_size consecutive elements of units' padded flat
//    gradients, packed in the communication dtype and all-reduced in place;
//    on completion each piece is copied back into its unit's gradient with
//    the stored scale. A bucket that is exactly one run of one unit's
//    gradient, already in the communication dtype, is all-reduced in the
//    gradient buffer itself (no copy).
//  - Stages 2/3 (every micro-batch): a bucket holds, for every rank r, the
//    same range [a, a+n) of rank r's shard of each unit in it: block r of
//    the send buffer is rank r's part, so the reduce-scatter hands each rank
//    the reduced part of its own shard, which enters the gradient shard
//    through accumulate_grad_shard(). Per-rank block capacity is
//    max(1, reduce_bucket_size / world size) elements. A bucket that is
//    exactly one unit's whole gradient in the communication dtype is sent
//    from the gradient buffer itself.
//  - Stage 1/2 post-step all-gather: buckets of the same shape (per-rank
//    block max(1, allgather_bucket_size / world size)) of the updated shards;
//    a bucket that is exactly one unit is gathered in place.
// Every element goes through the same casts and the same collective
// (all-reduce or reduce-scatter over the same ranks) as without buckets.
// Whether the sums are bitwise the same for every bucket size depends on
// the order MPI adds an element's operands in: libnbc's reduce_scatter_block
// and its tree all-reduce use one fixed order (bitwise equal, tested in
// tests/runtime/test_grad_buckets.cpp), but the ring all-reduce that
// comm/mpi selects for messages of 64 KiB and more (mpi_nbc_tuning.h) starts
// each element's sum at a rank that depends on its position in the message,
// so at world sizes >= 3 stage 0/1 results may differ in the last bits
// between bucket sizes that put a gradient in messages of different sizes.
// For a given configuration the results are deterministic.
// With overlap_comm, at most kMaxBucketsInFlight buckets are in flight
// (bounding memory) and finished ones are retired whenever a bucket starts;
// without it each bucket completes before the call that started it returns.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "comm/communicator.h"
#include "runtime/buffer_pool.h"
#include "runtime/flat_layout.h"

namespace zeroshard {

class EngineState;

/// Bucket collectives in flight at most with overlap_comm (each holds a
/// bucket's send and receive buffers).
inline constexpr std::size_t kMaxBucketsInFlight = 2;

/// One run of a unit inside a bucket. For an all-reduce bucket `offset` is
/// an element offset in the unit's padded flat buffer; for reduce-scatter and
/// all-gather buckets it is an offset inside every rank's shard. `pos` is the
/// run's element position inside the bucket (inside each per-rank block).
struct BucketPiece {
  UnitId unit = -1;
  std::size_t offset = 0;
  std::size_t n = 0;
  std::size_t pos = 0;
};

/// What a bucket's collective is.
enum class BucketKind { all_reduce, reduce_scatter, all_gather };

/// A bucket being filled or in flight. Not copyable (leases, CommWork).
struct Bucket {
  BucketKind kind = BucketKind::all_reduce;
  std::vector<BucketPiece> pieces;
  std::size_t fill = 0;      ///< elements (per rank block for reduce-scatter/all-gather) packed so far
  std::size_t capacity = 0;  ///< the most `fill` may reach
  PoolLease send;  ///< all-reduce: the packed bucket; reduce-scatter: world x fill; all-gather: this rank's fill
  PoolLease recv;  ///< reduce-scatter: this rank's fill reduced elements; all-gather: world x fill
  bool in_place = false;  ///< the collective runs on the unit's own buffer (one piece, no packing)
  /// Declared last so that it is destroyed first: destroying a bucket waits
  /// for its collective before its buffers go back to the pool.
  CommWork work;
};

/// The engine's bucket state (EngineState::buckets). Used by the thread
/// driving the engine only.
struct GradBuckets {
  Bucket open;                   ///< reduction bucket being filled (no pieces = none)
  std::deque<Bucket> in_flight;  ///< started reduction buckets, in issue order
};

/// Hands unit u's gradient of this micro-batch to the reduction buckets
/// (stages 0/1: its full gradient, called at the accumulation boundary;
/// stages 2/3: its micro-batch gradient buffer, which is released once
/// packed). Starts every bucket that fills; with overlap_comm off, completes
/// them before returning. Collective (SPMD: same call order on all ranks).
/// Throws CommError from the communicator.
void reduce_unit_in_buckets(EngineState& s, UnitId u);

/// Starts the partly filled bucket, if any, and completes every bucket in
/// flight: afterwards every reduced gradient is in place (stages 0/1: the
/// full gradients hold the sum over ranks times the stored scale; stages
/// 2/3: added into the gradient shards). Collective. Throws CommError.
void complete_reduce_buckets(EngineState& s);

/// Stages 1/2, after the optimizer: all-gathers every unit's updated shard
/// into its full parameter buffer, in buckets of allgather_bucket_size.
/// Collective. Throws CommError.
void all_gather_params_in_buckets(EngineState& s);

/// Drops every bucket without applying it (waiting for collectives in
/// flight first, so no buffer is released under MPI): what loading a
/// checkpoint does to a half-finished micro-batch. Local; never throws.
void discard_reduce_buckets(EngineState& s) noexcept;

}  // namespace zeroshard
