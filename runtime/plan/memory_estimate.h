// Memory estimate: the bytes an Engine's MemoryLedger (core/memory_ledger.h)
// holds after finalize(), per category and tier with padding itemised,
// computed without allocating the model's memory and without ranks (no
// communicator): any world size and rank can be asked for. The figures come
// from plan_arrays() (runtime/sharding/array_plan.h), the function whose list the
// ArrayStore allocates and records, with the options the Engine builds
// (engine_array_plan_options), so estimate and ledger are equal byte for
// byte (tests/runtime/plan/test_memory_estimate.cpp checks a grid of
// configurations against real Engines at 1-3 ranks).
//
// Two moments:
//  - after_finalize: the resident arrays (parameters, gradients, master
//    weights, optimizer states; the nvme tier counts swap-file bytes), and
//    what the engine's components lease for their lifetime (ZeRO++'s hpZ
//    secondary shards and qgZ residuals);
//  - after_step: after one standard training step, current and peak, the
//    transient buffers of the step included (stage 3 gathered units and
//    their swap-ins, gradient buckets and micro-batch gradients, the
//    stage 1/2 parameter all-gather, nvme gradient sub-groups, Muon's
//    per-unit buffer and its staging of nvme arrays, the optimizer's swap
//    pipeline). It replays the step with the engine's own
//    Unsharder, GradReducer and BufferPool over sizes and the HostPool's
//    reuse rule ([Note: step replay], runtime/plan/memory_replay.h, which
//    states the loop: forward 0..U-1, backward U-1..0, one micro-batch,
//    gradient_accumulation_steps 1, no overflow, overlap_comm and the
//    stage3_* knobs as configured, the cpu compute device).
// runtime/plan/zero_formulas.h gives the published model-state formulas to
// compare with. The world size is the data-parallel group's (the dp size
// on a mesh). Free space for swap files is not checked (a property of the
// machine, which finalize() checks).
#pragma once

#include <cstdint>
#include <vector>

#include "core/memory_ledger.h"
#include "runtime/sharding/array_plan.h"
#include "runtime/config/config.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/plan/model_description.h"

namespace zeroshard {


/// What one rank's ledger holds after finalize() and after a step. Plain
/// value type.
struct MemoryEstimate {
  int world_size = 0;
  int rank = 0;
  /// A ledger holding exactly the adds the Engine's finalize() records:
  /// current(c, t), padding(c), peak(c) are bytes.
  MemoryLedger after_finalize;
  /// The ledger after finalize() and one standard training step (the loop
  /// of replay_step, runtime/plan/memory_replay.h): current(c, t) and
  /// padding(c) are what the engine holds after step() returns (the
  /// resident arrays, plus the full buffers of stage 3 persistent units),
  /// peak(c) and peak_total() the highest values during finalize() and
  /// that step, in bytes. Equal byte for byte to a cpu Engine's ledger
  /// driven through that loop.
  MemoryLedger after_step;
  ArrayPlan plan;                      ///< the arrays behind it, per unit
  std::uint64_t parameter_count = 0;   ///< Psi: parameter elements of all units
  std::uint64_t padded_count = 0;      ///< elements of all units' padded flat buffers
  std::uint64_t largest_unit = 0;      ///< padded elements of the largest unit (stage 3 gathers it whole)
  /// A parameter server's estimate (estimate_server_memory): its index
  /// and the workers whose shards it holds (plan is the first one's);
  /// -1 and empty for a training rank.
  int server = -1;
  std::vector<int> hosted_workers;
};

/// Host bytes that finalize() leases for async checkpoints on `rank` with
/// checkpoint.async (MemCategory::checkpoint_staging; async_staging_bytes
/// of a save at step 0, without a mesh): 0 without checkpoint.async or
/// when the snapshot is over checkpoint.staging_memory. `plan` is
/// plan_arrays' for that rank (each unit's state format). Pure.
std::uint64_t async_checkpoint_staging_bytes(const FlatLayout& layout, const EngineConfig& config,
                                             const ArrayPlan& plan, int rank);

/// The estimate for rank `rank` of a layout finalized for its world size.
/// Throws ConfigError as EngineConfig::validate_for_world and
/// plan_arrays (nvme shard above offload_param.buffer_size);
/// InvariantError for a rank outside the world, and where the step would
/// throw it (more nvme parameter swap-ins at once than
/// offload_param.buffer_count). ZeRO++: hpZ's secondary shards
/// (hpz_secondary_bytes) and qgZ's error-feedback residuals
/// (error_feedback_bytes) are resident from finalize() on; qgZ's transient
/// buffers depend on the nodes, `ranks_per_node` where the configuration
/// leaves them to the host names (0: one node; qgz_ranks_per_node in
/// runtime/plan/memory_replay.h). With checkpoint.async the staging area
/// of async saves is resident from finalize() on
/// (async_checkpoint_staging_bytes). Pure; thread safe.
/// With parameter_server.servers set, `layout` is the workers' (W ranks)
/// and this is worker `rank`'s estimate: its configuration without
/// offload_optimizer (ps_worker_config), no master or state arrays.
MemoryEstimate estimate_memory(const FlatLayout& layout, const EngineConfig& config, int rank,
                               int ranks_per_node = 0);

/// The estimate of parameter server `server` of a job with `config`'s
/// parameter_server.servers = S ([Note: parameter-server layout] in
/// runtime/ps/param_server.h): after_finalize holds, for each worker w it
/// serves (ps_hosted_workers), the stage-3 store of rank w
/// (ps_server_array_plan_options); after_step adds each store's host
/// staging of one push (replay_server_push). `layout` is the workers' (W
/// ranks); with parameter_server.push "direct" the servers' (S ranks),
/// and the one store is rank `server`'s (hosted_workers empty: it serves
/// every worker). Equal byte for byte to the server Engine's ledger. Throws
/// ConfigError without parameter servers, InvariantError for a server
/// index outside [0, S). Pure; thread safe.
MemoryEstimate estimate_server_memory(const FlatLayout& layout, const EngineConfig& config, int server);

/// The estimate for rank `rank` of `world_size` ranks of `model`. With
/// parameter_server.servers = S the ranks are laid out as the default
/// placement lays them out: ranks [0, W = world_size - S) train (the
/// estimate of that worker at W ranks) and rank W + s is server s
/// (estimate_server_memory); ConfigError naming
/// parameter_server.servers when S >= world_size. Throws as above and as
/// ModelDescription::layout.
MemoryEstimate estimate_memory(const ModelDescription& model, const EngineConfig& config, int world_size, int rank,
                               int ranks_per_node = 0);

}  // namespace zeroshard
