// The Engine: ZeRO stages 0-3 over a Communicator, driven by a C++ training
// loop. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models" (SC 2020); the unshard/reshard vocabulary is
// FSDP2's (torch.distributed.fsdp.fully_shard).
//
// Use:
//   Engine engine(config, comm);
//   UnitId fc1 = engine.add_unit("fc1");
//   ParamId w = engine.add_parameter(fc1, "fc1.weight", {1024, 784});
//   GroupId no_decay = engine.add_param_group("no_decay", {.weight_decay = 0.0f});
//   ParamId b = engine.add_parameter(fc1, "fc1.bias", {1024}, no_decay);
//   engine.finalize();
//   engine.set_parameter(w, initial_values);      // same values on every rank
//   for each micro-batch:
//     forward:  engine.unshard(u); read engine.param(p); engine.reshard(u);
//     backward (reverse): engine.unshard(u); add into engine.grad(p);
//               engine.reduce_gradients(u); engine.reshard(u);
//     engine.step();   // updates at every gradient_accumulation_steps-th call
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/memory_ledger.h"
#include "core/tracer.h"
#include "runtime/config/config.h"
#include "runtime/observe/step_breakdown.h"
#include "runtime/ps/ps_messages.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/update/param_group.h"

// [Note: gradient semantics]
// engine.grad(p) is an accumulation buffer, as torch's param.grad: code adds
// the gradient of its micro-batch's *mean* loss into it (two uses of a tied
// parameter both add). The engine averages over ranks and micro-batches, so
// the update uses the gradient of the mean loss over the global batch. At
// stages 0/1 the buffer is the full gradient and persists until the step
// (in mixed precision until the end of the micro-batch: step() moves it
// into the fp32 accumulator, [Note: gradient accumulator]); at
// stages 2/3 it exists from the first grad() call of a micro-batch until that
// unit's reduce_gradients(), which reduce-scatters it into the rank's
// gradient shard. step() reduces any unit not yet reduced, in unit order.
//
// [Note: mixed precision]
// With bf16.enabled or fp16.enabled, parameters and gradients are stored in
// that compute dtype (param_as<bf16>(p), grad_as<bf16>(p)); the optimizer
// updates fp32 master weights (and fp32 exp_avg/exp_avg_sq) of the local
// shard and writes the rounded compute copy back in the same pass. The
// micro-batches' gradients are summed in an fp32 accumulator ([Note:
// gradient accumulator]) and reduced in fp32 unless communication_data_type
// says otherwise.
// In fp16 the loop multiplies its loss gradient by loss_scale(); step()
// unscales. Before every update the engine checks the reduced gradient
// shards for Inf/NaN (fused with the norm pass) and combines the flag with
// the norm over ranks (an all-gather summed in rank order, or an all-reduce
// with zeroshard.reduction_order "native"): on overflow every rank skips the step together (no parameter,
// optimizer step count or schedule position changes), in any precision, and
// the fp16 loss scale backs off (optimizer/loss_scaler.h).
//
// [Note: gradient accumulator]
// In mixed precision the loop's gradient buffer is 16-bit, and summing k
// micro-batches in it loses every contribution below half a unit in the
// last place of the running sum: k = 300 micro-batches of bf16(0.003) =
// 0.0030059814453125 sum to 0.90179443359375 in fp32 but stop at 1.0 in
// bf16 (DeepSpeed #1800 / #2768, fixed there by data_types.grad_accum_dtype).
// So by default (grad_accum_dtype "fp32") the engine keeps the sum in an
// fp32 accumulator, ArrayKind::grad, and the loop's buffer only ever holds
// one micro-batch:
//   - stages 0/1: grad(p) is a full compute-dtype buffer (ArrayKind::
//     micro_grad, ledger "gradients") beside a full fp32 accumulator
//     (ledger "grad accumulator"); reduce_gradients(u) (step() for units not
//     reduced) adds u's buffer into it in fp32, exactly widened, and zeroes
//     it (add nothing after that in the micro-batch); at the boundary the accumulator is
//     all-reduced in fp32 (in place when communication_data_type is fp32);
//   - stages 2/3: grad(p) is the leased micro-batch buffer as before; each
//     reduce-scatter's block is added into the rank's fp32 accumulator
//     shard (ledger "grad accumulator", on the optimizer's offload tier),
//     so there the sum is over reduced micro-batches.
// The norm, the Inf/NaN check, tied and tensor-parallel sums and the
// optimizer read the accumulator (the kernels take f32 gradients). An fp32
// accumulator holds the sum over ranks, as fp32 training does (no overflow
// to avoid), and step() divides by world x accumulation x loss scale. The
// cost is memory: 4 bytes per element more at stages 0/1 (full), 2 more per
// shard element at stages 2/3 (the 16-bit shard is gone); the estimate
// (runtime/plan/memory_estimate.h) and zs_plan count it, as plan_arrays()
// lists it. grad_accum_dtype "bf16" / "fp16" (the compute dtype only; the
// reader warns once) keeps the old 16-bit sum: no accumulator, grad(p) is
// the sum itself at stages 0/1, the shard holds the mean over ranks.
// fp32 training has one fp32 buffer, which is both.
//
// [Note: offload]
// zero_optimization.offload_optimizer / offload_param (runtime/config/offload_config.h)
// move the rank's optimizer state, gradient shard (stages 2/3) and stage 3
// parameter shards to the host tier or to NVMe swap files; the results are
// bitwise those without offload. step() then streams the state through the
// swap pipeline sub-group by sub-group, and unshard() swaps a unit's
// parameter shard in ahead of its all-gather (runtime/sharding/array_store.h).
// A swap I/O error raises the same IoError on every rank (from step() or
// unshard()); the offloaded state may then be partly updated, so reload a
// checkpoint to continue.
//
// [Note: engine on a GPU]
// Engine(config, nccl, host) keeps every array in GPU memory and runs the
// casts, reductions' bookkeeping, gradient checks and the fused optimizer on
// the device (runtime/sharding/device_ops.h): param_as / grad_as then return device
// pointers, which the loop reads and adds into with its own kernels. The
// engine's work is ordered on the NcclCommunicator's compute stream
// (set_compute_stream; the legacy default stream unless set): the loop must
// queue its kernels there too (or synchronise) so that a gradient is
// complete before reduce_gradients(u) and a parameter is read only after
// unshard(u). set_parameter / gather_* / checkpoints copy through host
// memory. With offload_optimizer the update runs on the host (ZeRO-Offload;
// [Note: optimizer on the host for a GPU engine] in
// runtime/update/shard_optimizer.cpp): reduced gradient blocks come down to the
// host tier as they arrive, updated parameters go up after the update;
// offload_param (which needs offload_optimizer here) keeps stage 3 shards
// in host memory or on nvme and uploads each before its all-gather.
//
// [Note: engine on a mesh]
// Engine(config, mesh) shards over the data-parallel group; each
// tensor-parallel rank's engine holds its own slice of the model. Every
// parameter is declared split along a dimension or replicated. At each
// boundary step, after the data-parallel reductions:
//   - the gradients of replicated parameters are averaged over the tp group
//     (one fp32 all-reduce of every replicated run of this rank's shard,
//     divided by tp): the parallel/ blocks give every tp rank the same
//     gradient for them, and the average keeps the copies identical when
//     they are not;
//   - the squared norm sums every split parameter's slice on every tp rank
//     and every replicated parameter on tp rank 0 only, so each element of
//     the full model counts once; the sum and the Inf/NaN count are one
//     all-reduce over mesh.world(): the norm, clip factor, skip decision
//     and hence the fp16 loss scale are the same on every rank of the world.
// At tp = 1 the step is the single-group engine's, with the norm's
// all-reduce on the world (which is then the data-parallel group).
//
// With pipeline parallelism (mesh.pp_size() > 1) each rank's engine holds
// its pipeline stage's layers only (parallel/pipeline_executor.h runs the
// schedule); the sum and flag above still run over mesh.world(), so the
// norm covers every pipeline stage and tensor-parallel slice and one
// stage's overflow skips the step on every rank. A parameter that several
// pipeline stages hold (a tied embedding and LM head on the first and last
// stage, Megatron-LM's shared embedding) is declared on each of them and
// tied with tie_parameter(p, group): at each boundary step, after the
// data-parallel reductions and before the norm, its gradient (the part of
// it this rank updates) is summed over `group` in the compute dtype, so
// the copies get the same update and stay identical; the norm counts it on
// group rank 0 only. Stage 3's prefetch order is recorded over a whole
// first step, not its first micro-batch, so it follows the schedule's
// interleaving of forwards and backwards ([Note: unshard order],
// runtime/sharding/unsharder.h).
//
// [Note: SPMD]
// Every rank must make the same sequence of unshard / reduce_gradients /
// step calls (they issue collectives). Only data differs between ranks.

