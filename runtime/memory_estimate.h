// Memory estimate: the bytes an Engine's MemoryLedger (core/memory_ledger.h)
// holds after finalize(), per category and tier with padding itemised,
// computed without allocating the model's memory and without ranks (no
// communicator): any world size and rank can be asked for. The figures come
// from plan_arrays() (runtime/array_plan.h), the function whose list the
// ArrayStore allocates and records, with the options the Engine builds
// (engine_array_plan_options), so estimate and ledger are equal byte for
// byte (tests/runtime/test_memory_estimate.cpp checks a grid of
// configurations against real Engines at 1-3 ranks).
//
// Scope: after finalize() the ledger holds exactly the resident arrays
// (parameters, gradients, master weights, optimizer states; the nvme tier
// counts swap-file bytes). The transient buffers of a step (stage 3
// gathered units, gradient buckets, staging) are not part of this
// estimate; runtime/zero_formulas.h gives the published model-state
// formulas to compare with. The world size is the data-parallel group's
// (the dp size on a mesh). Free space for swap files is not checked (a
// property of the machine, which finalize() checks).
#pragma once

#include <cstdint>

#include "core/memory_ledger.h"
#include "runtime/array_plan.h"
#include "runtime/config.h"
#include "runtime/flat_layout.h"
#include "runtime/model_description.h"

namespace zeroshard {

/// The array-plan options an Engine with `config` uses on `rank`: stage,
/// compute dtype, optimizer_state_count(config.optimizer), offload and
/// source. The Engine's finalize() builds its ArrayStore from these.
ArrayPlanOptions engine_array_plan_options(const EngineConfig& config, int rank);

/// What one rank's ledger holds after finalize(). Plain value type.
struct MemoryEstimate {
  int world_size = 0;
  int rank = 0;
  /// A ledger holding exactly the adds the Engine's finalize() records:
  /// current(c, t), padding(c), peak(c) are bytes.
  MemoryLedger after_finalize;
  ArrayPlan plan;                      ///< the arrays behind it, per unit
  std::uint64_t parameter_count = 0;   ///< Psi: parameter elements of all units
  std::uint64_t padded_count = 0;      ///< elements of all units' padded flat buffers
  std::uint64_t largest_unit = 0;      ///< padded elements of the largest unit (stage 3 gathers it whole)
};

/// The estimate for rank `rank` of a layout finalized for its world size.
/// Throws ConfigError as EngineConfig::validate_for_world and
/// plan_arrays (nvme shard above offload_param.buffer_size);
/// InvariantError for a rank outside the world. Pure; thread safe.
MemoryEstimate estimate_memory(const FlatLayout& layout, const EngineConfig& config, int rank);

/// The estimate for rank `rank` of `world_size` ranks of `model`. Throws as
/// above and as ModelDescription::layout.
MemoryEstimate estimate_memory(const ModelDescription& model, const EngineConfig& config, int world_size, int rank);

}  // namespace zeroshard
