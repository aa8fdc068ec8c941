// ReduceOrder: the order in which one rank handed units to its GradReducer
// during one optimizer step, and the check that every data-parallel rank
// used the same order.
//
// [Note: reduce order check]
// A bucket's collective sums block r of every rank's send buffer, whatever
// unit each rank packed there: ranks that call reduce_gradients in
// different unit orders (say u0, u1, u2 on rank 0 and u2, u0, u1 on rank 1)
// would sum one rank's u0 with another's u2 and return it as if nothing
// were wrong. The check costs near nothing by default:
//  - record() (each GradReducer::reduce call of the engine) folds the unit
//    id into a running 64-bit hash, hash = splitmix64(hash + unit + 1), and
//    appends it to this step's list;
//  - at the accumulation boundary the hash travels with the gradient
//    norm's exchange (runtime/engine/grad_norm.h), which is already a
//    collective: two more doubles per rank (the hash as two 32-bit halves)
//    plus the rank's data-parallel group on a mesh;
//  - when some rank's hash differs from its group's first rank's, every
//    rank knows it from the same exchanged data, and every rank calls
//    mismatch_message(): its group's lists are all-gathered over the
//    data-parallel communicator and the first rank that differs is named
//    with the units around the first difference; the engine agrees on the
//    message over the world and throws it on every rank before any
//    gradient is used, so no rank updates and, at stage 0, no replica
//    diverges.
// The lists hold one UnitId per reduced unit per micro-batch (stages 2/3
// reduce every micro-batch, 0/1 the boundary's only); clear() at the end of
// each step keeps their capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/splitmix64.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// See [Note: reduce order check]. Not thread safe: the engine's thread.
class ReduceOrder {
 public:
  /// Unit u was handed to the reducer.
  void record(UnitId u) {
    hash_ = splitmix64(hash_ + static_cast<std::uint64_t>(u) + 1);
    calls_.push_back(u);
  }
  /// The current micro-batch's reductions are complete.
  void end_micro_batch() { micro_batch_ends_.push_back(calls_.size()); }
  /// The running hash of this step's record() calls (0 before any).
  std::uint64_t hash() const { return hash_; }
  /// This step's units in record() order.
  const std::vector<UnitId>& calls() const { return calls_; }
  /// Forgets this step (at every accumulation boundary, and when a loaded
  /// checkpoint drops a half-finished step).
  void clear() {
    hash_ = 0;
    calls_.clear();
    micro_batch_ends_.clear();
  }

  /// Collective over `dp` (the data-parallel group whose ranks reduce the
  /// same units, laid out by `layout`; host memory: the engine passes the
  /// group's host communicator): all-gathers every rank's list and
  /// returns "" when they agree, else a message naming optimizer step
  /// `step`, the micro-batch and position of the first difference, the
  /// units rank 0 and the first differing rank reduced there (by name, a
  /// window around it) and every rank whose order differs from rank 0's.
  /// The same string on every rank of `dp`. Throws CommError.
  std::string mismatch_message(Communicator& dp, const FlatLayout& layout, std::int64_t step) const;

 private:
  std::uint64_t hash_ = 0;
  std::vector<UnitId> calls_;
  std::vector<std::size_t> micro_batch_ends_;  // calls_.size() at each end_micro_batch()
};

}  // namespace zeroshard
