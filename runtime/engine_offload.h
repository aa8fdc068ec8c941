// The engine's offload tiers (ZeRO-Offload / ZeRO-Infinity): which of a
// unit's arrays live in host memory or in NVMe swap files, and the code
// that moves them. Private to the engine (included by engine_state.h).
//
// [Note: offload in the engine]
// Tiers are per unit and per array family (runtime/offload_config.h):
//   - optimizer_tier: fp32 master weights (mixed precision), the optimizer
//     states and, at stages 2/3, the gradient shard;
//   - param_tier (stage 3): the parameter shard in the compute dtype.
// MemTier::device means "where compute runs" (CPU RAM in this engine),
// MemTier::host the host offload tier (also RAM here; counted apart in the
// ledger), MemTier::nvme swap files. An nvme array is split into the unit's
// sub-groups (at most sub_group_size elements, boundaries on multiples of
// 4096 elements) with one swap file per (unit, sub-group, array), named
// "u<unit>.g<sub-group>.<array>" (short whatever the parameter names).
// Data flow:
//   - unshard (stage 3): the shard is read into a swap-in buffer ahead of
//     the all-gather, prefetched one unit further than the all-gather;
//   - reduction (stages 2/3): each reduced block is added into the
//     sub-group's gradient file (read, add, write behind); in the boundary
//     micro-batch, when a sub-group's last block has been added, its Inf/NaN
//     count and sum of squares are taken, so step() needs no extra pass over
//     the files; the sums are added sub-group by sub-group, as the other
//     tiers' (unit_grad_stats), so the norm is bitwise the same on every tier;
//   - step(): run_swap_pipeline over all sub-groups of all units (read i+1,
//     update i, write i-1); gradient files are removed after the step, so
//     the next cycle starts from zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "core/memory_ledger.h"
#include "kernels/cpu/cast.h"
#include "offload/host_pool.h"
#include "offload/io_engine.h"
#include "offload/swap_directory.h"
#include "offload/swap_pipeline.h"
#include "runtime/device_ops.h"
#include "runtime/flat_layout.h"

namespace zeroshard {

class EngineState;

/// One sub-group: elements [begin, end) of a unit's shard.
struct SubGroup {
  std::size_t begin = 0;
  std::size_t end = 0;
};

/// A unit's array, as the offload code names it.
enum class ArrayKind { params, master, state, grad };
struct ArrayRef {
  ArrayKind kind = ArrayKind::params;
  int state = 0;  ///< optimizer state index for ArrayKind::state
};

/// A gradient sub-group write in flight (buffer declared first: the batch,
/// which refers to it, is destroyed first).
struct PendingGradWrite {
  HostBuffer buffer;
  SwapBatch batch;
};

/// The gradient sub-group being accumulated in memory: consecutive reduced
/// blocks of one sub-group (small reduction buckets) cost one read and one
/// write, not one each.
struct OpenGradSubGroup {
  UnitId unit = -1;  ///< -1: none open
  std::size_t subgroup = 0;
  std::uint64_t bytes = 0;  ///< logical bytes of the sub-group
  HostBuffer buffer;
};

/// What the engine holds for its offload tiers. Created by finalize() when
/// any tier is host or nvme. Not thread safe (the engine's thread).
struct OffloadRuntime {
  /// Opens the swap directories the configuration needs, in this run's
  /// folder <nvme_path>/zeroshard-<host>-<pid>-rank<r>-e<k> (removing folders of
  /// this host's runs whose process is gone), after checking free space for
  /// `optimizer_bytes` / `param_bytes` plus `in_flight_bytes` of temporary
  /// files. Throws IoError naming the config key and path, or the space
  /// needed; nothing is left behind then.
  OffloadRuntime(EngineState& s, std::uint64_t optimizer_bytes, std::uint64_t param_bytes,
                 std::uint64_t in_flight_bytes);
  /// Removes the swap files and this run's folders.
  ~OffloadRuntime();
  OffloadRuntime(const OffloadRuntime&) = delete;
  OffloadRuntime& operator=(const OffloadRuntime&) = delete;

