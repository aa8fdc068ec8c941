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
/// highest such rank, whose shards hold the padding. With parameter
/// servers (the last S ranks) the largest of the last worker, the first
/// and the last server. Throws as estimate_memory.
int largest_rank(const ModelDescription& model, const EngineConfig& config, int world);

/// The report for rank `rank` of `world` ranks: a header naming the model
/// (`model_name`, Psi, units, the largest unit), the configuration and the
/// rank; the ledger after finalize() per category (rows) and tier
/// (columns) with padding, in bytes and binary units; the side-by-side
/// model-state table (zeroshard, ZeRO paper, DeepSpeed on device and host)
/// and the notes on where they differ. Throws as estimate_memory.
/// With `ranks_per_node` below the world size (hosts of that many
/// consecutive ranks) the estimate uses those hosts for qgZ's buffers and
/// the report adds the bytes a steady step moves between hosts
/// (cross_host_traffic, runtime/plan/cost_model.h). With
/// parameter_server.servers the report names the rank's role (the last S
/// ranks serve) and each role's model states beside the all-reduce
/// engine's at W = world - S ranks, in place of the published formulas.
std::string plan_report(const ModelDescription& model, const std::string& model_name, const EngineConfig& config,
                        int world, int rank, int ranks_per_node = 0);

/// Bytes per second of a link rate as tc writes it: a number with the
/// suffix bit, kbit, mbit, gbit (1000-based) or bps (bytes); e.g. "100mbit"
/// is 12.5e6. Throws ConfigError naming the text otherwise.
double link_rate_bytes(const std::string& rate);

}  // namespace zeroshard::tools
