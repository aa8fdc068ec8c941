// Private state of the Engine (runtime/engine/engine.h). Not installed; included
// only by the engine's own .cpp files.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/cast.h"
#include "runtime/checkpoint/mesh_folders.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/engine/engine.h"
#include "runtime/sharding/array_store.h"
#include "runtime/sharding/grad_reducer.h"
#include "comm/comms_log.h"
#include "comm/node_groups.h"
#include "comm/traced_communicator.h"
#include "optimizer/loss_scaler.h"
#include "runtime/observe/step_observer.h"
#include "runtime/sharding/swap_sharing.h"
#include "runtime/sharding/unsharder.h"

namespace zeroshard {

/// One parameter group's name and configured values.
struct GroupState {
  std::string name;
  double lr = 0;            ///< as OptimizerHyper::lr (a Python float's double)
  double weight_decay = 0;  ///< as OptimizerHyper::weight_decay
};

/// What the engine holds for one unit on this rank besides its arrays
/// (those are the ArrayStore's, runtime/sharding/array_store.h).
struct UnitState {
  bool reduced = false;  ///< reduce_gradients() seen in this micro-batch
  // Parameter runs inside the buffers the optimizer updates (for stage 0 the
  // whole unit, with shard_offset == flat offset; else this rank's shard).
  std::vector<ShardSegment> segments;
};

/// The engine's GradTarget (runtime/sharding/grad_reducer.h): reduced gradients go
/// into the units' full gradients (stages 0/1) or gradient shards
/// (accumulate_grad_shard, stages 2/3).
class EngineGradTarget final : public GradTarget {
 public:
  explicit EngineGradTarget(EngineState& s) : s_(s) {}
  void* full_grad(UnitId u) override;
  void accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                        float scale) override;

 private:
  EngineState& s_;
};

/// The engine's ShardSource (runtime/sharding/unsharder.h): each unit's stage 3
/// parameter shard wherever its tier keeps it (resident on the compute
/// device, in host memory, or swapped in from nvme: runtime/sharding/array_store.h).
class EngineShardSource final : public ShardSource {
 public:
  explicit EngineShardSource(EngineState& s) : s_(s) {}
  ShardView shard(UnitId u) override;
  void prefetch(UnitId u) noexcept override;
  void release(UnitId u) noexcept override;

 private:
  EngineState& s_;
};

/// comms_logger's log for `config` (null when off); verbose lines go to
/// stdout on rank 0 only. Throws ConfigError for an unknown prof_ops name.
/// Defined in engine_observe.cpp.
std::unique_ptr<CommsLog> make_comms_log(const ObserveConfig& config, int rank);

class EngineState {
 public:
  /// `comm` carries the collectives of the arrays (in `ops`' memory),
  /// `host_comm` the host-side messages (norm and overflow flag, agreed
  /// errors, checkpoint metadata and gathers of host copies); the same
  /// object for the cpu device.
  /// Both are wrapped in TracedCommunicators (comm/traced_communicator.h)
  /// that number, label and, as configured, time, log and watch every
  /// collective (runtime/config/observe_config.h).
  EngineState(const EngineConfig& c, Communicator& user_comm, Communicator& user_host,
              std::unique_ptr<DeviceOps> ops)
      : config(c),
        comms_log(make_comms_log(c.observe, user_comm.rank())),
        observer(std::make_unique<StepObserver>(c.observe, c.steps_per_print)),
        traced_comm(std::make_unique<TracedCommunicator>(user_comm, "dp", traced_options())),
        traced_host(&user_host == &user_comm
                        ? nullptr
                        : std::make_unique<TracedCommunicator>(user_host, "dp.host", traced_options())),
        comm(*traced_comm),
        host_comm(traced_host ? *traced_host : *traced_comm),
        ops(std::move(ops)),
        pool(ledger, *this->ops) {}

