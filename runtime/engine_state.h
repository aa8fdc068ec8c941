// Private state of the Engine (runtime/engine.h). Not installed; included
// only by the engine's own .cpp files.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "runtime/buffer_pool.h"
#include "runtime/engine.h"

namespace zeroshard {

/// One parameter group's name and effective values.
struct GroupState {
  std::string name;
  float lr = 0;
  float weight_decay = 0;
};

/// Everything the engine holds for one unit on this rank.
struct UnitState {
  // Parameters. Stages 0-2: the padded full flat buffer, persistent.
  // Stage 3: this rank's shard, persistent; `gathered` holds the full buffer
  // while unsharded (or prefetched).
  AlignedBuffer<float> params;
  PoolLease gathered;
  CommWork gather_work;  ///< pending all-gather into `gathered`
  int unshard_count = 0;

  // Gradients. Stages 0/1: padded full buffer, persistent (`grad_full`).
  // Stages 2/3: `grad_lease` is the full buffer of the current micro-batch;
  // `grad_shard` accumulates the reduce-scattered shard across micro-batches.
  AlignedBuffer<float> grad_full;
  PoolLease grad_lease;
  AlignedBuffer<float> grad_shard;
  bool reduced = false;  ///< reduce_gradients() seen in this micro-batch
  CommWork reduce_work;  ///< stages 0/1: pending all-reduce of grad_full

  // Optimizer states: full padded buffers at stage 0, shards otherwise.
  std::vector<AlignedBuffer<float>> states;
  // Parameter runs inside the buffers the optimizer updates (for stage 0 the
  // whole unit, with shard_offset == flat offset; else this rank's shard).
  std::vector<ShardSegment> segments;
};

/// A reduce-scatter in flight (stages 2/3).
struct PendingReduce {
  UnitId unit = -1;
  PoolLease send;  ///< full gradient buffer of the micro-batch
  PoolLease recv;  ///< this rank's reduced block
  CommWork work;
};

class EngineState {
 public:
  EngineState(const EngineConfig& c, Communicator& comm) : config(c), comm(comm), pool(ledger) {}

  EngineConfig config;
  Communicator& comm;
  MemoryLedger ledger;
  BufferPool pool;
  FlatLayout layout;
  std::vector<GroupState> groups;
  std::vector<UnitState> units;
  bool finalized = false;
  std::int64_t micro_steps = 0;
  std::int64_t optimizer_steps = 0;

  std::deque<PendingReduce> pending;  ///< reduce-scatters in issue order

  // Stage 3 prefetch: the unit order of the first micro-batch's unshard
  // calls, recorded once, and a cursor into it.
  std::vector<UnitId> order;
  bool recording = true;
  std::size_t cursor = 0;

  int rank() const { return comm.rank(); }
  int world() const { return comm.world_size(); }
  int stage() const { return config.zero.stage; }
  UnitState& unit(UnitId u);
  const UnitInfo& info(UnitId u) const { return layout.unit(u); }
};

}  // namespace zeroshard
