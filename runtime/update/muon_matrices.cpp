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

std::size_t muon_held_elements(const MuonParam& p, int stage, int rank, int tp_rank, std::size_t lo, std::size_t hi) {
  if (stage == 0 || p.owner == rank) return p.gathers_tp(tp_rank) ? p.full_rows() * p.full_cols() : p.numel();
  return std::clamp(p.offset + p.numel(), lo, hi) - std::clamp(p.offset, lo, hi);
}

std::vector<MuonParam> muon_matrices(const FlatLayout& layout, const OptimizerHyper& h, const std::string& source,
                                     const MuonTensorParallel& tp) {
  std::vector<MuonParam> out;
  if (h.kind != OptimizerKind::muon) return out;
  std::vector<MuonMatrix> shapes;
  for (ParamId id = 0; id < static_cast<ParamId>(layout.params().size()); ++id) {
    const ParamInfo& p = layout.param(id);
    const std::string why = muon_reason(h.muon.params, p.name, p.group);
    if (why.empty()) continue;
    check_muon_shape(source, p.name, p.shape, why);
    if (p.numel == 0) continue;
    const auto at = static_cast<std::size_t>(id);
    out.push_back(MuonParam{.param = id, .unit = p.unit, .offset = p.offset,
                            .rows = static_cast<std::size_t>(p.shape[0]), .cols = static_cast<std::size_t>(p.shape[1]),
                            .split_dim = at < tp.split_dims.size() ? tp.split_dims[at] : -1, .tp_size = tp.size});
    shapes.push_back(MuonMatrix{out.back().full_rows(), out.back().full_cols()});
  }
  const std::vector<int> owners = assign_muon_owners(shapes, layout.world_size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i].owner = owners[i];
  // Each dp owner's split matrices over the tp ranks, by the same rule.
  for (int r = 0; r < layout.world_size() && tp.size > 1; ++r) {
    std::vector<std::size_t> mine;
    std::vector<MuonMatrix> mine_shapes;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i].owner == r && out[i].split()) {
        mine.push_back(i);
        mine_shapes.push_back(shapes[i]);
      }
    }
    const std::vector<int> tp_owners = assign_muon_owners(mine_shapes, tp.size);
    for (std::size_t k = 0; k < mine.size(); ++k) out[mine[k]].tp_owner = tp_owners[k];
  }
  return out;
}

std::size_t muon_unit_buffer_elements(const FlatLayout& layout, const std::vector<MuonParam>& matrices, int stage,
                                      int rank, int tp_rank, UnitId u) {
  const auto [lo, hi] = muon_updated_range(layout.unit(u), stage, rank);
  std::size_t n = 0;
  for (const MuonParam& p : matrices) {
    if (p.unit == u) n += muon_held_elements(p, stage, rank, tp_rank, lo, hi);
  }
  return n;
}

}  // namespace zeroshard
