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

/// One Muon matrix: its parameter, shape and owner ranks. On a mesh with
/// tensor-parallel size > 1 a split matrix's shape is this tp rank's slice
/// and the whole matrix is orthogonalized by one tp rank ([Note: Muon on a
/// tensor-parallel mesh] in runtime/update/muon_step.h).
struct MuonParam {
  ParamId param = -1;
  UnitId unit = -1;
  std::size_t offset = 0;  ///< first element in the unit's flat buffer
  std::size_t rows = 0;    ///< shape[0] (this tp rank's slice)
  std::size_t cols = 0;    ///< shape[1] (this tp rank's slice)
  int owner = 0;           ///< data-parallel rank that orthogonalizes it
  int split_dim = -1;      ///< TensorParallel::split_dim: 0 rows, 1 columns, -1 whole on every tp rank
  int tp_size = 1;         ///< tensor-parallel ranks
  int tp_owner = -1;       ///< tp rank that orthogonalizes the whole matrix (split ones at tp > 1), else -1
  /// Elements of this tp rank's slice.
  std::size_t numel() const { return rows * cols; }
  /// Whether the tp slices are gathered to one tp rank.
  bool split() const { return split_dim >= 0 && tp_size > 1; }
  /// The whole matrix's rows and columns (the slice's, times tp_size along split_dim).
  std::size_t full_rows() const { return split() && split_dim == 0 ? rows * static_cast<std::size_t>(tp_size) : rows; }
  std::size_t full_cols() const { return split() && split_dim == 1 ? cols * static_cast<std::size_t>(tp_size) : cols; }
  /// Whether tp rank t holds the whole matrix (the tp owner of a split one).
  bool gathers_tp(int t) const { return split() && tp_owner == t; }
};

/// The tensor-parallel group a layout's parameters are sliced over: its
/// size and each parameter's TensorParallel::split_dim by ParamId (missing
/// entries: -1, the whole tensor on every tp rank). Plain value.
struct MuonTensorParallel {
  int size = 1;
  std::vector<int> split_dims;
};

/// The Muon matrices of `layout` (finalized) under optimizer `h`, in
/// layout order, with their owners for the layout's world size: the
/// nonempty parameters muon_reason names (the engine's layouts hold them in
/// kMuonGroup, the estimator's in the default group). None unless h is
/// Muon. Data-parallel owners by assign_muon_owners on the whole matrices'
/// shapes; on a mesh (`tp`.size > 1) each dp owner's split matrices get tp
/// owners by the same rule over the tp ranks. Throws ConfigError
/// (check_muon_shape) for one that is not 2-D, naming `source`.
std::vector<MuonParam> muon_matrices(const FlatLayout& layout, const OptimizerHyper& h, const std::string& source,
                                     const MuonTensorParallel& tp = {});

/// fp32 elements of the one host-pool buffer MuonStep::step holds for
/// unit u on data-parallel `rank` and tensor-parallel `tp_rank` at ZeRO
/// `stage`: each matrix whole where this rank orthogonalizes it (its owner;
/// every rank at stage 0), else the part of it in this rank's window.
/// `matrices` as muon_matrices gives them. Pure.
std::size_t muon_unit_buffer_elements(const FlatLayout& layout, const std::vector<MuonParam>& matrices, int stage,
                                      int rank, int tp_rank, UnitId u);

/// The flat range [lo, hi) of unit `info` that `rank` updates at ZeRO
/// `stage`: every window at stage 0, its own at stages 1-3. Pure.
std::pair<std::size_t, std::size_t> muon_updated_range(const UnitInfo& info, int stage, int rank);

/// Elements of matrix p that data-parallel `rank`, tensor-parallel
/// `tp_rank` holds in a step: where it orthogonalizes p on the dp level
/// (its owner; every rank at stage 0) its slice whole, or the whole matrix
/// on p's tp owner; else p's part of [lo, hi). Pure.
std::size_t muon_held_elements(const MuonParam& p, int stage, int rank, int tp_rank, std::size_t lo, std::size_t hi);

}  // namespace zeroshard
