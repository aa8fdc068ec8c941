// Private state of the Engine (runtime/engine/engine.h). Not installed; included
// only by the engine's own .cpp files.
//
// What the engine holds is owned by components, each with explicit inputs
// and its own tests (docs/design.md, "Components of the Engine"):
// EngineComms (the communicators and their tracing, the mesh position),
// GradNorm (tensor-parallel declarations, ties, the global norm),
// ShardOptimizer (parameter groups, the update over shards and state
// formats), and what finalize() makes for the layout (EngineParts: the
// ArrayStore, the GradReducer, the Unsharder and the adapters that connect
// them). EngineState keeps the engine's own: the configuration, the layout,
// the components, and the training loop's progress.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory_ledger.h"
#include "optimizer/loss_scaler.h"
#include "runtime/activation/activation_store.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_comms.h"
#include "runtime/engine/grad_norm.h"
#include "runtime/engine/reduce_order.h"
#include "runtime/observe/csv_monitor.h"
#include "runtime/observe/step_observer.h"
#include "runtime/ps/param_server.h"
#include "runtime/ps/ps_client.h"
#include "runtime/ps/ps_roles.h"
#include "runtime/sharding/array_store.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/grad_reducer.h"
#include "runtime/sharding/swap_sharing.h"
#include "runtime/sharding/unsharder.h"
#include "runtime/update/deferred_step.h"
#include "runtime/update/muon_step.h"
#include "runtime/update/shard_optimizer.h"

namespace zeroshard {

/// Where the training loop is: what a checkpoint restores (the steps and
/// the loss scale), the current micro-batch's reduce flags and the step's
/// reduce order.
struct StepProgress {
  std::int64_t micro_steps = 0;
  std::int64_t optimizer_steps = 0;
  std::int64_t boundary_steps = 0;  ///< accumulation boundaries so far (applied or skipped)
  LossScaler scaler;                ///< fp16 loss scale; its overflow count is the skipped steps
  std::int64_t consecutive_skipped = 0;  ///< boundaries skipped in a row (not saved in checkpoints)
  std::vector<bool> reduced;        ///< per unit: reduce_gradients() seen in this micro-batch
  ReduceOrder order;                ///< this step's reductions ([Note: reduce order check])
  /// A deferred optimizer step was started and not yet settled (the same on
  /// every rank: set by step(), cleared by settle_deferred_step).
  bool deferred_open = false;

  /// True while the current micro-batch ends a cycle of `accumulation`.
  bool boundary(std::int64_t accumulation) const { return (micro_steps + 1) % accumulation == 0; }
};

/// The ArrayStore as the other components see it (defined in
/// engine_step.cpp): the GradReducer's GradTarget (reduced gradients into
/// the units' full gradients at stages 0/1, accumulate_grad_shard at
/// stages 2/3), the Unsharder's ShardSource (each unit's stage 3 parameter
/// shard wherever its tier keeps it: resident on the compute device, in
/// host memory, or swapped in from nvme with the read agreed on `host`)
/// and GradNorm's GradSource. With a DeferredStep (zeroshard.
/// overlap_optimizer_step) a unit's shard waits for the unit's update,
/// agreed on `host` on every tier ([Note: deferred optimizer step]).
class StoreLink final : public GradTarget, public ShardSource, public GradSource {
 public:
  StoreLink(ArrayStore& store, Communicator& host, const StepProgress& progress, std::int64_t accumulation)
      : store_(store), host_(host), progress_(progress), accumulation_(accumulation) {}
  // GradTarget
  void* full_grad(UnitId u) override;
  void accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                        float scale) override;
  // ShardSource
  ShardView shard(UnitId u) override;
  void prefetch(UnitId u) noexcept override;
  void release(UnitId u) noexcept override;
  /// The deferred step the shards wait for (null: none). Not owned.
  void set_deferred(DeferredStep* deferred) { deferred_ = deferred; }
  // GradSource
  std::byte* grads(UnitId u) override;
  kernels::GradStats shard_stats(UnitId u) override;

 private:
  ArrayStore& store_;
  Communicator& host_;
  const StepProgress& progress_;
  std::int64_t accumulation_;
  DeferredStep* deferred_ = nullptr;
  void wait_for_update(UnitId u);
};

