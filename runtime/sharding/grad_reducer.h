// GradReducer: bucketed gradient reduction and the bucketed post-step
// parameter all-gather, DeepSpeed's reduce_bucket_size /
// allgather_bucket_size / overlap_comm (runtime/config/config.h has the key
// semantics). Private to the engine (runtime/engine/engine_state.h holds one);
// constructible on its own over a FlatLayout, a Communicator, DeviceOps and
// a BufferPool (tests/runtime/sharding/test_grad_reducer.cpp).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/node_groups.h"
#include "comm/ordered_reduce.h"
#include "kernels/quant/symmetric_quant.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/sharding/quantized_reduce.h"

// [Note: gradient buckets]
// reduce(u) hands unit u's gradient to the open bucket, piece by piece;
// when the bucket is full its collective starts, and a new bucket opens for
// the rest of u (so a unit larger than a bucket is split, and small units
// share one). complete() (the engine calls it at the end of a micro-batch,
// from step()) starts the partly filled bucket and completes every bucket.
//  - Stages 0/1 (the engine reduces at the accumulation boundary): when
//    the communication dtype is the gradients' own (grad_dtype, the
//    accumulator's: [Note: gradient accumulator] in
//    runtime/engine/engine.h), each unit's padded
//    flat gradient (GradTarget::full_grad) is all-reduced in the gradient
//    buffer itself, in runs of at most reduce_bucket_size elements (no
//    copy in or out; units live in separate buffers, so runs of different
//    units are never merged). Otherwise a bucket is up to
//    reduce_bucket_size consecutive elements of units' gradients, packed
//    (cast) into the communication dtype and all-reduced; on completion each
//    piece is cast back into its unit's full gradient with the stored scale.
//  - Stages 2/3 (every micro-batch): the input is the unit's micro-batch
//    gradient, a full buffer the reducer leases (micro_batch_grad). A
//    bucket holds, for every rank r, the same range [a, a+n) of rank r's
//    shard of each unit in it: block r of the send buffer is rank r's part,
//    so the reduce-scatter hands each rank the reduced part of its own
//    shard, which enters the gradient shard through
//    GradTarget::accumulate_shard. Per-rank block capacity is
//    max(1, reduce_bucket_size / world size) elements. A unit whose shard
//    fits one bucket and whose gradient is in the communication dtype is
//    sent from its gradient buffer itself (world blocks of one shard each),
//    as its own collective.
//  - Stage 1/2 post-step all-gather (all_gather_shards): buckets of the
//    same shape (per-rank block max(1, allgather_bucket_size / world size))
//    of the updated shards; a bucket that is exactly one unit is gathered in
//    place.
// At world size 1 no collective runs: each bucket's buffer already is its
// sum and its gathered whole, and only the casts and the stored scale are
// applied. Every element goes through the same casts as without buckets. By default
// (ReductionOrder::rank) every reduction is rank-ordered ([Note:
// rank-ordered reduction] in comm/ordered_reduce.h): a reduce-scatter
// bucket is an all-to-all into a scratch buffer (world x fill) and a
// left-to-right sum of the blocks; an all-reduce bucket is the same
// exchange over world blocks of its fill rounded up to a multiple of the
// world size (so stage 0/1 bucket capacities are rounded down to a
// multiple of it, and the padding is zeroed), the sum into this rank's
// block, and an in-place all-gather. Each element's sum is then rank 0 +
// rank 1 + ... in the communication dtype, so every bucket size and overlap
// on or off give bitwise the same gradients, and so do stages 0-3 without
// gradient accumulation (with it, stages 0/1 reduce each rank's sum of its
// micro-batches and stages 2/3 add the reduced micro-batches: another
// association, [Note: gradient semantics] in runtime/engine/engine.h); tested in
// tests/runtime/engine/test_grad_buckets.cpp. The all-reduce's all-gather is posted at
// fixed points only (when the next bucket has started, when the in-flight
// limit forces a bucket to finish, and in complete()), never because a test
// succeeded on one rank, so every rank issues the same collective sequence.
// With ReductionOrder::native the buckets use the backend's all-reduce and
// reduce-scatter: libnbc's reduce_scatter_block and its tree all-reduce use
// one fixed order, but the ring all-reduce that comm/mpi selects for
// messages of 64 KiB and more (mpi_nbc_tuning.h) starts each element's sum
// at a rank that depends on its position in the message, so at world sizes
// >= 3 results may differ in the last bits between stages and between
// bucket sizes; for a given configuration they are deterministic.
// With overlap_comm, at most kMaxBucketsInFlight buckets are in flight
// (bounding memory): when a bucket starts and more are in flight, the
// oldest is completed and retired (at these fixed points only, not when a
// test happens to succeed, so the buffers leased at any point of a step
// are a function of the calls: [Note: step replay] in
// runtime/plan/memory_replay.h); without it each bucket completes before the
// call that started it returns.
// qgZ (zero_quantized_gradients): with a format and the node layout of the
// data-parallel group, a stage 2/3 bucket's reduce-scatter runs as
// [Note: hierarchical quantized reduce-scatter] (runtime/sharding/
// quantized_reduce.h) into an fp32 receive buffer, which enters the shard
// through accumulate_shard as any other; the in-place and packed buckets
// are the same as above, and a bucket's second hop is posted where an
// all-reduce bucket's all-gather would be (the next bucket's start, the
// in-flight limit, complete()). Where the layout does not allow it (world
// size 1, nodes of unequal sizes, ranks not placed node by node) the
// reducer keeps the plain reduce-scatter and says why in note(). With
// error feedback each unit has a residual of its padded elements (fp32,
// MemCategory::residual, leased at construction and kept; zeroed then and
// by reset_residuals()), indexed as the unit's micro-batch gradient: the
// rank's own quantization error of those elements, added to them at their
// next reduction.

