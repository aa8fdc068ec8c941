// The planner: which ZeRO stage, offload tiers, sub-group size, buffer count
// and micro-batch fit a memory budget per rank, ranked by predicted step
// time (runtime/plan/cost_model.h), with the reason each rejected one does not
// fit, and the ds_config of the chosen one.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory_ledger.h"
#include "runtime/plan/cost_model.h"
#include "runtime/plan/model_description.h"

// [Note: planner]
// Candidates, each a rewrite of the user's ds_config (its other keys kept,
// those of its offload sections too, e.g. max_in_cpu):
//   zero_optimization.stage 0-3;
//   offload_optimizer.device none, cpu, nvme (stages 1-3);
//   offload_param.device none, cpu, nvme (stage 3);
//   sub_group_size 1e9 and 1e8 and buffer_count 4 and 2 where the optimizer
//     is on nvme (smaller sub-groups and fewer buffers hold less host memory
//     for the swap pipeline; more files cost time);
//   reduce_bucket_size = allgather_bucket_size: the base config's, 5e7 and
//     5e6 (smaller buckets hold less transient memory, cost more calls);
//   a variant whose bytes and predicted time equal an earlier one's is
//   listed once (the first: the base config's or DeepSpeed's defaults);
//   train_micro_batch_size_per_gpu from the micro-batch list, with
//     gradient_accumulation_steps = global batch / (micro-batch x world)
//     where a global batch is given (micro-batches that do not divide it are
//     skipped);
//   nvme only where an nvme path and free nvme bytes are given;
//   across hosts (ranks_per_node L below the world size): ZeRO++'s options
//     at stage 3 (none, qwZ, hpZ over the L ranks of a host, qgZ, all
//     three) and qgZ at stage 2, each with the estimate's extra memory
//     (hpZ's secondary shards, qgZ's buffers) and, with rates, the
//     predicted time over the link (MachineRates::link_bandwidth) and the
//     bytes a step moves between hosts.
// A candidate that EngineConfig rejects is left out. Each is laid out for
// the world size and estimated (runtime/plan/memory_estimate.h) for rank 0 and
// the last rank (shards are equal in size; the last ranks' hold the
// padding), keeping the one with more bytes: per tier, the tier's peak in
// the ledger after one training step (MemoryEstimate::after_step: the
// resident arrays and the step's transient buffers at their peak), plus on
// the device tier activation_bytes_per_sample x micro-batch. It fits when
// every tier is within its budget; a rejected one names each tier over
// budget and by how much. Fits are ranked by predicted time per sample
// (step time / samples per step) when rates are given, else by device bytes
// (and the plan says so). When nothing fits, the plan names the candidate
// with the smallest footprint in memory (device + host) and what it would
// need on each tier.

namespace zeroshard {

/// Bytes per rank available on each tier. Plain value type.
struct PlanBudget {
  std::uint64_t device = 0;  ///< compute device memory (the CPU's RAM in a CPU build)
  std::uint64_t host = 0;    ///< host memory for offloaded state
  std::uint64_t nvme = 0;    ///< free bytes under nvme_path (0: no nvme candidates)
};

/// What to plan for. Plain value type.
struct PlanRequest {
  ModelDescription model;
  int world_size = 1;                 ///< data-parallel ranks
  nlohmann::json base_config = nlohmann::json::object();  ///< the user's ds_config (optimizer, dtype, ...)
  std::string nvme_path;              ///< written into nvme candidates; "" = no nvme candidates
  PlanBudget budget;
  std::uint64_t activation_bytes_per_sample = 0;  ///< the loop's activations per sample (bytes)
  std::vector<std::int64_t> micro_batches;        ///< candidates; empty = the base config's micro-batch (or 1)
  std::optional<std::int64_t> global_batch;       ///< samples per optimizer step over all ranks
  std::optional<MachineRates> rates;              ///< from `zs_plan --calibrate`; none: rank by device bytes
  /// Ranks per host (hosts of that many consecutive ranks); 0 = one host.
  /// Below the world size the plan adds ZeRO++'s candidates and predicts
  /// with the rates' link_bandwidth over these hosts.
  int ranks_per_node = 0;
  double loop_seconds_per_sample = 0;             ///< the loop's forward + backward compute per sample
};

/// One candidate configuration. Plain value type.
struct PlanCandidate {
  std::string label;         ///< e.g. "stage 3, optimizer nvme, param cpu, sub_group 1e8, buffers 4, micro-batch 8"
  nlohmann::json ds_config;  ///< the base config rewritten for this candidate
  int stage = 0;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;
  std::int64_t micro_batch = 1;
  std::int64_t accumulation = 1;
  bool quantized_weights = false;    ///< ZeRO++ qwZ
  int hpz_partition_size = 1;        ///< ZeRO++ hpZ (1: off)
  bool quantized_gradients = false;  ///< ZeRO++ qgZ
  int rank = 0;                                   ///< the rank estimated (the one with the most bytes)
  std::array<std::uint64_t, 3> bytes{};           ///< peak bytes per MemTier (device with activations)
  std::uint64_t activation_bytes = 0;             ///< of which activations (device)
  bool fits = false;
  std::string rejection;                          ///< why not, per tier over budget ("" when it fits)
  std::optional<StepCost> cost;                   ///< with rates
  double seconds_per_sample = 0;                  ///< with rates: cost->step() / samples per step
};

/// The planner's answer. Plain value type.
struct Plan {
  std::vector<PlanCandidate> fits;      ///< best first
  std::vector<PlanCandidate> rejected;  ///< in enumeration order
  bool ranked_by_time = false;          ///< false: by device bytes (no rates given)
  /// Empty when something fits; otherwise the candidate with the smallest
  /// footprint in memory (device + host) and what it needs on each tier.
  std::string nothing_fits;
  const PlanCandidate* chosen() const { return fits.empty() ? nullptr : &fits.front(); }
};

/// Plans (see [Note: planner]). Throws ConfigError for an invalid request
/// (world size < 1, a micro-batch < 1, a base config that does not load
/// even unchanged, a base config with parameter_server.servers) naming
/// it, and as estimate_memory and predict_step.
/// Pure apart from reading nothing; thread safe.
Plan make_plan(const PlanRequest& request);

/// The plan as text: the budget, the fits ranked (bytes per tier, predicted
/// step and time per sample), the rejected ones with their reasons, and the
/// choice or what nothing fitting would need.
std::string plan_text(const PlanRequest& request, const Plan& plan);

}  // namespace zeroshard