  EngineConfig config;
  /// comms_logger's log (null when off), shared by every traced communicator.
  std::unique_ptr<CommsLog> comms_log;
  /// Step breakdown, straggler view, spans ([Note: step breakdown]).
  std::unique_ptr<StepObserver> observer;
  std::unique_ptr<TracedCommunicator> traced_comm;
  std::unique_ptr<TracedCommunicator> traced_host;  ///< null when the host communicator is the device one
  std::unique_ptr<TracedCommunicator> traced_world;  ///< on a mesh
  std::unique_ptr<TracedCommunicator> traced_tp;     ///< on a mesh
  std::unique_ptr<TracedCommunicator> traced_pp;     ///< on a mesh: for the caller (pp_communicator())
  Communicator& comm;
  Communicator& host_comm;
  /// The options every traced communicator of this engine gets.
  TracedOptions traced_options() const;
  /// Every traced communicator of this engine (non-null ones).
  std::vector<TracedCommunicator*> traced_all() const;
  MemoryLedger ledger;
  std::unique_ptr<DeviceOps> ops;       ///< the compute device's memory and kernels
  BufferPool pool;
  FlatLayout layout;
  LossScaler scaler;
  std::vector<GroupState> groups;
  std::vector<UnitState> units;
  bool finalized = false;
  std::int64_t micro_steps = 0;
  std::int64_t optimizer_steps = 0;

  /// Every unit's arrays and their tiers; made by finalize() (declared
  /// before the reducer and unsharder, whose targets use it: destroyed
  /// after them).
  std::unique_ptr<ArrayStore> store;

  EngineGradTarget grad_target{*this};
  std::unique_ptr<GradReducer> reducer;  ///< gradient reduction buckets; made by finalize()

  EngineShardSource shard_source{*this};
  /// ZeRO++'s groups of the data-parallel communicator, made by finalize()
  /// before the reducer and unsharder (declared before them: destroyed
  /// after): hpZ's k consecutive ranks, qgZ's nodes.
  std::unique_ptr<Communicator> hpz_comm;
  NodeGroups nodes;
  /// unshard/reshard counting, stage 3 all-gathers and prefetch; made by
  /// finalize().
  std::unique_ptr<Unsharder> unsharder;

  std::int64_t boundary_steps = 0;  ///< accumulation boundaries so far (applied or skipped)
  /// The observer's tracer, or null before init().
  Tracer* tracer() const { return observer ? &observer->tracer() : nullptr; }

  /// Why the state may not be used ("" = usable): an agreed failure left it
  /// partly written ([Note: storage phases], runtime/engine/storage_phase.h).
  std::string unusable;

  // The mesh ([Note: engine on a mesh], runtime/engine/engine.h): the world and
  // tensor-parallel communicators (null without a mesh) and each declared
  // parameter's layout (by ParamId; missing = not declared).
  Communicator* world_comm = nullptr;
  Communicator* tp_comm = nullptr;
  std::vector<std::optional<TensorParallel>> param_tp;
  /// Pipeline stages of the mesh and this rank's (1 and 0 without one).
  int pp_size = 1;
  int pp_rank = 0;
  /// A parameter tied to copies on other ranks (Engine::tie_parameter).
  struct Tie {
    ParamId param = -1;
    Communicator* group = nullptr;
  };
  std::vector<Tie> ties;  ///< in tie_parameter order

  int tp_size() const { return tp_comm ? tp_comm->world_size() : 1; }
  /// This rank's place on the mesh for the checkpoint folders.
  MeshPosition mesh_position() const {
    return MeshPosition{.dp = world(), .tp = tp_size(), .tp_rank = tp_rank(), .pp = pp_size, .pp_rank = pp_rank};
  }
  int tp_rank() const { return tp_comm ? tp_comm->rank() : 0; }
  /// The communicator the global norm and the Inf/NaN flag are summed on.
  Communicator& norm_comm() const { return world_comm ? *world_comm : host_comm; }
  TensorParallel param_parallel(ParamId p) const {
    const auto i = static_cast<std::size_t>(p);
    return i < param_tp.size() && param_tp[i] ? *param_tp[i] : TensorParallel::replicated();
  }

  int rank() const { return comm.rank(); }
  int world() const { return comm.world_size(); }
  int stage() const { return config.zero.stage; }
  DType dtype() const { return config.compute_dtype; }
  bool mixed() const { return config.compute_dtype != DType::f32; }
  /// True while the current micro-batch ends an accumulation cycle.
  bool boundary() const { return (micro_steps + 1) % config.gradient_accumulation_steps == 0; }
  UnitState& unit(UnitId u);
  const UnitInfo& info(UnitId u) const { return layout.unit(u); }
  /// Learning rate of group g at applied step k (0-based).
  double lr_at(GroupId g, std::int64_t k) const;
};

/// Unit u's full flat buffer (padded elements of t, host memory) gathered
/// from every rank's `shard` (host memory, shard elements) on host_comm.
/// Collective.
std::vector<std::byte> gather_host(EngineState& s, UnitId u, const void* shard, DType t);

