// ArrayStore: every array of every unit on this rank (parameters, fp32
// master weights, optimizer states, gradients), the offload tier each lives
// on, and the code that moves them between memory and NVMe swap files
// (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021).
// A component of the Engine (docs/design.md), usable and tested alone: its
// inputs are a finalized FlatLayout, the compute device's DeviceOps, a
// MemoryLedger and ArrayStoreOptions; it issues no collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/memory_ledger.h"
#include "core/tracer.h"
#include "kernels/cpu/cast.h"
#include "offload/host_pool.h"
#include "offload/io/io_engine.h"
#include "offload/swap_directory.h"
#include "offload/swap_pipeline.h"
#include "runtime/sharding/array_plan.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/config/offload_config.h"
#include "runtime/sharding/swap_sharing.h"

// [Note: offload in the engine]
// Tiers are per unit and per array family (runtime/config/offload_config.h):
//   - optimizer tier: fp32 master weights (mixed precision), the optimizer
//     states and, at stages 2/3, the gradient shard;
//   - parameter tier (stage 3): the parameter shard in the compute dtype.
// MemTier::device means "where compute runs" (the DeviceOps' memory),
// MemTier::host the host offload tier (host memory, counted apart in the
// ledger), MemTier::nvme swap files. An nvme array is split into the unit's
// sub-groups (at most sub_group_size elements, boundaries on multiples of
// 4096 elements) with one swap file per (unit, sub-group, array), named
// "u<unit>.g<sub-group>.<array>" (short whatever the parameter names).
// Data flow:
//   - unshard (stage 3): the shard is read into a swap-in buffer ahead of
//     the all-gather (start_param_fetch), which the Unsharder prefetches one
//     unit further than its all-gather;
//   - reduction (stages 2/3): each reduced block is added into the
//     sub-group's gradient file (read, add, write behind); in the boundary
//     micro-batch, when a sub-group's last block has been added, its Inf/NaN
//     count and sum of squares are taken, so step() needs no extra pass over
//     the files; the sums are added sub-group by sub-group, as the other
//     tiers' (grad_stats), so the norm is bitwise the same on every tier;
//   - step(): the engine's optimizer (runtime/update/shard_optimizer.h) runs
//     the swap pipeline over all sub-groups of all units (read i+1, update
//     i, write i-1) with swap_key / swap_dir; gradient files are removed
//     after the step (clear_grads), so the next cycle starts from zeros.