namespace zeroshard {

/// Bucket collectives in flight at most with overlap_comm (each holds a
/// bucket's send and receive buffers).
inline constexpr std::size_t kMaxBucketsInFlight = 2;

/// Where reduced gradients go (the engine's ArrayStore implements it; tests
/// their own arrays). Called by the reducer's thread only.
class GradTarget {
 public:
  virtual ~GradTarget() = default;
  /// Stages 0/1: unit u's padded full gradient (layout padded elements of
  /// options' grad_dtype, in the reducer's DeviceOps memory). The reducer
  /// reads it and overwrites it with the reduced sum times the stored scale.
  virtual void* full_grad(UnitId u) = 0;
  /// Stages 2/3: adds n reduced elements at `src` (src_type, in the
  /// reducer's DeviceOps memory; valid only during the call), times
  /// `scale`, into unit u's gradient shard from shard element `at` on, as
  /// DeviceOps::accumulate_cast does. Called once per reduced block, in
  /// increasing `at` for a unit.
  virtual void accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                                float scale) = 0;
};

/// What a GradReducer is configured with (the engine takes them from its
/// EngineConfig; runtime/config/config.h names the keys).
struct GradReducerOptions {
  int stage = 0;                              ///< ZeRO stage 0-3
  std::size_t reduce_bucket_size = 500000000;     ///< elements (> 0)
  std::size_t allgather_bucket_size = 500000000;  ///< elements (> 0)
  bool overlap = false;                       ///< overlap_comm: buckets run in the background
  DType compute_dtype = DType::f32;           ///< gradients' and parameters' storage dtype
  DType comm_dtype = DType::f32;              ///< dtype gradients are reduced in
  /// dtype of the target's gradients, the accumulator: GradTarget::full_grad
  /// at stages 0/1, the shard accumulate_shard adds into at stages 2/3 (the
  /// micro-batch gradients stay in compute_dtype).
  DType grad_dtype = DType::f32;
  /// Factor applied to reduced sums as they are stored (the engine: 1 for
  /// an fp32 accumulator, 1 / world size for a 16-bit one).
  float stored_scale = 1.0f;
  /// How reductions sum the ranks ([Note: rank-ordered reduction] in
  /// comm/ordered_reduce.h): rank order (the default) or the backend's.
  ReductionOrder order = ReductionOrder::rank;
  /// qgZ (zero_quantized_gradients): the format stage 2/3 buckets travel
  /// in ([Note: hierarchical quantized reduce-scatter]); unset: the plain
  /// reduce-scatter.
  std::optional<kernels::SymQuantFormat> quantized{};
  /// zeroshard.zeropp.error_feedback (with `quantized`): each unit's
  /// quantization residual is kept and fed back.
  bool error_feedback = false;
};

/// Bytes of the error-feedback residuals a GradReducer with these options
/// leases at construction on a layout whose data-parallel group is laid out
/// node by node (not one node of one rank): 4 x the units' padded elements
/// with qgZ and error feedback at stages 2/3, else 0. What the memory
/// estimate records (runtime/plan/memory_estimate.h). Pure.
std::uint64_t error_feedback_bytes(const FlatLayout& layout, const GradReducerOptions& options);

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
  PoolLease scratch;  ///< rank order, all-reduce: the all-to-all's receive buffer
  void* in_place = nullptr;  ///< all-reduce / all-gather: the unit's own buffer the collective runs on
  /// Declared last so that they are destroyed first: destroying a bucket
  /// waits for its collective before its buffers go back to the pool.
  CommWork work;           ///< native order and all-gathers
  OrderedReduction ordered;  ///< rank order: the reduction in flight
  QuantizedReduceScatter quantized;  ///< qgZ: the reduce-scatter in flight (recv: fp32)
};

