// Step replay: the ledger records of one training step, computed by running
// the engine's own decision code over sizes, without the model's memory,
// without ranks and without I/O. Used by the memory estimate
// (runtime/plan/memory_estimate.h, MemoryEstimate::after_step).
#pragma once

#include "core/memory_ledger.h"
#include "runtime/sharding/array_plan.h"
#include "runtime/config/config.h"
#include "runtime/sharding/flat_layout.h"

// [Note: step replay]
// The transient memory of a step is leased from the engine's BufferPool
// (runtime/sharding/buffer_pool.h: stage 3 full units and uploads, gradient
// buckets, micro-batch gradients; the ledger records the bytes leased) and
// from the ArrayStore's HostPool (offload/host_pool.h: nvme parameter
// swap-ins, nvme gradient sub-groups, the optimizer's swap pipeline; the
// ledger records capacities, so the pool's reuse rule matters). The replay
// drives:
//   - the real Unsharder and GradReducer (runtime/sharding/unsharder.h,
//     runtime/sharding/grad_reducer.h), with the options the Engine builds
//     (engine_unsharder_options, engine_grad_reducer_options), over a real
//     BufferPool whose DeviceOps hands out address ranges without memory
//     and a communicator of the world size and rank whose collectives
//     complete at once (their results are never read). Every lease and its
//     order is therefore the engine's: prefetch and reuse decisions, bucket
//     packing, in-place buckets, in-flight limits. The reducer retires
//     overlapped buckets at fixed points only (not when a test succeeds),
//     which makes this exact on real ranks;
//   - a HostPoolSizes (the HostPool's reuse rule on capacities) for the
//     ArrayStore's host staging: the parameter swap-in of an nvme shard
//     (acquired by ShardSource::shard or prefetch, within
//     offload_param.buffer_count, released by ShardSource::release) and
//     the open gradient sub-group of an nvme gradient shard (one sub-group
//     held at a time, released when the next opens and at the end of the
//     reductions), mirroring ArrayStore::start_param_fetch /
//     release_param_staging / accumulate_nvme_grad / finish_grad_writes;
//   - replay_swap_pipeline (offload/swap_pipeline.h) for the optimizer's
//     pipeline over every unit's sub-groups, with the engine's slot list
//     (the unit's nvme arrays in the order params, grad, master, states).
// Scope: the cpu compute device (DeviceOps::host_addressable(): no staging
// copies of device arrays; a GPU engine also stages shards and
// gradients through host buffers, which this does not replay). ZeRO++'s
// options replay as the engine runs them: hpZ's group is the rank's k
// consecutive ranks; qgZ's nodes are zeroshard.zeropp.ranks_per_node's
// blocks, or, where that is 0 (the host names decide), the given
// ranks_per_node (0: the world on one node).

namespace zeroshard {

/// Replays one standard training step of rank `rank` on `ledger`, which
/// must hold what the Engine's ledger holds after finalize() (the plan's
/// arrays): forward, every unit u = 0..U-1 unshard(u), reshard(u);
/// backward, u = U-1..0: unshard(u), the first grad() of each of u's
/// parameters (stages 2/3 lease u's micro-batch gradient there),
/// reduce_gradients(u), reshard(u); then step() with
/// gradient_accumulation_steps 1 and no overflow (the optimizer runs, then
/// the stage 1/2 all-gather or the stage 3 refresh). `plan` is
/// plan_arrays(layout, engine_array_plan_options(config, rank)). The
/// config's overlap_comm, bucket sizes, stage3_* knobs, reduction order,
/// communication dtype and offload settings apply as the Engine applies
/// them. Throws InvariantError as the Engine would (e.g. more parameter
/// swap-ins than offload_param.buffer_count). Pure apart from `ledger`;
/// thread safe on distinct ledgers.
void replay_step(const FlatLayout& layout, const EngineConfig& config, int rank, const ArrayPlan& plan,
                 MemoryLedger& ledger, int ranks_per_node = 0);

/// Replays the first push a parameter server answers for one hosted
/// worker ([Note: parameter-server layout] in runtime/ps/param_server.h)
/// on `ledger`: the staging of the pushed parameter and gradient shards
/// into the worker's store, the update (its swap pipeline), and the
/// staging of the parameter shards read for the pull, all from that
/// store's own host pool. `o` is ps_server_array_plan_options(config,
/// worker) and `plan` plan_arrays(layout, o); `layout` is the workers'.
/// Pure apart from `ledger`.
void replay_server_push(const FlatLayout& layout, const EngineConfig& config, const ArrayPlan& plan,
                        const ArrayPlanOptions& o, MemoryLedger& ledger);

/// The ranks per node qgZ runs with for `config` at `world_size`:
/// zeroshard.zeropp.ranks_per_node when set, else `ranks_per_node` (the
/// hosts' layout), else (0) the whole world. Throws ConfigError naming the
/// key when it does not divide the world size. Pure.
int qgz_ranks_per_node(const EngineConfig& config, int world_size, int ranks_per_node);

}  // namespace zeroshard