namespace zeroshard {

/// A byte range of a file: `bytes` bytes at `offset` of `path`, or as many
/// zeros when `path` is empty. Plain value.
struct FileExtent {
  std::string path;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

/// What the ArrayStore needs to know besides the layout.
struct ArrayStoreOptions {
  int stage = 0;                  ///< ZeRO stage 0-3
  int rank = 0;                   ///< this rank in the data-parallel group
  DType dtype = DType::f32;       ///< compute dtype (parameters, the loop's gradients)
  DType grad_accum_dtype = DType::f32;  ///< the gradient accumulator's: f32 or `dtype` (ArrayPlanOptions)
  int state_count = 0;            ///< optimizer states per element (optimizer_state_count)
  StateFormat states;             ///< their storage (optimizer/state_format.h)
  bool muon = false;              ///< Muon: packed states (ArrayPlanOptions::muon)
  std::vector<std::string> muon_params;  ///< Muon's name patterns (ArrayPlanOptions::muon_params)
  bool remote_optimizer = false;         ///< no master or state arrays (ArrayPlanOptions::remote_optimizer)
  OffloadConfig offload;          ///< tiers, sub_group_size, swap paths, aio settings
  SwapSharers swap_sharers;       ///< ranks sharing each swap file system (free-space check)
  std::string source = "config";  ///< the configuration's name, for messages
  bool mixed() const { return dtype != DType::f32; }
  /// Options holding `plan`'s fields and the swap folders' `sharers`:
  /// the inverse of plan_options().
  static ArrayStoreOptions from_plan(const ArrayPlanOptions& plan, const SwapSharers& sharers) {
    return ArrayStoreOptions{.stage = plan.stage,
                             .rank = plan.rank,
                             .dtype = plan.dtype,
                             .grad_accum_dtype = plan.grad_accum_dtype,
                             .state_count = plan.state_count,
                             .states = plan.states,
                             .muon = plan.muon,
                             .muon_params = plan.muon_params,
                             .remote_optimizer = plan.remote_optimizer,
                             .offload = plan.offload,
                             .swap_sharers = sharers,
                             .source = plan.source};
  }
  /// The part of these options the array sizes depend on.
  ArrayPlanOptions plan_options() const {
    return ArrayPlanOptions{.stage = stage,
                            .rank = rank,
                            .dtype = dtype,
                            .grad_accum_dtype = grad_accum_dtype,
                            .state_count = state_count,
                            .states = states,
                            .muon = muon,
                            .muon_params = muon_params,
                            .remote_optimizer = remote_optimizer,
                            .offload = offload,
                            .source = source};
  }
};

/// Every array of every unit on this rank and its tier, as plan_arrays()
/// (runtime/sharding/array_plan.h) lays them out. Sizes: parameters
/// are the padded full flat buffer at stages 0-2, the shard at stage 3;
/// gradients full at stages 0/1, shard at 2/3; master weights and states
/// full at stage 0, shard at 1-3 (elements; FlatLayout gives padded and
/// shard). Parameters are in the compute dtype, the gradient (the
/// accumulator) in grad_accum_dtype, with a full micro-batch gradient in
/// the compute dtype beside it at stages 0/1 when the two differ ([Note:
/// gradient accumulator] in runtime/engine/engine.h); master weights and
/// states fp32. Device-tier arrays are in the DeviceOps'
/// memory, host-tier arrays in host memory (page-locked with pin_memory),
/// nvme arrays in swap files ([Note: offload in the engine]).
/// Thread safety: one thread (the engine's).
class ArrayStore {
 public:
  /// Picks each unit's tiers and sub-groups (plan_arrays), opens the swap folders
  /// (checking free space), allocates every resident array (zeroed) and
  /// records all of them in `ledger`. `layout` must be finalized and
  /// outlive the store, as must `ops` and `ledger`. Throws ConfigError (a
  /// stage-3 nvme shard larger than offload_param.buffer_size), IoError (a
  /// swap folder that cannot be made, too little free space), and the
  /// allocators' errors; nothing is left on disk then.
  ArrayStore(const FlatLayout& layout, DeviceOps& ops, MemoryLedger& ledger, ArrayStoreOptions options);
  /// Removes the swap files and this run's swap folders.
  ~ArrayStore();
  ArrayStore(const ArrayStore&) = delete;
  ArrayStore& operator=(const ArrayStore&) = delete;

  const ArrayStoreOptions& options() const { return o_; }
  std::size_t unit_count() const { return units_.size(); }
  /// Swap waits from now on are charged to io_wait on `tracer` and become
  /// I/O spans (core/tracer.h); null stops that. Not owned.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

  // --- Where each array is --------------------------------------------

  /// Tier of array a of unit u.
  MemTier tier(UnitId u, ArrayRef a) const;
  /// Elements of array a of unit u on this rank (full or shard, by stage).
  std::size_t numel(UnitId u, ArrayRef a) const;
  /// Element type of array a of unit u (array_dtype: compute dtype for
  /// parameters and the micro-batch gradient, grad_accum_dtype for the
  /// gradient, fp32 for master weights, the unit's state arrays' own).
  DType dtype(UnitId u, ArrayRef a) const;
  /// Unit u's optimizer state arrays (format, block, count).
  const UnitStates& states(UnitId u) const;
  /// Bytes of sub-group g of array a of unit u (its swap file's size).
  std::uint64_t subgroup_bytes(UnitId u, std::size_t g, ArrayRef a) const;
  /// True when array a of unit u is in memory the host cannot address: the
  /// device tier of a DeviceOps that is not host_addressable().
  bool in_device_memory(UnitId u, ArrayRef a) const;
  /// The ops of the memory array a of unit u lives in: the compute
  /// device's for the device tier, host memory's for host and nvme.
  DeviceOps& ops(UnitId u, ArrayRef a);
  /// The compute device's ops, and host memory's (host and nvme tiers).
  DeviceOps& device_ops() { return ops_; }
  DeviceOps& host_ops() { return *host_ops_; }
  /// Unit u's sub-groups (shard ranges of its swap files; also the order in
  /// which gradient statistics are added).
  const std::vector<SubGroup>& subgroups(UnitId u) const;
  /// True when the units have a micro-batch gradient beside the
  /// accumulator (ArrayPlanOptions::micro_grad(): stages 0/1, accumulator
  /// wider than the compute dtype).
  bool has_micro_grad() const { return micro_grad_; }
  /// True when some array is on a host or nvme tier / on nvme.
  bool offloaded() const { return offloaded_; }
  bool uses_nvme() const { return io_ != nullptr; }

  // --- Whole arrays -----------------------------------------------------

