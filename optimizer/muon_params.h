// Which parameters Muon updates (optimizer.type "Muon"): the ones whose
// name matches a pattern of optimizer.params.muon_params. Muon is for the
// hidden 2-D weight matrices; embeddings, the LM head, biases and norms
// train with AdamW (optimizer.params.adamw), as in the reference
// implementation and the Moonshot AI paper.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "optimizer/optimizer.h"

namespace zeroshard {

/// The id of the engine's "muon" parameter group (ShardOptimizer adds it
/// right after the default group when the optimizer is Muon).
inline constexpr int kMuonGroup = 1;

/// Why parameter `name` of parameter group `group` is one of Muon's
/// matrices: it was declared in group kMuonGroup, or it is in the default
/// group (0) and matches one of `patterns` (muon_params; fnmatch(3) with no
/// flags: "*" also crosses dots, "h.*.attn.c_attn.weight"); other groups,
/// frozen ones included, keep theirs. "" when it is not. Only meaningful
/// when the optimizer is Muon. Pure.
std::string muon_reason(const std::vector<std::string>& patterns, const std::string& name, int group);

/// muon_reason is not "". Pure.
bool is_muon_parameter(const std::vector<std::string>& patterns, const std::string& name, int group);

/// Checks that parameter `name` of `shape`, given to Muon by `why` (the
/// matching pattern, or the group it was declared in), is a matrix: two
/// dimensions. Throws ConfigError naming the parameter, its shape and
/// `why`, from `source` (the configuration's name), otherwise.
void check_muon_shape(const std::string& source, const std::string& name, const std::vector<std::int64_t>& shape,
                      const std::string& why);

/// One line for each of `patterns` that matches none of `muon_names` (the
/// parameters Muon updates), naming the pattern and up to 3 of `others`
/// (parameters of other groups: name and group name) it matches, which keep
/// their group. Empty when every pattern matches a Muon parameter: a typo in
/// muon_params would otherwise train with AdamW and say nothing. Pure.
std::vector<std::string> unmatched_muon_patterns(const std::vector<std::string>& patterns,
                                                 const std::vector<std::string>& muon_names,
                                                 const std::vector<std::pair<std::string, std::string>>& others);

}  // namespace zeroshard