  HostPool host;                       ///< staging buffers (ledger: host tier)
  std::unique_ptr<IoEngine> io;        ///< null without nvme tiers
  std::unique_ptr<SwapDirectory> optimizer_dir;
  std::unique_ptr<SwapDirectory> param_dir;
  OpenGradSubGroup open_grad;
  std::deque<PendingGradWrite> grad_writes;
  int params_staged = 0;               ///< param_stage buffers held now
  std::string deferred_error;          ///< first swap I/O error of the reductions
  SwapPipelineStats last_step;         ///< I/O of the last optimizer step
  SwapPipelineStats total;             ///< all swap I/O so far (pipeline, unshard, gradients)
};

/// finalize(): picks each unit's tiers and sub-groups, creates
/// s.offload when needed. Called before buffers are allocated.
void assign_offload_tiers(EngineState& s);
/// Swap file key of sub-group g of array a of unit u.
std::string swap_key(UnitId u, std::size_t g, ArrayRef a);
/// Directory holding array a's swap files (param_dir for parameters).
SwapDirectory* swap_dir(EngineState& s, ArrayRef a);
/// Element type of array a (compute dtype for parameters and gradients, else fp32).
DType array_dtype(const EngineState& s, ArrayRef a);
/// Tier of array a of unit u.
MemTier array_tier(const EngineState& s, UnitId u, ArrayRef a);
/// True when array a of unit u is in memory the host cannot address: the
/// device tier of an engine whose DeviceOps is not host_addressable().
bool in_device_memory(const EngineState& s, UnitId u, ArrayRef a);
/// The ops of the memory array a of unit u lives in: the compute device's
/// for the device tier, host memory's for the host and nvme tiers.
DeviceOps& array_ops(EngineState& s, UnitId u, ArrayRef a);
/// `bytes` bytes at src (memory of the compute device) readable by the host:
/// src itself on a host_addressable device, else a copy in `holder`.
/// `settled`: nothing queued writes src any more (a completed collective's
/// output), so the copy need not wait for the queue (DeviceOps::download_settled).
const void* host_copy(EngineState& s, const void* src, std::size_t bytes, HostBuffer& holder, bool settled = false);

/// Elements of array a of unit u on this rank (full or shard, by stage).
std::size_t array_numel(const EngineState& s, UnitId u, ArrayRef a);

/// Element 0 of array a of unit u in memory (its resident buffer; empty
/// when the array is on nvme).
std::byte* resident_data(EngineState& s, UnitId u, ArrayRef a);
/// Whole array a of unit u readable in memory: a pointer into the resident
/// buffer, or `holder` filled from the swap files. Throws IoError.
void* read_array(EngineState& s, UnitId u, ArrayRef a, HostBuffer& holder);
/// Stores `src` (array_numel elements) as array a: copied into the resident
/// buffer (no-op if src is that buffer) or written to the swap files and
/// waited for. Throws IoError (the previous files stay).
void store_array(EngineState& s, UnitId u, ArrayRef a, const void* src);

/// Stage 3: starts reading unit u's nvme parameter shard into its swap-in
/// buffer. `required`: throws InvariantError when all offload_param
/// buffer_count buffers are held; otherwise returns false then. No-op
/// (true) for resident shards or a fetch already started.
bool start_param_fetch(EngineState& s, UnitId u, bool required);
/// Stage 3: unit u's parameter shard for an all-gather (waits for its
/// fetch).
const void* param_source(EngineState& s, UnitId u);
/// Returns unit u's swap-in buffer (after its read completes).
void release_param_stage(EngineState& s, UnitId u);

/// accumulate_grad_shard for a gradient shard on nvme.
void accumulate_offloaded_grad(EngineState& s, UnitId u, std::size_t at, const void* src, DType src_type,
                               std::size_t n, float scale);
/// Waits for every gradient write in flight. Throws IoError.
void finish_grad_writes(EngineState& s);
/// finish_grad_writes, then throws the first I/O error the reductions
/// deferred (accumulate_grad_shard does not throw: its errors would strike
/// one rank between collectives). step() calls it through run_agreed.
void finish_offloaded_reductions(EngineState& s);
/// The prefetch's start_param_fetch: errors are dropped (the fetch is
/// retried, and its error agreed on, when the unit is unsharded).
void prefetch_param(EngineState& s, UnitId u);
/// Drops the gradients held on nvme (the next cycle starts from zeros).
void clear_offloaded_grads(EngineState& s);
/// Sum of squares and Inf/NaN count of this rank's reduced gradient shard
/// of unit u (every element counted once across ranks).
kernels::GradStats unit_grad_stats(EngineState& s, UnitId u);

/// Runs the optimizer on every unit's local shard (swapping sub-groups
/// through the pipeline when any array is on nvme). `step` is the 1-based
/// optimizer step, `grad_scale` the factor applied to stored gradients.
void run_optimizer(EngineState& s, std::int64_t step, float grad_scale);

}  // namespace zeroshard