/// Bucketed gradient reduction of one engine ([Note: gradient buckets]).
/// Every collective is on `comm` over buffers of `ops`' memory from `pool`.
/// Collective methods must be called in the same order on every rank
/// (SPMD). Not thread safe: the engine's thread.
class GradReducer {
 public:
  /// `layout` must be finalized for comm's world size; comm, layout, ops,
  /// pool and target must outlive the reducer. `nodes`: comm's node groups
  /// (comm/node_groups.h; must outlive the reducer), needed with
  /// options.quantized at stages 2/3 (InvariantError without them).
  GradReducer(Communicator& comm, const FlatLayout& layout, DeviceOps& ops, BufferPool& pool,
              GradReducerOptions options, GradTarget& target, const NodeGroups* nodes = nullptr);
  /// Drops what is left (as discard()).
  ~GradReducer() { discard(); }
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  const GradReducerOptions& options() const { return o_; }
  /// True when stage 2/3 buckets run quantized and hierarchically (qgZ).
  bool quantized() const { return hierarchical_; }
  /// One line on how qgZ runs, or why it falls back to the plain
  /// reduce-scatter ("" without qgZ); the engine prints it on rank 0.
  const std::string& note() const { return note_; }
  /// Unit u's error-feedback residual (padded elements, fp32, ops' memory;
  /// element i belongs to element i of the unit's micro-batch gradient), or
  /// nullptr without error feedback.
  float* residual(UnitId u);
  /// Zeroes every error-feedback residual (what loading a checkpoint does:
  /// residuals are not saved). Local.
  void reset_residuals();

  /// Stages 2/3: unit u's gradient buffer of this micro-batch (padded
  /// elements of the compute dtype in ops' memory), leased and zeroed on
  /// the first call of a micro-batch, released once reduce(u) has packed
  /// it. Throws what BufferPool::acquire throws.
  void* micro_batch_grad(UnitId u);

  /// Hands unit u's gradient to the buckets (stages 0/1: target.full_grad(u);
  /// stages 2/3: micro_batch_grad(u), zeros if never asked for). Starts
  /// every bucket that fills; without overlap completes it before
  /// returning. Collective. Throws CommError.
  void reduce(UnitId u);

  /// Starts the partly filled bucket, if any, and completes every bucket
  /// in flight: afterwards every reduced gradient is in the target.
  /// Collective. Throws CommError.
  void complete();

  /// Stages 1/2, after the optimizer: all-gathers every unit's shard inside
  /// its full parameter buffer full_params(u) (padded elements of the
  /// compute dtype in ops' memory; rank r's shard is elements [r*S, (r+1)*S)
  /// and is what this rank sends), in buckets of allgather_bucket_size.
  /// Collective. Throws CommError; InvariantError at stages 0/3.
  void all_gather_shards(const std::function<void*(UnitId)>& full_params);

  /// Drops every bucket and micro-batch gradient without applying them
  /// (waiting for collectives in flight first, so no buffer is released
  /// under MPI): what loading a checkpoint does to a half-finished
  /// micro-batch. Local; never throws.
  void discard() noexcept;

 private:
  std::size_t capacity(BucketKind kind) const;
  DType bucket_dtype(const Bucket& b) const;
  void convert(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale = 1.0f);
  void open_packed(Bucket& b, BucketKind kind, std::size_t capacity);
  void start_collective(Bucket& b);
  void finish_collective(Bucket& b);
  void launch(Bucket& b, std::deque<Bucket>& flight);
  bool ordered() const { return o_.order == ReductionOrder::rank; }
  BlockSum block_sum();
  void drain(std::deque<Bucket>& flight);
  void pack_all_reduce(UnitId u);
  void pack_reduce_scatter(UnitId u);
  void start_quantized(Bucket& b, const void* send);

  Communicator& comm_;
  const FlatLayout& layout_;
  DeviceOps& ops_;
  BufferPool& pool_;
  GradReducerOptions o_;
  GradTarget& target_;
  std::vector<PoolLease> micro_;  ///< stages 2/3: per unit, this micro-batch's gradient
  Bucket open_;                   ///< reduction bucket being filled (no pieces = none)
  std::deque<Bucket> in_flight_;  ///< started reduction buckets, in issue order
  std::vector<void*> gather_dst_; ///< all_gather_shards: each unit's full parameter buffer
  bool hierarchical_ = false;     ///< qgZ in use
  NodeLayout nodes_;              ///< qgZ: the node layout
  std::string note_;
  std::vector<PoolLease> residual_;  ///< qgZ with error feedback: per unit, padded fp32
};

}  // namespace zeroshard