class EngineState;
struct AsyncCheckpoint;  // runtime/engine/save_phases.h

/// What finalize() makes for the finalized layout, in construction order
/// (the store outlives the reducer and unsharder whose link uses it).
struct EngineParts {
  /// Allocates every array (ArrayStore), then the reducer and the
  /// unsharder with the options the memory estimator uses too
  /// (runtime/engine/engine_options.h). Throws what they throw.
  EngineParts(EngineState& s, const SwapSharers& sharers);
  ArrayStore store;
  StoreLink link;
  GradReducer reducer;  ///< gradient reduction buckets ([Note: gradient buckets])
  Unsharder unsharder;  ///< unshard/reshard counting, stage 3 all-gathers and prefetch
  MuonStep muon;        ///< Muon's matrices and owners (none unless optimizer.type is Muon)
  /// zeroshard.overlap_optimizer_step's background step (else null); last,
  /// so that its thread ends before the store goes.
  std::unique_ptr<DeferredStep> deferred;
};

class EngineState {
 public:
  /// `device` carries the collectives of the arrays (in `ops`' memory),
  /// `host` the host-side messages (the same object for the cpu device);
  /// on a mesh (not null) `device` is mesh->dp_group(). Every communicator
  /// is wrapped by EngineComms.
  EngineState(const EngineConfig& c, Communicator& device, Communicator& host, std::unique_ptr<DeviceOps> ops,
              const Mesh* mesh);
  ~EngineState();  // engine.cpp: AsyncCheckpoint is complete there

  EngineConfig config;
  /// Step breakdown, straggler view, spans ([Note: step breakdown]); its
  /// tracer is every component's.
  std::unique_ptr<StepObserver> observer;
  /// csv_monitor's files on world rank 0 (opened by finalize()), else null.
  std::unique_ptr<CsvMonitor> monitor;
  EngineComms comms;
  MemoryLedger ledger;
  /// Engine::activations()'s store (null until first used); after the
  /// ledger, which it records into.
  std::unique_ptr<ActivationStore> activations;
  std::unique_ptr<DeviceOps> ops;  ///< the compute device's memory and kernels
  BufferPool pool;
  FlatLayout layout;
  GradNorm norm;             ///< tp declarations, ties, the global norm ([Note: engine on a mesh])
  ShardOptimizer optimizer;  ///< parameter groups and the update
  std::unique_ptr<EngineParts> parts;  ///< null until finalize() succeeds
  /// Async saves' staging area and the save in flight (null until the
  /// first async save, or finalize() with checkpoint.async); after `parts`:
  /// its staging lease goes back to the store's pool first.
  std::unique_ptr<AsyncCheckpoint> async_checkpoint;
  /// [Note: parameter-server layout]: the roles (the Engine's; null
  /// without parameter_server), and what finalize() makes: the server on a
  /// server rank, the client on a worker (after `parts`, whose store it
  /// pushes from: it says goodbye first).
  const ParameterServerRoles* roles = nullptr;
  std::unique_ptr<ParameterServer> server;
  std::unique_ptr<ParameterServerClient> ps_client;
  StepProgress progress;
  /// The loop's model configuration (Engine::set_model_config; null: none
  /// given), recorded in and checked against checkpoints.
  nlohmann::json model_config;
  /// Why the state may not be used ("" = usable): an agreed failure left it
  /// partly written ([Note: storage phases], runtime/engine/storage_phase.h).
  std::string unusable;

  bool finalized() const { return parts != nullptr || server != nullptr; }
  /// finalize()'s parts (InvariantError before finalize(), and on a
  /// parameter server, which has none).
  EngineParts& finalized_parts() const {
    ZS_CHECK(server == nullptr,
             "this rank is a parameter server (parameter_server.servers): its loop is Engine::serve(), not the "
             "training calls");
    ZS_CHECK(parts != nullptr, "the engine is not finalized: call finalize() first");
    return *parts;
  }
  ArrayStore& store() const { return finalized_parts().store; }
  GradReducer& reducer() const { return finalized_parts().reducer; }
  Unsharder& unsharder() const { return finalized_parts().unsharder; }
  MuonStep& muon() const { return finalized_parts().muon; }
  /// The deferred step (null without zeroshard.overlap_optimizer_step or
  /// before finalize()).
  DeferredStep* deferred() const { return parts == nullptr ? nullptr : parts->deferred.get(); }
  /// The observer's tracer.
  Tracer* tracer() const { return &observer->tracer(); }

