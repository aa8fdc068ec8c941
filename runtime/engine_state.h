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
#include "runtime/loss_scaler.h"

namespace zeroshard {

/// One parameter group's name and configured values.
struct GroupState {
  std::string name;
  float lr = 0;
  float weight_decay = 0;
};

/// Everything the engine holds for one unit on this rank.
struct UnitState {
  // Parameters in the compute dtype. Stages 0-2: the padded full flat
  // buffer, persistent. Stage 3: this rank's shard, persistent; `gathered`
  // holds the full buffer while unsharded (or prefetched).
  TypedBuffer params;
  PoolLease gathered;
  CommWork gather_work;  ///< pending all-gather into `gathered`
  int unshard_count = 0;

  // fp32 master weights, mixed precision only: full at stage 0, else shard.
  AlignedBuffer<float> master;

  // Gradients in the compute dtype. Stages 0/1: padded full buffer,
  // persistent (`grad_full`). Stages 2/3: `grad_lease` is the full buffer of
  // the current micro-batch; `grad_shard` accumulates the reduce-scattered
  // shard across micro-batches.
  TypedBuffer grad_full;
  PoolLease grad_lease;
  TypedBuffer grad_shard;
  bool reduced = false;     ///< reduce_gradients() seen in this micro-batch
  CommWork reduce_work;     ///< stages 0/1: pending all-reduce
  PoolLease reduce_buffer;  ///< stages 0/1: the buffer in the communication dtype, if it differs

  // Optimizer states (fp32): full padded buffers at stage 0, shards otherwise.
  std::vector<AlignedBuffer<float>> states;
  // Parameter runs inside the buffers the optimizer updates (for stage 0 the
  // whole unit, with shard_offset == flat offset; else this rank's shard).
  std::vector<ShardSegment> segments;
};

/// A reduce-scatter in flight (stages 2/3).
struct PendingReduce {
  UnitId unit = -1;
  PoolLease send;  ///< full gradient of the micro-batch, in the communication dtype
  PoolLease recv;  ///< this rank's reduced block, in the communication dtype
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
  LossScaler scaler;
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
  DType dtype() const { return config.compute_dtype; }
  bool mixed() const { return config.compute_dtype != DType::f32; }
  DType comm_dtype() const { return config.communication_data_type.value_or(DType::f32); }
  /// Factor applied to reduced gradient sums as they are stored: 16-bit
  /// buffers hold the mean over ranks (no overflow of the sum), fp32 the sum.
  float stored_scale() const { return mixed() ? 1.0f / static_cast<float>(world()) : 1.0f; }
  UnitState& unit(UnitId u);
  const UnitInfo& info(UnitId u) const { return layout.unit(u); }
  /// Learning rate of group g at applied step k (0-based).
  double lr_at(GroupId g, std::int64_t k) const;
};

/// Stages 2/3: adds n reduced gradient elements (`src`, of `src_type`),
/// times `scale`, into unit u's gradient shard starting at shard element
/// `at`, wherever the shard lives (memory or an offload tier). The
/// reduction code calls it once per reduced block.
void accumulate_grad_shard(EngineState& s, UnitId u, std::size_t at, const void* src, DType src_type,
                           std::size_t n, float scale);

}  // namespace zeroshard
