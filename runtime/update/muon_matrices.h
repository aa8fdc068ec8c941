// Which parameters are Muon's matrices (optimizer.type "Muon"), their owner
// ranks, and what each rank holds of them during a step: the layout side of
// runtime/update/muon_step.h ([Note: Muon on shards]), shared with the
// memory estimator's step replay (runtime/plan/memory_replay.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "optimizer/optimizer.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// One Muon matrix: its parameter, shape and owner rank.
struct MuonParam {
  ParamId param = -1;
  UnitId unit = -1;
  std::size_t offset = 0;  ///< first element in the unit's flat buffer
  std::size_t rows = 0;    ///< shape[0]
  std::size_t cols = 0;    ///< shape[1]
  int owner = 0;           ///< data-parallel rank that orthogonalizes it
  std::size_t numel() const { return rows * cols; }
};

/// The Muon matrices of `layout` (finalized) under optimizer `h`, in
/// layout order, with their owners for the layout's world size: the
/// nonempty parameters muon_reason names (the engine's layouts hold them in
/// kMuonGroup, the estimator's in the default group). None unless h is
/// Muon. Throws ConfigError (check_muon_shape) for one that is not 2-D,
/// naming `source`.
std::vector<MuonParam> muon_matrices(const FlatLayout& layout, const OptimizerHyper& h, const std::string& source);

/// fp32 elements of the one host-pool buffer MuonStep::step holds for
/// unit u on `rank` at ZeRO `stage`: each matrix whole where this rank
/// orthogonalizes it (its owner; every rank at stage 0), else the part of
/// it in this rank's window. `matrices` as muon_matrices gives them. Pure.
std::size_t muon_unit_buffer_elements(const FlatLayout& layout, const std::vector<MuonParam>& matrices, int stage,
                                      int rank, UnitId u);

/// The flat range [lo, hi) of unit `info` that `rank` updates at ZeRO
/// `stage`: every window at stage 0, its own at stages 1-3. Pure.
std::pair<std::size_t, std::size_t> muon_updated_range(const UnitInfo& info, int stage, int rank);

/// Elements of matrix p that `rank` holds in a step: all of them where it
/// orthogonalizes p (its owner; every rank at stage 0), else p's part of
/// [lo, hi). Pure.
std::size_t muon_held_elements(const MuonParam& p, int stage, int rank, std::size_t lo, std::size_t hi);

}  // namespace zeroshard