  /// Element 0 of array a of unit u in memory (its resident buffer; nullptr
  /// when the array is on nvme or empty).
  std::byte* resident(UnitId u, ArrayRef a);
  /// Whole array a of unit u readable by the host: a pointer into the
  /// resident buffer, or `holder` filled from device memory or the swap
  /// files (sub-groups never written read as zeros). Throws IoError.
  void* read(UnitId u, ArrayRef a, HostBuffer& holder);
  /// Bytes [begin, begin + bytes) of array a of unit u, on the nvme tier,
  /// as hard links of its swap files (SwapDirectory::link_current) in
  /// "checkpoint-snapshot/" beside them: a snapshot that reads nothing and
  /// that later writes do not change ([Note: async checkpoint]). The
  /// extents follow the array's bytes in order (zeros for a sub-group never
  /// written). The caller removes the links. nullopt, linking nothing, when
  /// the array is not on nvme or the file system does not do hard links.
  /// Throws IoError or InvariantError as link_current (links already made
  /// are removed first).
  std::optional<std::vector<FileExtent>> link_range(UnitId u, ArrayRef a, std::uint64_t begin, std::uint64_t bytes);
  /// Stores `src` (host memory, numel(u, a) elements) as array a: copied
  /// into the resident buffer (no-op if src is that buffer) or written to
  /// the swap files and waited for. Throws IoError (the previous files stay).
  void store(UnitId u, ArrayRef a, const void* src);
  /// `bytes` bytes at src (memory of the compute device) readable by the
  /// host: src itself on a host_addressable device, else a copy in
  /// `holder`. `settled`: nothing queued writes src any more (a completed
  /// collective's output; DeviceOps::download_settled).
  const void* host_copy(const void* src, std::size_t bytes, HostBuffer& holder, bool settled = false);
  /// Host staging buffers (ledger: unsharded, host tier).
  HostPool& host_pool() { return host_; }

  // --- Gradients ----------------------------------------------------------

  /// Sets unit u's resident gradient buffers (the accumulator and the
  /// micro-batch gradient) to zero.
  void zero_grads(UnitId u);
  /// Stages 0/1 with a micro_grad array (ArrayPlanOptions::micro_grad()):
  /// adds unit u's micro-batch gradient (padded elements, compute dtype)
  /// into its accumulator (grad_accum_dtype: each element widened exactly
  /// and added in fp32, DeviceOps::accumulate_cast) and zeroes it for the
  /// next micro-batch. No-op without one. No collective; never throws for
  /// a valid unit.
  void fold_micro_grad(UnitId u);
  /// Stages 2/3: adds n reduced gradient elements (`src`, of `src_type`, in
  /// the compute device's memory) times `scale` into unit u's gradient
  /// shard (grad_accum_dtype) from shard element `at`, wherever it lives. Blocks of a unit
  /// come in increasing order within a micro-batch. `boundary`: this
  /// micro-batch ends the accumulation cycle (nvme: statistics are taken
  /// as each sub-group completes). Never throws for nvme I/O: the first
  /// error is kept and thrown by finish_reductions(), so that it cannot
  /// strike one rank between collectives.
  void accumulate_grad_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n, float scale,
                             bool boundary);
  /// Waits for every gradient write in flight. Throws IoError.
  void finish_grad_writes();
  /// finish_grad_writes, then throws (IoError) the first I/O error that
  /// accumulate_grad_shard kept.
  void finish_reductions();
  /// Drops the gradients held on nvme (the next cycle starts from zeros).
  void clear_nvme_grads();
  /// Sum of squares and Inf/NaN count of this rank's gradient shard of
  /// unit u (at stages 0/1 the rank's window of the full buffer), added
  /// sub-group by sub-group in order, so every tier gives the same bits.
  kernels::GradStats grad_stats(UnitId u);

  // --- Stage 3 parameter swap-in ------------------------------------------

  /// Starts reading unit u's nvme parameter shard into its swap-in buffer.
  /// `required`: throws InvariantError when all offload_param.buffer_count
  /// buffers are held; otherwise returns false then. No-op (true) for
  /// resident shards or a fetch already started.
  bool start_param_fetch(UnitId u, bool required);
  /// Unit u's parameter shard for an all-gather: its resident buffer, or
  /// the swap-in buffer once its read completes. Throws IoError.
  const void* param_source(UnitId u);
  /// Returns unit u's swap-in buffer (waiting for its read; a failed read is
  /// dropped). Never throws.
  void release_param_staging(UnitId u) noexcept;
  /// Makes `shard` (host memory: unit u's parameter shard, numel(u,
  /// params) elements of the compute dtype, as the swap files hold them)
  /// unit u's swap-in buffer, as if read by start_param_fetch: the updated
  /// shard a DeferredStep hands over (runtime/update/deferred_step.h). It
  /// counts against offload_param.buffer_count as a fetch does, not
  /// enforced (it is already held). InvariantError when u's parameters are
  /// not on nvme, the buffer is too small, or u already has one.
  void adopt_param_staging(UnitId u, HostBuffer shard);
  /// Swap-in buffers held now.
  int param_staging_count() const { return param_staging_count_; }
  /// True while unit u holds a swap-in buffer (fetched or adopted).
  bool param_staged(UnitId u) const;

