// Which data-parallel rank orthogonalizes each Muon matrix (issue: Muon on
// sharded state). Newton-Schulz needs the whole matrix, while ZeRO gives
// every rank a flat 1/N slice: each Muon matrix gets one owner rank, which
// gathers it, runs the iteration and scatters the update back.
//
// [Note: Muon owner assignment]
// The cost of a rows x cols matrix is its Newton-Schulz work, m^2 n per
// product with m = min, n = max (3 products a step: 2 m^2 n + m^3; the
// ranking uses m^2 n, the dominant term, as rows x cols x min(rows, cols)).
// Matrices are taken in order of decreasing cost (ties: lower index first)
// and each goes to the rank with the least cost so far (ties: lower rank):
// Graham's longest-processing-time rule. Deterministic (integers only, no
// hashing), so every rank computes the same owners from the same layout,
// and a checkpoint records them. Bound: the most loaded rank's cost is at
// most the ideal (total / N) plus the largest single matrix's cost, since
// the last matrix added to it went to the least loaded rank, whose cost was
// then at most the average.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zeroshard {

/// A Muon matrix's shape (rows x cols, both >= 1).
struct MuonMatrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
};

/// rows x cols x min(rows, cols): the Newton-Schulz cost used for balancing.
/// Throws InvariantError on overflow of 64 bits or a zero dimension.
std::uint64_t newton_schulz_cost(const MuonMatrix& m);

/// The owner rank in [0, world_size) of each matrix, by [Note: Muon owner
/// assignment]. world_size >= 1 (InvariantError). Pure; thread safe.
std::vector<int> assign_muon_owners(const std::vector<MuonMatrix>& matrices, int world_size);

}  // namespace zeroshard
