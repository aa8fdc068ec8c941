// Unsharder: ZeRO stage 3's parameter all-gathers (Rajbhandari et al.,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
// SC 2020, section 5.3), with DeepSpeed's prefetch of the next unit under
// overlap_comm and its reuse of a unit unsharded again next. Private to the
// engine (runtime/engine/engine_state.h holds one); constructible on its own over
// a FlatLayout, a Communicator, DeviceOps, a BufferPool and a ShardSource
// (tests/runtime/sharding/test_unsharder.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "kernels/quant/symmetric_quant.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"

// [Note: unshard order]
// unshard(u) / reshard(u) are counted per unit: nested unshards need as
// many reshards, and the full buffer of u is released when the count drops
// to zero (unless kept, below). With `gather` off (stages 0-2: every rank
// holds the full parameters) only the counting happens. With `gather` on:
//  - unshard(u) all-gathers every rank's shard of u (ShardSource::shard)
//    into a full buffer leased from the pool, unless u is gathered already
//    (prefetched, kept or persistent), and waits for it.
//  - The first micro-batch (until end_micro_batch()) records the order of
//    unshard calls. Afterwards, with overlap, unshard(u) finds u in the
//    recorded order (at the cursor, else its first occurrence; a unit not
//    recorded changes nothing) and moves the cursor past it. It then walks
//    the order from the cursor and starts the all-gather of each unit not
//    gathered yet (the prefetch) while the units walked so far weigh less
//    than prefetch_bucket_size elements (stage3_prefetch_bucket_size), and
//    asks the source to prefetch the first unit the walk did not reach (an
//    nvme read runs one unit ahead of the all-gathers). Every rank makes
//    the same calls, so every rank makes the same prefetch decision: the
//    prefetch is a collective.
//  - reshard(u) to count zero keeps u gathered when the recorded order
//    uses u again within max_reuse_distance elements
//    (stage3_max_reuse_distance: the weight of the units unsharded between
//    now and u's next use; 0 keeps u only when it is unsharded next, as the
//    last unit of forward is the first of backward), and releases it
//    otherwise. While recording nothing is kept.
//  - Weights: a unit weighs its padded element count, at least 1 (an empty
//    unit still takes a place in the walk). So the default bucket of 1
//    element prefetches exactly the next unit.
//  - Live elements: the padded elements of the full buffers of units that
//    are not persistent (unsharded, prefetched or kept). A prefetch never
//    takes them above max_live_parameters (stage3_max_live_parameters), and
//    a unit is kept only while they are within it; when unshard(u) must
//    gather u and the limit would be passed, the kept and prefetched units
//    with no unshard outstanding go first, the one used farthest ahead
//    first. Only units the loop holds unsharded itself can pass the limit
//    (one unit larger than it, or more nested unshards than fit).
//  - Persistent units (stage3_param_persistence_threshold, DeepSpeed's
//    ds_persist at the granularity of the all-gather): a unit every one of
//    whose parameters has at most param_persistence_threshold elements
//    (0 = none), taken in unit order while their total stays within
//    model_persistence_threshold, is all-gathered at its first unshard and
//    then kept: no all-gather per use, one after each optimizer step (in
//    refresh(), as DeepSpeed gathers its persistent parameters after the
//    step). Its buffer is accounted under MemCategory::persistent, not as
//    live elements.
//  - refresh() (after the optimizer changed the shards): prefetched and
//    kept full buffers are dropped; those of held and persistent units are
//    all-gathered again.
// A unit's full buffer is layout padded elements; rank r's shard is
// elements [r*S, (r+1)*S) of it, as the FlatLayout places them.
//
// [Note: ZeRO++ unsharding]
// Two options of ZeRO++ (Wang et al. 2023, arXiv 2306.10209, sections 4.1
// and 4.2) change where a full buffer's bytes come from, never the rules
// above:
//  - qwZ (options.quantized): each rank quantizes its shard into a chunk
//    ([Note: symmetric block quantization], kernels/quant/
//    symmetric_quant.h), the chunks are all-gathered as bytes, and every
//    chunk is dequantized into its place of the full buffer, the rank's own
//    included, so every rank computes with the same parameters: the full
//    buffer equals the dequantized shards exactly, within the format's
//    bound of the shards; the shards (the master copy in fp32 training, the
//    compute copy in mixed precision) are untouched. Also at world size 1.
//  - hpZ (a secondary communicator of k ranks, options.hpz_partition_size
//    = k): each unit has a secondary shard, padded / k elements in the
//    compute dtype leased at construction (MemCategory::secondary), for
//    this rank's position g in its group: elements [g P / k, (g + 1) P / k)
//    of the full buffer. A unit's first all-gather after construction,
//    refresh() or reset() runs over the world as above and, once complete,
//    copies that slice into the secondary shard; every later one (the
//    backward's, the next micro-batches') all-gathers the k secondary
//    shards of the group instead. The values are those of the world's
//    gather, bit for bit, so hpZ changes where the bytes travel, not the
//    results. refresh() marks every secondary shard stale before it
//    gathers the held and persistent units again.

