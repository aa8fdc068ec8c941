// Muon's parameters: see optimizer/muon_params.h.
#include "optimizer/muon_params.h"

#include <fnmatch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace zeroshard {

namespace {

// The first of `patterns` that `name` matches, or "".
std::string first_match(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return p;
  }
  return {};
}

}  // namespace

std::string muon_reason(const std::vector<std::string>& patterns, const std::string& name, int group) {
  if (group == kMuonGroup) return "it was declared in the \"muon\" parameter group";
  if (group != 0) return {};
  const std::string pattern = first_match(patterns, name);
  return pattern.empty() ? std::string() : fmt::format("it matches optimizer.params.muon_params pattern \"{}\"", pattern);
}

bool is_muon_parameter(const std::vector<std::string>& patterns, const std::string& name, int group) {
  return !muon_reason(patterns, name, group).empty();
}

void check_muon_shape(const std::string& source, const std::string& name, const std::vector<std::int64_t>& shape,
                      const std::string& why) {
  if (shape.size() == 2) return;
  throw ConfigError(fmt::format(
      "{}: parameter \"{}\" of shape [{}] goes to Muon ({}), but Muon orthogonalizes 2-D matrices only: narrow "
      "optimizer.params.muon_params so that 1-D and other parameters (biases, norms) train with AdamW",
      source, name, fmt::join(shape, ", "), why));
}

std::vector<std::string> unmatched_muon_patterns(const std::vector<std::string>& patterns,
                                                 const std::vector<std::string>& muon_names,
                                                 const std::vector<std::pair<std::string, std::string>>& others) {
  std::vector<std::string> out;
  for (const std::string& p : patterns) {
    bool matched = false;
    for (const std::string& n : muon_names) matched = matched || fnmatch(p.c_str(), n.c_str(), 0) == 0;
    if (matched) continue;
    std::vector<std::string> elsewhere;
    std::size_t count = 0;
    for (const auto& [name, group] : others) {
      if (fnmatch(p.c_str(), name.c_str(), 0) != 0) continue;
      if (++count <= 3) elsewhere.push_back(fmt::format("\"{}\" of group \"{}\"", name, group));
    }
    std::string line = fmt::format("pattern \"{}\" matches no parameter of the default group", p);
    if (count > 0) {
      line += fmt::format(" (it matches {}{}, which keep their group: only default-group parameters, or those "
                          "declared in group \"muon\", go to Muon)",
                          fmt::join(elsewhere, ", "), count > 3 ? fmt::format(" and {} more", count - 3) : "");
    }
    out.push_back(line);
  }
  return out;
}

}  // namespace zeroshard
