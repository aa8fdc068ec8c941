// Unsharder: ZeRO stage 3's parameter all-gathers (Rajbhandari et al.,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
// SC 2020, section 5.3), with DeepSpeed's prefetch of the next unit under
// overlap_comm and its reuse of a unit unsharded again next. Private to the
// engine (runtime/engine_state.h holds one); constructible on its own over
// a FlatLayout, a Communicator, DeviceOps, a BufferPool and a ShardSource
// (tests/runtime/test_unsharder.cpp).
//
// [Note: unshard order]
// unshard(u) / reshard(u) are counted per unit: nested unshards need as
// many reshards, and the full buffer of u is released when the count drops
// to zero. With `gather` off (stages 0-2: every rank holds the full
// parameters) only the counting happens. With `gather` on:
//  - unshard(u) all-gathers every rank's shard of u (ShardSource::shard)
//    into a full buffer leased from the pool, unless u is gathered already
//    (prefetched, or kept), and waits for it.
//  - The first micro-batch (until end_micro_batch()) records the order of
//    unshard calls. Afterwards, with overlap, unshard(u) finds u in the
//    recorded order (at the cursor, else its first occurrence; a unit not
//    recorded changes nothing) and moves the cursor past it; it then starts
//    the all-gather of the unit recorded next (the prefetch) and asks the
//    source to prefetch the one after that (an nvme read runs one unit
//    ahead of the all-gather). Every rank makes the same calls, so every
//    rank makes the same prefetch decision: the prefetch is a collective.
//  - reshard(u) to count zero keeps u gathered when the recorded order
//    says u is unsharded next (the last unit of forward is the first of
//    backward: DeepSpeed's reuse distance 0), and releases it otherwise.
//    While recording nothing is kept.
//  - refresh() (after the optimizer changed the shards): prefetched full
//    buffers are dropped, held ones are all-gathered again.
// A unit's full buffer is layout padded elements; rank r's shard is
// elements [r*S, (r+1)*S) of it, as the FlatLayout places them.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "runtime/buffer_pool.h"
#include "runtime/device_ops.h"
#include "runtime/flat_layout.h"

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
/// overlap from zero_optimization.overlap_comm, its compute dtype).
struct UnsharderOptions {
  bool gather = false;   ///< all-gather shards (stage 3); else count only
  bool overlap = false;  ///< overlap_comm: prefetch along the recorded order
  DType dtype = DType::f32;  ///< parameters' compute dtype
};

/// Stage 3 unsharding of one engine ([Note: unshard order]). Collectives
/// on `comm` over buffers of `ops`' memory from `pool`; collective methods
/// must be called in the same order on every rank (SPMD). Not thread safe:
/// the engine's thread.
class Unsharder {
 public:
  /// `layout` must be finalized for comm's world size; comm, layout, ops,
  /// pool and source must outlive the unsharder.
  Unsharder(Communicator& comm, const FlatLayout& layout, DeviceOps& ops, BufferPool& pool,
            UnsharderOptions options, ShardSource& source);
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
  /// The shards changed (optimizer step, gather on): drops prefetched full
  /// buffers (and the source's prefetches of units without one) and
  /// all-gathers those of units still unsharded again. Collective.
  void refresh();
  /// Waits for collectives in flight, drops every buffer, zeroes every
  /// count and starts recording again (what loading a checkpoint does).
  /// Local; never throws.
  void reset() noexcept;

  /// The recorded unshard order (gather with overlap only).
  const std::vector<UnitId>& order() const { return order_; }
  /// True until the first end_micro_batch() (and again after reset()).
  bool recording() const { return recording_; }

 private:
  struct Unit {
    PoolLease full;    ///< the gathered full buffer
    PoolLease upload;  ///< a host shard copied into ops' memory for the collective
    CommWork work;     ///< pending all-gather into `full` (declared last: waited on first)
    int count = 0;
  };
  Unit& unit(UnitId u);
  const Unit& unit(UnitId u) const;
  void start(UnitId u);
  void finish(UnitId u);
  void prefetch_after(UnitId u);

  Communicator& comm_;
  const FlatLayout& layout_;
  DeviceOps& ops_;
  BufferPool& pool_;
  UnsharderOptions o_;
  ShardSource& source_;
  std::vector<Unit> units_;
  std::vector<UnitId> order_;
  bool recording_ = true;
  std::size_t cursor_ = 0;
};

}  // namespace zeroshard