namespace zeroshard {

/// What one step() call did.
struct StepResult {
  bool boundary = false;        ///< this call ended an accumulation cycle
  bool applied = false;         ///< the optimizer ran (boundary and no overflow)
  bool skipped = false;         ///< boundary, but Inf/NaN gradients: skipped on every rank
  double grad_norm = 0.0;       ///< global L2 norm of the averaged, unscaled gradient (before clipping)
  double clip_coef = 1.0;       ///< factor applied to the gradient (1 = not clipped)
  double loss_scale = 1.0;      ///< loss scale used by this step's gradients
  std::int64_t optimizer_step = 0;  ///< optimizer steps applied so far
  std::int64_t skipped_steps = 0;   ///< boundaries skipped for Inf/NaN so far, this one included (skipped_steps())
};

/// Swap traffic of the nvme offload tier since finalize() (all zero when
/// nothing is on nvme). Plain value.
struct OffloadStats {
  std::uint64_t bytes_read = 0;     ///< logical bytes read from swap files
  std::uint64_t bytes_written = 0;  ///< logical bytes written to swap files
  double read_wait_s = 0;           ///< seconds the engine's thread blocked on swap reads
  double write_wait_s = 0;          ///< seconds it blocked on swap writes
  double update_s = 0;              ///< seconds in the optimizer update of swapped sub-groups
};

/// How a parameter is laid out over the tensor-parallel group of a mesh
/// ([Note: engine on a mesh]). Plain value.
struct TensorParallel {
  /// Dimension of the full tensor that the group splits (each tp rank
  /// declares its slice's shape), or -1: replicated (every tp rank holds
  /// the whole tensor: layer norms, biases of row-parallel layers).
  int split_dim = -1;
  /// Split along `dim` (0 = rows of a [out, in] weight: column-parallel
  /// layers and vocabulary-parallel embeddings; 1 = columns: row-parallel).
  static TensorParallel split(int dim) { return TensorParallel{dim}; }
  /// The same full tensor on every tp rank.
  static TensorParallel replicated() { return TensorParallel{-1}; }
  bool is_replicated() const { return split_dim < 0; }
  friend bool operator==(const TensorParallel&, const TensorParallel&) = default;
};

/// The outcome of one Engine::save_checkpoint_async, shared by its
/// handle's copies. Written by the engine's thread at the commit; read by
/// the handle on that thread.
struct AsyncSaveStatus {
  std::string tag;         ///< the checkpoint's tag
  bool committed = false;  ///< the save is complete: `latest` names it
  std::string error;       ///< the agreed error of a failed save ("" = none)
  std::exception_ptr failure;  ///< that error, for CheckpointHandle::wait to rethrow
  double write_seconds = 0;    ///< this rank's background write, start to fsync (set at the commit)
};

class Engine;

/// What Engine::save_checkpoint_async returns: a view of that save
/// ([Note: async checkpoint]). Copyable; it must not outlive its engine.
/// Thread safety: the engine's thread only.
class CheckpointHandle {
 public:
  /// The checkpoint's tag (a folder name in the save directory).
  const std::string& tag() const { return status_->tag; }
  /// True once the save committed or failed (seen at a step(), wait() or
  /// another save or load); never blocks, no collectives: the ranks see it
  /// at the same call.
  bool done() const { return status_->committed || !status_->error.empty(); }
  /// Seconds this rank's background write took (0 until done()).
  double write_seconds() const { return status_->write_seconds; }
  /// Finishes the save: waits for this rank's background write, agrees on
  /// the outcome over the ranks and commits (Engine::wait_for_checkpoints).
  /// Throws the save's AgreedIoError (naming the file) if it failed, now or
  /// earlier. Collective while the save is in flight; a no-op after.
  void wait();

