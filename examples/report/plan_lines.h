// What the examples print about zs_plan's figures for their own run: at the
// start, the memory estimate (runtime/plan/memory_estimate.h) beside the ledger
// after finalize(); at the end, the predicted step time (runtime/
// cost_model.h, with a calibration) beside the measured one.
#pragma once

#include <string>

#include "runtime/plan/cost_model.h"
#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// One line for this rank, right after finalize(): the estimate's bytes per
/// tier (device, host, nvme) beside the ledger's, and "equal" or the tiers
/// that differ. Throws as estimate_memory. Not a collective.
std::string estimate_beside_ledger(const Engine& engine);

/// The predicted step beside the measured one for this rank, from the step
/// breakdown's means (Engine::observe_report(), which needs
/// wall_clock_breakdown on): the loop's own time per micro-batch (compute +
/// other, measured) is the model's input; the optimizer, the exposed
/// communication and the swap waits are predicted and shown beside their
/// measured means, then the whole step with its relative error. Returns
/// one line saying the breakdown was off when it has no steps. Throws as
/// predict_step. Not a collective.
std::string predicted_beside_measured(const Engine& engine, const MachineRates& rates);

}  // namespace zeroshard::examples
