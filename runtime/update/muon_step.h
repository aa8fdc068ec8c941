// MuonStep: Muon's whole-matrix update on ZeRO's flat shards (optimizer
// .type "Muon"; the kernels are kernels/cpu/muon, the owners
// optimizer/muon_owners.h). The element-wise AdamW of the other parameters
// is ShardOptimizer's (runtime/update/shard_optimizer.h).
//
// [Note: Muon on shards]
// A Muon matrix lies in its unit's flat buffer at [offset, offset + m n),
// and that range may cross the windows of several ranks. Its momentum
// lives in state array 0 (exp_avg) beside AdamW's, on the same tier and
// sharded the same way, so checkpoints reshard it like any state. At each
// applied step, unit by unit:
//   1. every rank runs muon_momentum on the matrix's elements in its window
//      (momentum.lerp_(grad * grad_scale, 1 - beta), the Nesterov blend);
//   2. the owner rank (assign_muon_owners, by Newton-Schulz cost) receives
//      the other ranks' parts with point-to-point messages and holds the
//      whole m x n update ("gather to the owner");
//   3. the owner runs newton_schulz on it;
//   4. it sends each rank its part back ("scatter");
//   5. every rank applies p = p (1 - lr wd) - lr scale O to its part
//      (muon_apply), and in mixed precision writes the rounded copy.
// Every element of a step goes through the same arithmetic at every stage,
// tier and rank count: only who computes it changes. At stage 0 every rank
// holds every window and computes each matrix itself, no messages. The
// gather moves (N - 1) / N of each matrix to its owner and the scatter as
// much back: per step, 2 (N - 1) / N x 4 bytes per Muon element over the
// data-parallel group, the volume of one all-gather and one
// reduce-scatter; a reduce straight to the owner would also move the
// sharded momentum there and back, 1.33x the bytes (bench/muon). Steps 1 and 5 read and write whole arrays through
// ArrayStore::read / store, so every tier works, and run inside the
// engine's storage phase (agreed errors with nvme); steps 2-4 move only
// memory. Temporaries (the window's updates in fp32, the owner's full
// matrices) are one buffer per unit from the host pool (ledger:
// unsharded; muon_unit_buffer_elements, which the estimator's step replay
// leases too).

#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "optimizer/optimizer.h"
#include "runtime/update/shard_optimizer.h"
#include "runtime/sharding/array_store.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/update/muon_matrices.h"

// [Note: Muon on a tensor-parallel mesh]
// With tensor-parallel size T > 1 a tp rank holds a slice of each split
// matrix (TensorParallel::split(0): a block of rows, column-parallel
// layers; split(1): a block of columns, row-parallel ones), and
// Newton-Schulz of a slice is not a slice of Newton-Schulz: Muon is run on
// the whole matrix. The data-parallel steps of [Note: Muon on shards] run on each tp rank's
// slice as they are; the dp owner is the same on every tp rank (the owners
// follow from the whole matrices' shapes), so the T dp owners of a matrix
// form one tp group. Between steps 2 and 3 they send their slices to the
// matrix's tp owner (assigned among the dp owner's split matrices by the
// same cost rule), which puts the whole m x n matrix together (row blocks
// stack as they are; column blocks are interleaved row by row), runs
// Newton-Schulz on it and sends each tp rank its slice of the result. The
// scale uses the whole shape. Every element then goes through the same
// arithmetic as on one rank holding the whole matrix, so a mesh gives
// bitwise the tp = 1 engine's parameters given the same gradients.
// Matrices replicated over tp (split_dim -1) are orthogonalized by every
// tp rank alike. Traffic: (T - 1) / T of each split matrix to its tp owner
// and back, 8 (T - 1) / T bytes per element a step; the tp owner's buffer
// holds the whole matrix (muon_held_elements).

namespace zeroshard {

/// MuonStep's settings. Plain value.
struct MuonStepOptions {
  int stage = 0;                       ///< ZeRO stage
  int rank = 0;                        ///< this rank in the data-parallel group
  int world_size = 1;                  ///< data-parallel ranks
  int tp_rank = 0;                     ///< this rank in the tensor-parallel group
  MuonTensorParallel tp;               ///< the tensor-parallel group's size and the parameters' split dims
  DType dtype = DType::f32;            ///< compute dtype (not f32: fp32 master weights)
  OptimizerHyper hyper;                ///< the optimizer: Muon's when its kind is Muon (muon: momentum, nesterov, ...)
  std::string source = "config";       ///< the configuration's name, for messages
};

/// See the file comment. Thread safety: one thread (the engine's).
class MuonStep {
 public:
  /// The Muon matrices of `layout` (finalized; muon_matrices: none unless
  /// options.hyper is Muon) with their owners. `layout` and `optimizer`
  /// (its group lr and schedule) must outlive this object.
  MuonStep(const FlatLayout& layout, const ShardOptimizer& optimizer, MuonStepOptions options);

  /// The matrices in layout order.
  const std::vector<MuonParam>& params() const { return params_; }
  /// Owner rank of each matrix, in params() order.
  std::vector<int> owners() const;
  /// Tensor-parallel owner of each matrix in params() order (-1: every tp
  /// rank, for matrices whole on each; all -1 at tp size 1).
  std::vector<int> tp_owners() const;

  /// The Muon update of every matrix at 1-based `step` with gradients
  /// multiplied by grad_scale, over `comm` (a host communicator over the
  /// data-parallel group's ranks in its order: the messages are in host
  /// memory; point-to-point, so every rank must call it in the same step)
  /// and, when options.tp.size > 1, `tp` (the tensor-parallel group's host
  /// communicator; null otherwise; InvariantError if missing).
  /// `storage_phase(f)` runs each unit's local reads and writes (steps 1
  /// and 5 of the note): the engine's run_storage_phase. Throws what
  /// ArrayStore and the communicator throw.
  void step(ArrayStore& store, Communicator& comm, Communicator* tp, std::int64_t step, float grad_scale,
            const std::function<void(const std::function<void()>&)>& storage_phase);

 private:
  struct UnitWork;
  void momentum_part(ArrayStore& store, UnitWork& w, float grad_scale) const;
  void exchange(Communicator& comm, UnitWork& w, bool to_owner) const;
  void exchange_tp(Communicator* tp, UnitWork& w, bool to_owner) const;
  void orthogonalize(UnitWork& w) const;
  void apply_part(ArrayStore& store, UnitWork& w, std::int64_t step) const;

  const FlatLayout& layout_;
  const ShardOptimizer& optimizer_;
  MuonStepOptions o_;
  std::vector<MuonParam> params_;
  std::vector<std::vector<std::size_t>> by_unit_;  // indices into params_, per unit
};

}  // namespace zeroshard
