// Checking at finalize() that every rank built the same model with the same
// configuration, before any collective depends on it.
//
// [Note: model fingerprint]
// Ranks that declare different units, or run different stages, bucket
// sizes or offload tiers, issue collectives of different counts or in a
// different order: MPI then fails with a truncation on one rank and hangs
// the others, or writes past a receive buffer. Engine::finalize() first
// exchanges a fixed-size summary (check_same_model): the configuration
// values that decide the collectives, the unit and parameter counts, and
// hashes of the names and shapes, as an all-gather of kFingerprintFields
// 64-bit words per rank, which cannot overflow whatever the ranks hold. If
// the summaries differ, the first differing field is named with the ranks
// that hold each value; for a difference inside the units (same count),
// per-unit element counts and hashes are exchanged next (the unit count is
// then known to agree) and the two ranks' descriptions of the first
// differing unit are broadcast, so that every rank throws the same
// AgreedConfigError.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"
#include "runtime/config/config.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// Words in the fixed-size summary each rank contributes.
inline constexpr std::size_t kFingerprintFields = 26;

/// Collective over comm: returns if every rank has the same model and
/// configuration summary, else throws on every rank AgreedConfigError
/// "ranks were built with different models or configurations: <field>:
/// <value> on ranks 0, 2; <value> on rank 1; ..." naming the first
/// difference. Compares: zero_optimization.stage, the compute dtype,
/// optimizer.type and its hyper-parameters, gradient_accumulation_steps,
/// gradient_clipping, communication_data_type, overlap_comm, the bucket
/// sizes, sub_group_size, the offload tiers (devices, max_in_cpu),
/// stage3_gather_16bit_weights_on_model_save (its save gathers at stage 3),
/// the parameter group count, the unit and parameter counts, each unit's
/// element count and a hash of the unit and parameter names and shapes.
/// nvme paths may differ (node-local disks). `layout` is read before
/// FlatLayout::finalize (element counts come from the parameters).
/// Throws CommError if the exchange fails.
void check_same_model(Communicator& comm, const EngineConfig& config, const FlatLayout& layout,
                      std::size_t param_groups);

}  // namespace zeroshard
