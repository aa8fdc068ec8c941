// The ds_config reader's passes over the JSON document before values are
// read (runtime/config/config.cpp): legacy spellings mapped to current ones,
// "auto" filled, and every key checked against the key table
// (runtime/config/config_keys.h). Each pass records its problems and warnings in
// a ConfigDiagnostics and goes on, so that one run reports them all.
// Internal to the reader; not thread-safe (one document per call).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/config_options.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

/// The value at dotted `path` in `doc`, or nullptr when a step is missing
/// or not an object.
const nlohmann::json* json_at(const nlohmann::json& doc, const std::string& path);
nlohmann::json* json_at(nlohmann::json& doc, const std::string& path);

/// Rewrites the legacy spellings DeepSpeed still maps (zero_optimization
/// true/false, allgather_size, bfloat16, zero_optimization.cpu_offload,
/// cpu_offload_param, cpu_offload_use_pin_memory,
/// zero_optimization.stage3_gather_fp16_weights_on_model_save, the field
/// names of DeepSpeed's stage3_* keys (prefetch_bucket_size,
/// gather_16bit_weights_on_model_save, ...), communication_data_type
/// "bfp16"; aio.thread_count is mapped by AioConfig) into current keys of
/// `doc`. Records one note line
/// saying what each became (a problem instead when `strict`), and a
/// problem for a form DeepSpeed refuses too (a bare stage number).
void normalize_legacy(nlohmann::json& doc, bool strict, ConfigDiagnostics& d);

/// Replaces "auto" by the values `o` supplies (o.values, then the
/// hidden-size rules), appending each to `fills` with its rule. A batch key
/// left "auto" is removed for the batch arithmetic to derive when the other
/// keys determine it; every other "auto" left is one problem listing them
/// all. A value in o.values for a key that may not be "auto" is a problem.
/// Returns the batch keys removed; adds the keys left "auto" (except
/// stage3_*, which the key check reports) to `unfilled`.
std::set<std::string> resolve_auto(nlohmann::json& doc, const ConfigOptions& o, std::set<std::string>& unfilled,
                                   std::vector<AutoFill>& fills, ConfigDiagnostics& d);

/// Checks every key of every section against the key table: JSON type,
/// unknown keys (with the closest known key), keys for another optimizer or
/// scheduler type, refused keys, no-effect keys (one warning line, or a
/// problem when `strict`) and the stage3_* knobs (one problem). Paths in
/// `skip` (reported already) are not checked. Returns the paths whose
/// values are not to be read, `skip` included.
std::set<std::string> check_keys(const nlohmann::json& doc, bool strict, const std::set<std::string>& skip,
                                 ConfigDiagnostics& d);

}  // namespace zeroshard
