// Muon's matrices: see runtime/update/muon_matrices.h.
#include "runtime/update/muon_matrices.h"

#include <algorithm>

#include "optimizer/muon_owners.h"
#include "optimizer/muon_params.h"

namespace zeroshard {

std::pair<std::size_t, std::size_t> muon_updated_range(const UnitInfo& info, int stage, int rank) {
  const std::size_t lo = stage == 0 ? 0 : static_cast<std::size_t>(rank) * info.shard;
  return {lo, stage == 0 ? info.padded : lo + info.shard};
}

std::size_t muon_held_elements(const MuonParam& p, int stage, int rank, std::size_t lo, std::size_t hi) {
  if (stage == 0 || p.owner == rank) return p.numel();
  return std::clamp(p.offset + p.numel(), lo, hi) - std::clamp(p.offset, lo, hi);
}

std::vector<MuonParam> muon_matrices(const FlatLayout& layout, const OptimizerHyper& h, const std::string& source) {
  std::vector<MuonParam> out;
  if (h.kind != OptimizerKind::muon) return out;
  std::vector<MuonMatrix> shapes;
  for (ParamId id = 0; id < static_cast<ParamId>(layout.params().size()); ++id) {
    const ParamInfo& p = layout.param(id);
    const std::string why = muon_reason(h.muon.params, p.name, p.group);
    if (why.empty()) continue;
    check_muon_shape(source, p.name, p.shape, why);
    if (p.numel == 0) continue;
    out.push_back(MuonParam{.param = id, .unit = p.unit, .offset = p.offset,
                            .rows = static_cast<std::size_t>(p.shape[0]), .cols = static_cast<std::size_t>(p.shape[1])});
    shapes.push_back(MuonMatrix{out.back().rows, out.back().cols});
  }
  const std::vector<int> owners = assign_muon_owners(shapes, layout.world_size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i].owner = owners[i];
  return out;
}

std::size_t muon_unit_buffer_elements(const FlatLayout& layout, const std::vector<MuonParam>& matrices, int stage,
                                      int rank, UnitId u) {
  const auto [lo, hi] = muon_updated_range(layout.unit(u), stage, rank);
  std::size_t n = 0;
  for (const MuonParam& p : matrices) {
    if (p.unit == u) n += muon_held_elements(p, stage, rank, lo, hi);
  }
  return n;
}

}  // namespace zeroshard
