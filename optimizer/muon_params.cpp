// Muon's parameters: see optimizer/muon_params.h.
#include "optimizer/muon_params.h"

#include <fnmatch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace zeroshard {

std::string muon_pattern(const OptimizerHyper& h, std::string_view name) {
  if (h.kind != OptimizerKind::muon) return {};
  const std::string n(name);
  for (const std::string& p : h.muon.params) {
    if (fnmatch(p.c_str(), n.c_str(), 0) == 0) return p;
  }
  return {};
}

void check_muon_shape(const std::string& source, const std::string& name, const std::vector<std::int64_t>& shape,
                      const std::string& why) {
  if (shape.size() == 2) return;
  throw ConfigError(fmt::format(
      "{}: parameter \"{}\" of shape [{}] goes to Muon ({}), but Muon orthogonalizes 2-D matrices only: narrow "
      "optimizer.params.muon_params so that 1-D and other parameters (biases, norms) train with AdamW",
      source, name, fmt::join(shape, ", "), why));
}

}  // namespace zeroshard