namespace zeroshard {

/// A unit's parameter shard as a ShardSource hands it out.
struct ShardView {
  const void* data = nullptr;  ///< layout shard elements of the compute dtype (may be null for 0)
  bool host = false;           ///< in host memory (else in the Unsharder's DeviceOps memory)
};

/// Where the Unsharder reads each unit's parameter shard (the engine's
/// resident arrays or offload tiers; tests their own arrays). Called by the
/// Unsharder's thread only.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  /// Unit u's shard for an all-gather, valid until release(u). Errors
  /// (e.g. a failed swap-in) must be agreed on by every rank before it
  /// returns or throws (the all-gather follows). Called by every rank.
  virtual ShardView shard(UnitId u) = 0;
  /// Hint that shard(u) follows soon (start a read ahead). Must not throw.
  virtual void prefetch(UnitId /*u*/) noexcept {}
  /// The all-gather that read shard(u) is complete, or a prefetch of u is
  /// dropped: buffers held for u may go. Must not throw.
  virtual void release(UnitId /*u*/) noexcept {}
};

/// What an Unsharder is configured with (the engine: gather at stage 3,
/// overlap from zero_optimization.overlap_comm, its compute dtype, and the
/// zero_optimization.stage3_* knobs; [Note: unshard order] for what each
/// changes). Element counts are of the compute dtype, padded; all >= 0.
struct UnsharderOptions {
  bool gather = false;   ///< all-gather shards (stage 3); else count only
  bool overlap = false;  ///< overlap_comm: prefetch along the recorded order
  DType dtype = DType::f32;  ///< parameters' compute dtype
  /// stage3_prefetch_bucket_size: weight of the units the prefetch walks
  /// ahead of the current one; 0 = no prefetch, 1 = the next unit.
  std::int64_t prefetch_bucket_size = 1;
  /// stage3_max_live_parameters: most live elements a prefetch or a kept
  /// unit may make.
  std::int64_t max_live_parameters = 1000000000;
  /// stage3_max_reuse_distance: a unit used again within this weight stays
  /// gathered.
  std::int64_t max_reuse_distance = 0;
  /// stage3_param_persistence_threshold: units whose parameters all have
  /// at most this many elements are persistent; 0 = none.
  std::int64_t param_persistence_threshold = 0;
  /// stage3_model_persistence_threshold: most parameter elements (not
  /// padded) of all persistent units together.
  std::int64_t model_persistence_threshold = std::numeric_limits<std::int64_t>::max();
  /// qwZ (zero_quantized_weights): the format of the all-gathers over the
  /// world ([Note: ZeRO++ unsharding]); unset: the compute dtype as is.
  std::optional<kernels::SymQuantFormat> quantized{};
  /// hpZ (zero_hpz_partition_size): ranks of the secondary group; 1 = none.
  int hpz_partition_size = 1;
};

/// Bytes of the hpZ secondary shards an Unsharder with these options leases
/// at construction: the units' padded elements / hpz_partition_size in the
/// compute dtype, with gather on and hpz_partition_size > 1, else 0. What
/// the memory estimate records (runtime/plan/memory_estimate.h). Pure.
std::uint64_t hpz_secondary_bytes(const FlatLayout& layout, const UnsharderOptions& options);

/// Stage 3 unsharding of one engine ([Note: unshard order]). Collectives
/// on `comm` over buffers of `ops`' memory from `pool`; collective methods
/// must be called in the same order on every rank (SPMD). Not thread safe:
/// the engine's thread.
class Unsharder {
 public:
  /// `layout` must be finalized for comm's world size; comm, layout, ops,
  /// pool and source must outlive the unsharder. `secondary`: with hpZ
  /// (options.hpz_partition_size = k > 1, gather on) the communicator of
  /// this rank's k consecutive ranks, rank rank() % k in it (must outlive
  /// the unsharder); InvariantError when it is missing or of another size.
  Unsharder(Communicator& comm, const FlatLayout& layout, DeviceOps& ops, BufferPool& pool,
            UnsharderOptions options, ShardSource& source, Communicator* secondary = nullptr);
  /// Waits for collectives in flight, then drops every buffer (as reset()).
  ~Unsharder() { reset(); }
  Unsharder(const Unsharder&) = delete;
  Unsharder& operator=(const Unsharder&) = delete;

  const UnsharderOptions& options() const { return o_; }

