#include "optimizer/muon_owners.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace zeroshard {

std::uint64_t newton_schulz_cost(const MuonMatrix& m) {
  ZS_CHECK(m.rows > 0 && m.cols > 0, "Muon matrix of {} x {} elements has no elements", m.rows, m.cols);
  const std::uint64_t r = m.rows, c = m.cols, k = std::min(r, c);
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  ZS_CHECK(r <= kMax / c && r * c <= kMax / k, "Muon matrix of {} x {}: its cost overflows 64 bits", m.rows,
           m.cols);
  return r * c * k;
}

std::vector<int> assign_muon_owners(const std::vector<MuonMatrix>& matrices, int world_size) {
  ZS_CHECK(world_size >= 1, "assign_muon_owners: world size must be >= 1, got {}", world_size);
  std::vector<std::uint64_t> cost(matrices.size());
  for (std::size_t i = 0; i < matrices.size(); ++i) cost[i] = newton_schulz_cost(matrices[i]);
  std::vector<std::size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  std::vector<std::uint64_t> load(static_cast<std::size_t>(world_size), 0);
  std::vector<int> owner(matrices.size(), 0);
  for (const std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first (lowest rank) on ties
    owner[i] = static_cast<int>(least - load.begin());
    *least += cost[i];
  }
  return owner;
}

}  // namespace zeroshard