 private:
  friend class Engine;
  CheckpointHandle(Engine* engine, std::shared_ptr<const AsyncSaveStatus> status)
      : engine_(engine), status_(std::move(status)) {}
  Engine* engine_;
  std::shared_ptr<const AsyncSaveStatus> status_;
};

class EngineState;  // implementation
class Mesh;         // comm/mesh.h
class ActivationStore;  // runtime/activation/activation_store.h
class DeviceOps;    // runtime/sharding/device_ops.h
class ParameterServerRoles;  // runtime/ps/ps_roles.h

/// ZeRO engine over one data-parallel communicator.
/// Thread safety: one thread drives an Engine. Every method that issues a
/// collective says so; those must be called in the same order on all ranks.
class Engine {
 public:
  /// An engine on the cpu compute device: arrays in host memory, every
  /// collective on `comm`. Validates config (ConfigError) against comm's
  /// world size. comm must outlive the engine. With
  /// parameter_server.servers S > 0 ([Note: parameter-server layout] in
  /// runtime/ps/param_server.h) the constructor splits comm's ranks into S
  /// servers and W = world - S workers (collective over comm; ConfigError
  /// as runtime/ps/ps_roles.h says): on a worker the engine is the
  /// W-rank engine without optimizer state (world_size() is W, the batch
  /// keys are checked against W); on a server it takes the same model
  /// declaration, and after finalize() its loop is serve().
  Engine(const EngineConfig& config, Communicator& comm);
  /// An engine on the cuda compute device ([Note: engine on a GPU]):
  /// arrays in the memory of nccl's device, their collectives on `nccl`
  /// (an NcclCommunicator, comm/nccl), the host-side messages (global norm
  /// and Inf/NaN flag, agreed errors, checkpoint metadata) on `host`, a
  /// host communicator over the same ranks in the same order (the one nccl
  /// was bootstrapped from). Both must outlive the engine. Throws
  /// ConfigError in a build without CUDA, when `nccl` is not an
  /// NcclCommunicator, when the ranks differ, for offload_param without
  /// offload_optimizer, or for Lion / Adagrad without offload_optimizer
  /// (they have CPU kernels only); DeviceError if the device fails.
  Engine(const EngineConfig& config, Communicator& nccl, Communicator& host);
  /// An engine on the compute device `ops` (runtime/sharding/device_ops.h), whose
  /// memory `device_comm`'s collectives must accept; host messages on
  /// `host_comm`. The two constructors above are this one with cpu and cuda
  /// ops; tests use make_simulated_device_ops() to run the GPU data flow on
  /// a CPU. Errors as the cuda constructor.
  Engine(const EngineConfig& config, Communicator& device_comm, Communicator& host_comm,
         std::unique_ptr<DeviceOps> ops);
  /// An engine on the cpu compute device over a device mesh (comm/mesh.h,
  /// [Note: engine on a mesh]): ZeRO shards over mesh.dp_group() (world
  /// size, batch arithmetic and sharding as the single-group engine at
  /// that size) and knows mesh.tp_group() and mesh.world(). The mesh must
  /// outlive the engine. Throws ConfigError as the first constructor, and
  /// for offload_optimizer on nvme with tp > 1 (its gradient shards are
  /// not addressable for the tensor-parallel all-reduce).
  Engine(const EngineConfig& config, const Mesh& mesh);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- model declaration (before finalize) ----