  int rank() const { return comms.dp().rank(); }
  int world() const { return comms.dp().world_size(); }
  int stage() const { return config.zero.stage; }
  DType dtype() const { return config.compute_dtype; }
  bool mixed() const { return config.compute_dtype != DType::f32; }
  /// True while the current micro-batch ends an accumulation cycle.
  bool boundary() const { return progress.boundary(config.gradient_accumulation_steps); }
  const UnitInfo& info(UnitId u) const { return layout.unit(u); }
  UnitId units() const { return static_cast<UnitId>(layout.units().size()); }
};

/// Ends the deferred optimizer step that step() started, if one is open
/// ([Note: deferred optimizer step]): joins it, agreed on the host
/// communicator as a storage phase of `call` (a failure on any rank is the
/// same AgreedError on every rank and leaves the engine unusable), then
/// clears the gradients it read. Every call that reads or writes the
/// engine's arrays or swap files, other than a unit's unshard, runs it
/// first. Collective while a step is open; no-op otherwise. Defined in
/// engine_step.cpp.
void settle_deferred_step(EngineState& s, const char* call);
/// [Note: parameter-server layout]: on a worker with pulls in flight
/// (parameter_server.staleness > 0), installs them all, agreed over the
/// workers as a storage phase of `call`, and gathers the parameters again.
/// Collective over the workers then (every worker has the same pulls in
/// flight); no-op otherwise. Defined in engine_step.cpp.
void settle_parameter_server(EngineState& s, const char* call);
/// Throws ConfigError naming parameter_server.servers and `why` for
/// `call`, which the parameter-server layout does not offer. Defined in
/// engine.cpp.
void refuse_with_servers(const EngineState& s, const char* call, const char* why);
/// Throws ConfigError naming `call` and parameter_server.push when this
/// is a "direct" worker (its servers hold one state for every worker, in
/// no rank's layout: no checkpoint carries it).
void refuse_direct_push(const EngineState& s, const char* call);
/// For calls on one rank that read its arrays (optimizer_state,
/// param_shard, offload_stats): waits for the deferred step's thread
/// without closing the step (the next collective call settles it). Throws
/// its error, if it failed. Defined in engine_step.cpp.
void join_deferred_step(EngineState& s);
/// load_checkpoint's start: ends an open deferred step, dropping its error
/// (the state it wrote, or failed to, is replaced) and the gradients it
/// read. Local; never throws. Defined in engine_step.cpp.
void discard_deferred_step(EngineState& s) noexcept;

/// Unit u's full flat buffer (padded elements of t, host memory) gathered
/// from every rank's `shard` (host memory, shard elements) on the host
/// communicator. Collective.
std::vector<std::byte> gather_host(EngineState& s, UnitId u, const void* shard, DType t);

/// The units and parameters of `s`'s layout as a checkpoint manifest
/// records them (names, sizes, shapes, groups, tp split dimensions, state
/// formats). After finalize(). Defined in engine_save.cpp.
std::vector<ManifestUnit> manifest_units(const EngineState& s);

/// finalize()'s observability part: when the observer gathers, the clock
/// offset to the world's rank 0 and the common origin, and the observer
/// started on the unwrapped world (collective over the world: the mesh's,
/// else the host communicator). Defined in engine_observe.cpp.
void start_observer(EngineState& s);
/// finalize()'s csv_monitor part: world rank 0 opens the monitor's files;
/// a folder it cannot write is the same IoError on every rank. Collective
/// over the world when csv_monitor is on. Defined in engine_observe.cpp.
void open_monitor(EngineState& s);
/// step()'s end at an accumulation boundary with the monitor open: the
/// step's row (runtime/observe/csv_monitor.h). Defined in engine_observe.cpp.
void write_monitor_step(EngineState& s, const StepResult& r);
/// step()'s end at an accumulation boundary when the observer gathers:
/// memory counters, the breakdown, the straggler view. Collective over the
/// observer's communicator. Defined in engine_observe.cpp.
void end_observed_step(EngineState& s);

}  // namespace zeroshard