  // --- Swap files, for the optimizer's pipeline -----------------------------

  /// Swap file key of sub-group g of array a of unit u.
  static std::string swap_key(UnitId u, std::size_t g, ArrayRef a);
  /// Directory holding array a's swap files (InvariantError without one).
  SwapDirectory& swap_dir(ArrayRef a);
  /// All swap I/O so far (pipeline, swap-ins, gradients); the pipeline adds
  /// its own figures.
  SwapPipelineStats& io_total() { return total_; }
  /// The I/O of the last optimizer step (set by the engine's optimizer).
  SwapPipelineStats& last_step() { return last_step_; }

 private:
  // One unit's arrays (empty buffers for nvme arrays) and tiers.
  struct UnitArrays {
    DeviceArray params, master, grad, micro_grad;
    std::vector<DeviceArray> states;
    MemTier param_tier = MemTier::device;      // stage 3 parameter shard
    MemTier optimizer_tier = MemTier::device;  // master, states, grad shard (stages 2/3)
    std::vector<SubGroup> subgroups;
    UnitStates state_arrays;                   // how `states` is laid out
    HostBuffer param_staging;                  // nvme parameter shard swapped in
    std::optional<SwapBatch> param_read;       // its read in flight
    kernels::GradStats nvme_grad_stats;        // nvme gradient shard: stats of the boundary micro-batch
  };
  // A gradient sub-group write in flight (buffer first: the batch, which
  // refers to it, is destroyed first).
  struct PendingGradWrite {
    HostBuffer buffer;
    SwapBatch batch;
  };
  // The gradient sub-group being accumulated in memory: consecutive reduced
  // blocks of one sub-group cost one read and one write, not one each.
  struct OpenGradSubGroup {
    UnitId unit = -1;  // -1: none open
    std::size_t subgroup = 0;
    std::uint64_t bytes = 0;  // logical bytes of the sub-group
    HostBuffer buffer;
  };

  // A sub-group staged apart from the whole-array buffer (items()).
  struct Bounce {
    HostBuffer buffer;
    std::byte* target = nullptr;  // its place in the whole-array buffer
    std::uint64_t bytes = 0;
  };

  void assign_tiers();
  void open_swap_folders(std::uint64_t optimizer_bytes, std::uint64_t param_bytes, std::uint64_t in_flight_bytes);
  void allocate();
  UnitArrays& unit(UnitId u);
  const UnitArrays& unit(UnitId u) const;
  std::vector<SwapItem> items(UnitId u, ArrayRef a, std::byte* buf, bool reading, std::vector<std::string>& keys,
                              std::vector<Bounce>& bounce);
  static void unbounce(std::vector<Bounce>& bounce);
  void timed_wait(SwapBatch& batch, bool write);
  Tracer* tracer_ = nullptr;
  void accumulate_nvme_grad(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n, float scale,
                            bool boundary);
  void flush_open_grad();

  const FlatLayout& layout_;
  DeviceOps& ops_;
  MemoryLedger& ledger_;
  ArrayStoreOptions o_;
  HostPool host_;                     ///< staging buffers (ledger: host tier)
  std::unique_ptr<DeviceOps> host_ops_;
  std::unique_ptr<IoEngine> io_;      ///< null without nvme tiers
  std::unique_ptr<SwapDirectory> optimizer_dir_;
  std::unique_ptr<SwapDirectory> param_dir_;
  std::vector<UnitArrays> units_;
  std::vector<ArrayAllocation> arrays_;  ///< the plan's arrays, until allocate() has made them
  OpenGradSubGroup open_grad_;
  std::deque<PendingGradWrite> grad_writes_;
  int param_staging_count_ = 0;
  bool offloaded_ = false;
  bool micro_grad_ = false;
  std::string deferred_error_;
  SwapPipelineStats last_step_;
  SwapPipelineStats total_;
};

}  // namespace zeroshard