  /// New unit (a group of parameters gathered, reduced and freed together).
  UnitId add_unit(std::string name);
  /// New parameter group; group 0 ("default") uses the optimizer's values.
  GroupId add_param_group(std::string name, ParamGroupOptions options);
  /// Declares a parameter of `shape` (elements, row-major; zeros allowed)
  /// stored in `unit`'s flat buffer. Names must be unique. A parameter used
  /// by several layers (tied) is declared once; code that uses it from
  /// another unit unshards its owning unit too. With optimizer.type Muon a
  /// default-group parameter that muon_params names goes to muon_group()
  /// (ConfigError naming it and the pattern unless it is 2-D).
  ParamId add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape,
                        GroupId group = 0);
  /// add_parameter with its tensor-parallel layout declared: `shape` is
  /// this tp rank's slice (the full shape for a replicated parameter).
  /// Without a mesh (or at tp = 1) the declaration is recorded (checkpoint
  /// manifests keep it) and changes nothing else. Throws InvariantError
  /// when split_dim is outside the shape.
  ParamId add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape, GroupId group,
                        TensorParallel tp);
  /// The mesh's tensor-parallel group, traced like the engine's own
  /// communicators: what the caller runs on it (a layer's all-reduce) is
  /// timed as comm_wait in the step breakdown, and appears in the trace and
  /// the comms log under "tp". Same ranks and order as Mesh::tp_group().
  /// Only on a mesh (Engine(config, mesh)); throws InvariantError
  /// otherwise. Thread safety: as the engine (one thread at a time).
  Communicator& tp_communicator();
  /// The mesh's pipeline-parallel group, traced likewise under "pp" (the
  /// activations and gradients between stages, and the time a stage waits
  /// for them). Same ranks and order as Mesh::pp_group(). Errors and thread
  /// safety as tp_communicator().
  Communicator& pp_communicator();
  /// Ties parameter p to its copies on the other ranks of `group` (a tied
  /// embedding and LM head on the first and last pipeline stage:
  /// Mesh::embedding_group(); [Note: engine on a mesh]): from the boundary
  /// step on, p's gradient is summed over `group` before the norm and
  /// counted in the norm on group rank 0 only. Every rank of `group` must
  /// tie its copy, in the same order as the other ties over that group;
  /// the copies must sit at the same place of units of equal size
  /// (finalize() checks it). `group` must outlive the engine. Only on a
  /// mesh (Engine(config, mesh)); throws InvariantError otherwise, after
  /// finalize(), or for an unknown p.
  void tie_parameter(ParamId p, Communicator& group);
  /// Records the training loop's model configuration (any JSON value, for
  /// example the GPT's {"layers", "heads", "dim", "context", "vocab"}) in
  /// every checkpoint this engine saves (manifest `model.config`, part of
  /// the model fingerprint); load_checkpoint refuses a checkpoint whose
  /// configuration differs, naming the first differing key ("model.config.
  /// heads: checkpoint 4, this run 2"). Null (the default) records none.
  /// Call before save_checkpoint / load_checkpoint, the same on every rank
  /// of a data-parallel group. Not a collective; never throws.
  void set_model_config(nlohmann::json config);

  /// Lays out flat buffers for the world size, allocates (parameters zero).
  /// On a mesh with tied parameters (tie_parameter), throws
  /// AgreedConfigError on every rank of the world when a tied copy's
  /// element count, its offset in its unit or its unit's padded size
  /// differs from the copy on the group's rank 0, or when
  /// offload_optimizer is on nvme (the gradients must be addressable).
  /// On a mesh with tp > 1, first throws ConfigError (on every rank) naming
  /// every parameter declared without a TensorParallel layout, then
  /// AgreedConfigError when the tp ranks' layouts differ (every tp rank
  /// must declare slices of equal shapes).
  /// Collective: first checks that every rank declared the same model with
  /// the same configuration ([Note: model fingerprint],
  /// runtime/engine/model_fingerprint.h), then agrees on the allocation. Throws,
  /// on every rank, AgreedConfigError naming the first difference between
  /// ranks, or the AgreedError of a rank whose allocation failed (free
  /// space for nvme offload, a bad offload setting).
  void finalize();

  // ---- values ----

  /// Sets parameter p from its full values (numel floats, the same on every
  /// rank); each rank keeps what its stage stores. No collective, except
  /// with state on nvme: then the swap-file writes are agreed ([Note:
  /// storage phases], runtime/engine/storage_phase.h) and an I/O error on any rank
  /// throws AgreedIoError on every rank and leaves the engine unusable.
  /// Throws InvariantError if values.size() != numel.
  void set_parameter(ParamId p, std::span<const float> values);
  /// set_parameter for several parameters of one unit (`params[i]` from
  /// `values[i]`) at once: with the unit on nvme, each swap file is read and
  /// written once for all of them instead of once each (a 48-block model
  /// initialized parameter by parameter reads and writes every block's
  /// files 12 times). Throws InvariantError for sizes that differ or
  /// parameters of more than one unit; errors as set_parameter's.
  void set_parameters(std::span<const ParamId> params, std::span<const std::span<const float>> values);
  /// Full values of parameter p (the compute copy, widened to float) on
  /// every rank. Collective at stage 3.
  std::vector<float> gather_parameter(ParamId p);
  /// Full fp32 master values of parameter p (equal to gather_parameter in
  /// fp32 training). Collective at stages 1-3.
  std::vector<float> gather_master(ParamId p);

  // ---- the training loop ----

  /// Makes unit u's full parameters available (stage 3: all-gathers them,
  /// having prefetched them if the recorded order predicts u; starts the
  /// prefetch of the next unit). Counted: each unshard needs one reshard.
  /// Collective at stage 3.
  void unshard(UnitId u);
  /// Releases one unshard of u; at stage 3 the full buffer is freed when the
  /// count drops to zero, unless the recorded order says u is unsharded
  /// again next (then it is kept for that unshard). No collective.
  void reshard(UnitId u);
  /// Full values of parameter p (numel elements of T, which must be the
  /// storage type of compute_dtype(): float, bf16 or f16). Valid while its
  /// unit is unsharded (always at stages 0-2). Throws InvariantError
  /// otherwise, or if T is not the compute dtype.
  template <class T>
  std::span<T> param_as(ParamId p) {
    return {static_cast<T*>(param_data(p, dtype_of<T>())), layout().param(p).numel};
  }
  /// Gradient accumulation buffer of p (numel elements of T = the compute
  /// dtype; see [Note: gradient semantics]); in mixed precision it holds
  /// one micro-batch and the engine sums the micro-batches in fp32 ([Note:
  /// gradient accumulator]). At stage 3 its unit need not be unsharded.
  template <class T>
  std::span<T> grad_as(ParamId p) {
    return {static_cast<T*>(grad_data(p, dtype_of<T>())), layout().param(p).numel};
  }
  /// param_as<float>: fp32 training.
  std::span<float> param(ParamId p) { return param_as<float>(p); }
  /// grad_as<float>: fp32 training.
  std::span<float> grad(ParamId p) { return grad_as<float>(p); }
  /// Untyped forms of param_as / grad_as; `expected` must equal compute_dtype().
  void* param_data(ParamId p, DType expected);
  void* grad_data(ParamId p, DType expected);
  /// Declares unit u's gradients of this micro-batch complete and hands them
  /// to the reduction buckets (stages 2/3: every micro-batch, reduce-scatter;
  /// stages 0/1: at the accumulation boundary, all-reduce; both rank-ordered
  /// by default, comm/ordered_reduce.h); a bucket's
  /// collective starts when it holds reduce_bucket_size elements, in the
  /// background with overlap_comm, else completed before this returns
  /// (runtime/sharding/grad_reducer.h). Every rank must reduce its units in
  /// the same order: step() checks it at the boundary ([Note: reduce order
  /// check] in runtime/engine/reduce_order.h). Collective.
  void reduce_gradients(UnitId u);
  /// Ends a micro-batch. At every gradient_accumulation_steps-th call:
  /// finishes the reductions, computes the global gradient norm (the ranks'
  /// partial sums all-gathered and added in rank order; one all-reduce with
  /// zeroshard.reduction_order "native"), clips to gradient_clipping, runs the optimizer on the
  /// local shards, all-gathers the updated shards (stages 1/2), and clears
  /// gradients. Collective. With offloaded state, an I/O error on any rank
  /// in the swap writes of the reductions or the update throws
  /// AgreedIoError on every rank and leaves the engine unusable until a
  /// load succeeds ([Note: storage phases]); throws Error when the engine
  /// is unusable. At the boundary, when some rank called reduce_gradients
  /// in another unit order than its data-parallel rank 0 during the step,
  /// throws AgreedConfigError on every rank naming the units and the ranks,
  /// with no parameter updated and the step's gradients dropped ([Note:
  /// reduce order check]). A skipped boundary prints one line to stderr
  /// (on the rank of the first non-finite unit) at the 1st, 2nd, 4th, 8th,
  /// ... skipped step, naming the step and that unit; the
  /// zeroshard.max_consecutive_skipped_steps-th skip in a row throws
  /// AgreedConfigError on every rank naming the step and the unit (nothing
  /// updated, gradients cleared).
  StepResult step();

  // ---- observability (runtime/config/observe_config.h, [Note: step breakdown]) ----

  /// A span of the loop's own work (forward, backward, loss): the loop
  /// thread's time inside is charged to compute in the step breakdown and,
  /// with zeroshard.trace, drawn on the "loop" thread of the Chrome trace.
  /// Usage: `{ auto span = engine.trace("forward", "fc1"); ... }`. With
  /// tracing and wall_clock_breakdown off it costs one branch. Not a
  /// collective; call from the thread that drives the engine.
  [[nodiscard]] TraceScope trace(const char* name, std::string_view unit = {});
  /// This rank's figures of the last optimizer step (all zero unless
  /// wall_clock_breakdown or zeroshard.trace is on).
  const StepFigures& last_step_figures() const;
  /// The run so far: {"steps", "per_rank_mean_ms" (every rank's mean
  /// compute, comm_wait, optimizer, io_wait, checkpoint, other, wall,
  /// hidden_comm and a parameter-server worker's ps_push, ps_pull_wait and
  /// ps_staleness: StepFigures::names()),
  /// "overlap_fraction", "slowest_rank", "straggler" {late_ms, last_count,
  /// straggler_steps, text}, "clock" {offset_ns, bound_ns}, "comms" (the
  /// comms_logger rows: kind, message_bytes, count, total_bytes, total_ms,
  /// mean_ms, algbw_gbps, busbw_gbps, cross_host_bytes: this rank's bytes
  /// to other hosts), "comms_cross_host_bytes" (their total)}. The same on
  /// every rank (the figures are all-gathered at each step) except the
  /// comms rows, which are this rank's. Not a collective.
  nlohmann::json observe_report() const;
  /// The comms_logger table (kind, message size, count, latency, algbw,
  /// busbw) of this rank's collectives so far. Not a collective.
  std::string comms_summary() const;
  /// The loss of the micro-batch just run (or of the whole step), for the
  /// csv_monitor's train_loss series: the step's row holds the mean of the
  /// values reported since the previous optimizer step, as world rank 0
  /// reported them (DeepSpeed's Train/Samples/train_loss;
  /// runtime/observe/csv_monitor.h). Does nothing on other ranks or with the
  /// monitor off. Not a collective; never throws.
  void report_loss(double loss);
  /// With zeroshard.trace on: every rank writes
  /// <output_path>/trace-rank<r>.json (Chrome Trace Event Format, ranks as
  /// processes, loop/engine/comm/io as threads, memory counters; times on
  /// rank 0's clock), then rank 0 merges them into <output_path>/trace.json
  /// and returns its path (other ranks return their own file's). Collective
  /// over the host communicator. Throws IoError naming the path when a file
  /// cannot be written (agreed: the same error on every rank). Returns ""
  /// with tracing off.
  std::string write_trace();

  // ---- checkpoints (runtime/engine/engine_save.cpp, docs/checkpoint-format.md) ----

  /// Saves a sharded checkpoint to <save_dir>/<tag> (tag "" = "step-%08d" of
  /// the optimizer step): each rank writes its shards of the fp32 master
  /// weights and optimizer states, rank 0 the manifest with `client_state`
  /// (the loop's data position, RNG state, ...). With
  /// zero_optimization.stage3_gather_16bit_weights_on_model_save, rank 0
  /// also writes model.safetensors into the checkpoint: every parameter's
  /// full tensor in the compute dtype, gathered one unit at a time at stage
  /// 3 (docs/checkpoint-format.md, "Consolidated weights"). Written to a temporary
  /// directory, fsynced, renamed into place, then <save_dir>/latest is
  /// switched; keep_last > 0 then removes older checkpoints. Collective.
  /// Master weights (fp32 parameters), optimizer states and 8-bit absmax
  /// scales must be finite: otherwise an AgreedIoError names the tensor and
  /// nothing is saved (docs/checkpoint-format.md, "Validation").
  /// Throws Error in the middle of gradient accumulation, AgreedIoError on
  /// I/O failure (on every rank; the previous checkpoint is untouched and
  /// the failed save's temporary directory removed). Re-saving an existing
  /// tag is crash-atomic (docs/checkpoint-format.md). On a mesh with tp > 1
  /// (or pp > 1) each tp rank's data-parallel group saves under
  /// <save_dir>[/pp-SS]/tp-NN, the manifest records the mesh coordinates
  /// and each parameter's split dimension, and the save commits as one:
  /// when every folder has written its step, world rank 0 writes
  /// <save_dir>/latest; older checkpoints are pruned only then, never the
  /// newest step every folder holds ([Note: mesh checkpoint commit],
  /// docs/checkpoint-format.md, "Checkpoints on a mesh"). An async save
  /// still in flight is committed first (its error thrown here). Returns
  /// the tag.
  std::string save_checkpoint(const std::string& save_dir, const nlohmann::json& client_state,
                              int keep_last = 0, const std::string& tag = "");
  /// save_checkpoint without the stall ([Note: async checkpoint],
  /// runtime/engine/engine_save_async.cpp): checks and snapshots this
  /// rank's state (the bytes save_checkpoint writes: master weights and
  /// optimizer states of every tier, with the manifest's step, loss scaler
  /// and `client_state` as they are now; on rank 0 the consolidated weights
  /// when configured, all-gathered at stage 3) into a staging area in host
  /// memory reused between saves, starts a background thread writing it to
  /// <save_dir>/.tmp-<tag>, and returns. Training goes on; the next
  /// boundary step() (at its start), CheckpointHandle::wait(),
  /// wait_for_checkpoints(), save_checkpoint(_async) or load_checkpoint
  /// agree over the ranks once every rank's write is done, then commit as
  /// save_checkpoint does (manifest, rename, `latest`, keep_last; the mesh
  /// commit on a mesh). The saved state is the state at this call, bit for
  /// bit. A save while one is in flight waits for it, or throws Error with
  /// checkpoint.async_in_flight "refuse". Errors: those of save_checkpoint's
  /// checks (agreed, nothing saved); a snapshot larger than
  /// checkpoint.staging_memory is an AgreedConfigError; a failed background
  /// write is an AgreedIoError naming the file, thrown by the call that
  /// agrees on it (step() throws it before doing anything, and can be
  /// called again), with the save's folder removed and the previous
  /// checkpoint still the latest. Collective.
  CheckpointHandle save_checkpoint_async(const std::string& save_dir, const nlohmann::json& client_state,
                                         int keep_last = 0, const std::string& tag = "");
  /// Finishes the async save in flight, if any: see CheckpointHandle::wait.
  /// Call it before the engine is destroyed: a save still in flight then is
  /// left uncommitted (the previous checkpoint stays the latest) and said
  /// on stderr. Collective.
  void wait_for_checkpoints();
  /// True while an async save has not been committed or failed. Local.
  bool checkpoint_in_flight() const;
  /// Loads <save_dir>/<tag> (tag "" = the one `latest` names) at this
  /// engine's world size and stage, whatever they were at save time:
  /// logical tensors are re-sharded; master weights and moments come back
  /// bit for bit. Checks format version, model (names and shapes; the error
  /// lists differences), file sizes and CRC-32s before changing anything:
  /// on error nothing is loaded. State on nvme is read unit by unit, twice
  /// (checked, then stored), so no rank holds more than one unit of it
  /// ([Note: bounded-memory load]). Returns the saved client_state. Collective.
  /// On a mesh, any data-parallel size loads; another tensor-parallel size
  /// is refused with a ConfigError naming both sizes (an AgreedConfigError
  /// over the data-parallel group). On a mesh with tp > 1 or pp > 1, tag ""
  /// loads the newest step that every folder holds complete (saying on
  /// stderr, from world rank 0, when it skips a newer step that some folder
  /// lacks); any tag every folder holds loads by name. Also refused: a
  /// folder whose manifest holds other mesh coordinates (tp rank, pipeline
  /// stage), another model (names, shapes, tp layouts, set_model_config's
  /// configuration), and non-finite master weights, states or absmax scales
  /// (naming the tensor and the file). Every error is an AgreedError, the
  /// same on every rank of the world; a failure while
  /// writing the loaded state (swap files on nvme) leaves the engine
  /// unusable until a load succeeds ([Note: storage phases]). An async save
  /// still in flight is committed first (its error thrown here), so that a
  /// load right after a save finds it.
  nlohmann::json load_checkpoint(const std::string& save_dir, const std::string& tag = "");
  /// Full values of optimizer state `index` of parameter p. Collective at
  /// stages 1-3.
  std::vector<float> gather_optimizer_state(ParamId p, int index);
  /// optimizer.type "Muon": the "muon" parameter group's id (the matrices
  /// of the default group that optimizer.params.muon_params names go to it
  /// at add_parameter; a parameter declared in it must be 2-D, ConfigError
  /// otherwise); -1 for other optimizers.
  GroupId muon_group() const;
  /// optimizer.type "Muon": the data-parallel rank that orthogonalizes each
  /// Muon matrix (nonempty parameters of the "muon" group, in declaration
  /// order; [Note: Muon owner assignment]); empty for other optimizers.
  /// After finalize() (InvariantError before). Local; the same on every rank.
  std::vector<int> muon_owners() const;

  // ---- introspection ----

  int stage() const;
  /// The compute device chosen by the constructor.
  ComputeDevice device() const;
  /// Storage dtype of parameters and gradients (f32, bf16 or f16).
  DType compute_dtype() const;
  /// Factor the loop multiplies its loss gradient by (fp16: the dynamic or
  /// static loss scale; 1 otherwise).
  double loss_scale() const;
  /// The loss scaler's state (checkpoints save it).
  const LossScalerState& loss_scaler_state() const;
  /// Boundary steps skipped for Inf/NaN gradients so far.
  std::int64_t skipped_steps() const;
  /// Learning rate group g uses at the next applied step (the schedule's
  /// value at that step; the group's configured lr without a schedule).
  double current_lr(GroupId g) const;
  int rank() const;
  int world_size() const;
  /// Tensor-parallel size and this rank's tp rank (1 and 0 without a mesh).
  int tp_size() const;
  int tp_rank() const;
  /// The declared tensor-parallel layout of p (replicated when undeclared).
  TensorParallel param_parallel(ParamId p) const;
  /// Pipeline stages and this rank's stage (1 and 0 without a mesh).
  int pp_size() const;
  int pp_rank() const;
  const EngineConfig& config() const;
  const FlatLayout& layout() const;
  const MemoryLedger& ledger() const;
  /// The store of the loop's checkpointed activations (runtime/activation/
  /// activation_store.h), made on first use with the config's
  /// activation_checkpointing section; on a mesh it partitions over the
  /// tensor-parallel communicator (traced as "tp"). Its bytes are in the
  /// ledger (MemCategory::activations). Any time, before or after
  /// finalize(). Thread safety: as the engine.
  ActivationStore& activations();
  /// Swap traffic so far (runtime/sharding/array_store.h).
  OffloadStats offload_stats() const;
  /// Bytes of host memory the engine's host pool (offload/host_pool.h)
  /// owns now: the buffers leased (in the ledger) and those cached for
  /// reuse (not in the ledger, but resident). 0 before finalize().
  std::uint64_t host_pool_bytes() const;
  std::int64_t micro_steps() const;
  std::int64_t optimizer_steps() const;
  /// Configured learning rate of a group (after any override; the base the
  /// schedule scales for WarmupCosineLR).
  float group_lr(GroupId g) const;
  /// Optimizer state array `index` (see optimizer_state_name) over this
  /// rank's shard of unit u: layout().unit(u).shard elements, rank r's slice
  /// of the flat buffer (at stage 0, which holds the full state, the same
  /// slice of it). A copy, read from the swap files if the state is on
  /// nvme. For tests and checkpoints.
  std::vector<float> optimizer_state(UnitId u, int index) const;
  /// This rank's shard of unit u as the optimizer sees it (shard elements
  /// of fp32: the parameters in fp32 training, the master weights in mixed
  /// precision). A copy, read from the swap files if they are on nvme.
  std::vector<float> param_shard(UnitId u) const;
  /// All-gathers of unit u's parameters started so far (stage 3; 0 at
  /// stages 0-2), and of those the ones inside ZeRO++ hpZ's group
  /// (runtime/sharding/unsharder.h). Throws InvariantError for an unknown
  /// unit. Not a collective.
  std::pair<std::int64_t, std::int64_t> unit_all_gathers(UnitId u) const;

  // ---- parameter-server layout ([Note: parameter-server layout]) ----

  /// True on a server rank of a parameter_server job (whose training-loop
  /// calls throw InvariantError: it runs serve()).
  bool is_parameter_server() const;
  /// What this parameter-server worker pushed, pulled and waited for, and
  /// the staleness of each installed pull (runtime/ps/ps_messages.h);
  /// empty on a server, before finalize() and without parameter_server.
  ParameterServerClientStats parameter_server_stats() const;
  /// What this parameter server applied and moved, and the largest lag of
  /// a push it applied (runtime/ps/ps_messages.h); empty on a worker,
  /// before finalize() and without parameter_server.
  ParameterServerStats served_stats() const;
  /// The ranks that train together, untraced: on a parameter-server worker
  /// the workers' group (W ranks, worker index order), where the loop runs
  /// its own reductions (evaluation counts); on a server the servers'
  /// group; otherwise the data-parallel communicator the engine was built
  /// on (the mesh's dp group on a mesh).
  Communicator& dp_communicator();
  /// A server rank after finalize(): holds its workers' optimizer shards
  /// and answers their pushes until every one of them has destroyed its
  /// engine. Throws InvariantError on a worker or before finalize(),
  /// CommError when a worker's message cannot be received.
  void serve();

 private:
  void init();  // the constructors' common part
  StepResult step_body();  // step() without the observer's end of step
  /// The parameter-server roles (null without parameter_server); before
  /// s_, whose communicators it owns.
  std::unique_ptr<ParameterServerRoles> roles_;
  std::unique_ptr<EngineState> s_;
};

}  // namespace zeroshard
