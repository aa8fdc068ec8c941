// zs_plan's report: the memory estimate of one rank (runtime/plan/memory_estimate.h)
// per ledger category and tier, beside the ZeRO paper's model-state
// formulas and DeepSpeed's estimate_zero2/zero3_model_states_mem_needs
// (runtime/plan/zero_formulas.h), with the sources of the differences. A library
// part of zs_plan, so that tests check its text.
#pragma once

#include <string>

#include "runtime/config/config.h"
#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/model_description.h"

namespace zeroshard::tools {

/// The rank whose estimate holds the most bytes after finalize() among
/// `world` ranks; on a tie (shards are equal in size, so usually) the
/// highest such rank, whose shards hold the padding. Throws as
/// estimate_memory.
int largest_rank(const ModelDescription& model, const EngineConfig& config, int world);

/// The report for rank `rank` of `world` ranks: a header naming the model
/// (`model_name`, Psi, units, the largest unit), the configuration and the
/// rank; the ledger after finalize() per category (rows) and tier
/// (columns) with padding, in bytes and binary units; the side-by-side
/// model-state table (zeroshard, ZeRO paper, DeepSpeed on device and host)
/// and the notes on where they differ. Throws as estimate_memory.
std::string plan_report(const ModelDescription& model, const std::string& model_name, const EngineConfig& config,
                        int world, int rank);

}  // namespace zeroshard::tools