/// Tied parameters ([Note: engine on a mesh]): sums each tied gradient
/// (the part this rank updates) over its group. Collective over every
/// tie's group, in tie order. Defined in engine_mesh.cpp.
void reduce_tied_gradients(EngineState& s);
/// finalize()'s tie checks (see Engine::finalize): collective over every
/// tie's group, then agreed over the world. Defined in engine_mesh.cpp.
void check_ties(EngineState& s);
/// Mesh with tp > 1 or tied parameters ([Note: engine on a mesh]): averages
/// the replicated parameters' gradients over the tp group (tp > 1) and
/// returns this rank's share of the global squared norm (tied copies on
/// their group's rank 0 only) and Inf/NaN count (to be summed over the
/// world). Collective over the tp group when tp > 1. Defined in
/// engine_mesh.cpp.
kernels::GradStats mesh_grad_stats(EngineState& s);
/// finalize()'s mesh checks: every parameter declared, equal layouts over
/// the tp group. Collective over the tp group. Throws ConfigError /
/// AgreedConfigError.
void check_mesh_declarations(EngineState& s);

struct Manifest;
struct ManifestWeights;


/// save_checkpoint's consolidated weights (zero_optimization.
/// stage3_gather_16bit_weights_on_model_save): writes <dir>/model.safetensors
/// on rank 0, every parameter of manifest `m` (this engine's, made by the
/// save) in the compute dtype, in model order, with metadata from `m` (and
/// tp_size / tp_rank on a mesh). Stages 0-2: rank 0 writes its full compute
/// copy unit by unit; stage 3: each unit's shards, read from their tier,
/// are all-gathered over host_comm (padded elements of the compute dtype on
/// every rank, one unit at a time) and appended by rank 0. Every phase is
/// agreed: a failure on any rank (a swap read, the write) throws the same
/// AgreedIoError on every rank. Returns the file's entry (size, CRC-32) on
/// rank 0, recorded = false elsewhere. Collective over host_comm. Defined in
/// checkpoint_weights.cpp.
ManifestWeights write_checkpoint_weights(EngineState& s, const std::string& dir, const Manifest& m);

/// finalize()'s observability part: when the observer gathers, the clock
/// offset to the world's rank 0 and the common origin, and the observer
/// started on the unwrapped world (collective over the world: the mesh's,
/// else the host communicator).
void start_observer(EngineState& s);
/// The unwrapped world: the mesh's world, else the host communicator.
Communicator& raw_world(const EngineState& s);
/// step()'s end at an accumulation boundary when the observer gathers:
/// memory counters, the breakdown, the straggler view. Collective over the
/// host communicator.
void end_observed_step(EngineState& s);

/// Runs the optimizer on every unit's local shard (swapping sub-groups
/// through the pipeline when any array is on nvme). `step` is the 1-based
/// optimizer step, `grad_scale` the factor applied to stored gradients.
/// Defined in engine_optimizer.cpp.
void run_optimizer(EngineState& s, std::int64_t step, float grad_scale);

/// The bytes of state array k of unit u (UnitStates: fp32 / bf16 values,
/// 8-bit codes or absmax) that hold window w, a rank's shard: every window
/// is on this rank at stage 0, only its own (w = rank) at stages 1-3
/// (InvariantError otherwise). Read from nvme when swapped. Defined in
/// engine_states.cpp.
std::vector<std::byte> state_array_window(EngineState& s, UnitId u, int k, int w);
/// Optimizer state `state` (optimizer_state_name's index) of unit u over
/// window w as shard-many fp32 values: fp32 states as stored, 8-bit ones
/// dequantized (dequantize_blockwise with their absmax: signed map for
/// exp_avg, unsigned for exp_avg_sq). Windows as state_array_window.
std::vector<float> state_window_f32(EngineState& s, UnitId u, int state, int w);
/// The state arrays of window w of unit u holding `values` (shard-many
/// fp32 values of each optimizer state, in state order): fp32 as given,
/// 8-bit quantized blockwise from the window's start (quantize_blockwise):
/// one byte buffer per state array, sized as state_array_window's.
std::vector<std::vector<std::byte>> state_arrays_from_f32(const EngineState& s, UnitId u,
                                                          const std::vector<std::vector<float>>& values);

}  // namespace zeroshard