  /// One more unshard of u: with gather, u's full buffer is complete on
  /// return (layout padded elements in ops' memory; full(u)). Collective
  /// with gather. Throws InvariantError for an unknown unit, CommError,
  /// and what ShardSource::shard and BufferPool::acquire throw.
  void unshard(UnitId u);
  /// One reshard of u ([Note: unshard order] for what is kept). No
  /// collective. Throws InvariantError naming the unit when u is not
  /// unsharded, or unknown; CommError.
  void reshard(UnitId u);

  /// Outstanding unshards of u. Throws InvariantError for an unknown unit.
  int count(UnitId u) const;
  /// True while u has a full buffer (unsharded, prefetched or kept).
  bool gathered(UnitId u) const;
  /// u's full buffer once its all-gather is complete (waits for one in
  /// flight), nullptr when u has none. Throws CommError.
  void* full(UnitId u);

  /// Ends the micro-batch: recording stops after the first, the cursor
  /// goes back to the recorded order's start. Local.
  void end_micro_batch();
  /// The shards changed (optimizer step, gather on): drops prefetched and
  /// kept full buffers (and the source's prefetches of units without one)
  /// and all-gathers those of units still unsharded, and of gathered
  /// persistent units, again. Collective. refresh() is
  /// regather(drop_stale()).
  void refresh();
  /// refresh()'s first half: completes every all-gather in flight and drops
  /// the full buffers and the source's prefetches (stale once the shards
  /// change); returns the units to gather again (still unsharded, or
  /// persistent). Local: no collective starts, the source's shards are not
  /// read.
  std::vector<UnitId> drop_stale();
  /// refresh()'s second half: all-gathers `units` (drop_stale's) again.
  /// Collective.
  void regather(const std::vector<UnitId>& units);
  /// Waits for collectives in flight, drops every buffer, zeroes every
  /// count and starts recording again (what loading a checkpoint does).
  /// Local; never throws.
  void reset() noexcept;

  /// True for a persistent unit ([Note: unshard order]; never with gather
  /// off). Throws InvariantError for an unknown unit.
  bool persistent(UnitId u) const;
  /// Padded elements of non-persistent units' full buffers now, and the
  /// most there have been since construction (or reset_peak()).
  std::int64_t live_elements() const { return live_; }
  std::int64_t peak_live_elements() const { return peak_live_; }
  /// Starts the peak over from live_elements(). Local.
  void reset_peak() { peak_live_ = live_; }
  /// All-gathers this unsharder has started for unit u (prefetches
  /// included; at world size 1 each is a copy of the shard, no
  /// collective). Throws InvariantError for an unknown unit.
  std::int64_t all_gathers(UnitId u) const;
  /// Of those, the all-gathers of hpZ secondary shards inside the group
  /// ([Note: ZeRO++ unsharding]). Throws InvariantError for an unknown unit.
  std::int64_t secondary_gathers(UnitId u) const;

  /// The recorded unshard order (gather with overlap only).
  const std::vector<UnitId>& order() const { return order_; }
  /// True until the first end_micro_batch() (and again after reset()).
  bool recording() const { return recording_; }

 private:
  struct Unit {
    PoolLease secondary;  ///< hpZ: this rank's secondary shard, for the unit's lifetime
    PoolLease full;    ///< the gathered full buffer
    PoolLease upload;  ///< a host shard copied into ops' memory for the collective
    PoolLease chunks;  ///< qwZ: every rank's quantized chunk (world x chunk bytes)
    CommWork work;     ///< pending all-gather into `full` (declared last: waited on first)
    int count = 0;
    bool persistent = false;
    bool secondary_valid = false;  ///< hpZ: the secondary shard holds the current parameters
    bool fill_secondary = false;   ///< hpZ: copy the slice when the world gather completes
    std::int64_t all_gathers = 0;
    std::int64_t secondary_gathers = 0;
  };
  Unit& unit(UnitId u);
  const Unit& unit(UnitId u) const;
  std::int64_t weight(UnitId u) const;
  void start(UnitId u);
  void start_world(UnitId u);
  void complete(UnitId u);
  void finish(UnitId u);
  void drop(UnitId u);
  void make_room(UnitId u);
  bool keep(UnitId u) const;
  std::size_t next_use(UnitId u) const;
  void prefetch_after(UnitId u);

  Communicator& comm_;
  const FlatLayout& layout_;
  DeviceOps& ops_;
  BufferPool& pool_;
  UnsharderOptions o_;
  ShardSource& source_;
  Communicator* secondary_ = nullptr;  ///< hpZ group (null: none)
  std::vector<Unit> units_;
  std::vector<UnitId> order_;
  bool recording_ = true;
  std::size_t cursor_ = 0;
  std::int64_t live_ = 0;
  std::int64_t peak_live_ = 0;
};

}  // namespace zeroshard
