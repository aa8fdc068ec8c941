// The checkpointed activations of a training loop that recomputes the rest
// in its backward pass (activation checkpointing: Chen et al. 2016,
// "Training Deep Nets with Sublinear Memory Cost"; DeepSpeed's
// activation_checkpointing section): the loop saves what it keeps (for a
// transformer, each block's input), restores it before recomputing the
// block, and releases it. Engine::activations() gives the engine's store,
// configured by the config's "activation_checkpointing" section and
// counted in its ledger (MemCategory::activations, "activation
// checkpoints").
//
// [Note: partitioned activations]
// With partition_activations and a tensor-parallel group of t ranks (ZeRO-R's
// Pa, Rajbhandari et al. 2020, section 6.1; DeepSpeed's
// partition_activations), a checkpoint of n elements, which every rank of
// the group holds alike (the replicated input of a Megatron block), is kept
// as rank r's chunk: elements [r c, min(n, (r + 1) c)) of c = ceil(n / t),
// padded to c, so one rank holds c elements instead of n. restore()
// all-gathers the chunks over the group (t c elements, the first n
// copied out). save() and restore() each exchange the element counts over
// the group first, so ranks that disagree (another size, a released
// checkpoint) throw the same error naming them instead of waiting in a
// collective of mismatched sizes. Without a group, or at t = 1, every
// checkpoint is kept whole and nothing is exchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/memory_ledger.h"
#include "runtime/config/config.h"

namespace zeroshard {

/// One saved checkpoint of an ActivationStore (0: none). Plain value.
struct ActivationHandle {
  std::uint64_t id = 0;
  bool valid() const { return id != 0; }
};

/// See the file comment. Holds fp32 values in host memory (the cpu
/// engine's compute memory). Not thread safe: the loop's thread.
class ActivationStore {
 public:
  /// `tp_group`: the group checkpoints are partitioned over when
  /// config.partition_activations (null: none, kept whole); `ledger`: where
  /// the held bytes are recorded (MemCategory::activations, device tier).
  /// Both outlive the store.
  ActivationStore(const ActivationCheckpointingConfig& config, Communicator* tp_group, MemoryLedger& ledger);
  ~ActivationStore();  // removes what it still holds from the ledger
  ActivationStore(const ActivationStore&) = delete;
  ActivationStore& operator=(const ActivationStore&) = delete;

  /// Keeps `values` (n fp32 elements; partitioned: this rank's chunk of
  /// them, [Note: partitioned activations]) and returns its handle.
  /// Partitioned, collective over the group: every rank passes the same n
  /// (and the same values, which are not compared); InvariantError naming
  /// the ranks and their sizes otherwise, on every rank.
  ActivationHandle save(std::span<const float> values);
  /// Writes checkpoint `h`'s n elements into `out` (out.size() == n). It
  /// stays saved. Partitioned, collective over the group: InvariantError
  /// on every rank naming the ranks whose handle is unknown or whose out
  /// differs in size; unpartitioned the same checks on this rank.
  void restore(ActivationHandle h, std::span<float> out);
  /// Frees checkpoint `h`. InvariantError for an unknown handle. Local.
  void release(ActivationHandle h);

  /// Whether checkpoints are split over a group of more than one rank.
  bool partitioned() const { return group_ != nullptr; }
  /// Bytes this rank holds for checkpoint `h` (0 for an unknown handle).
  std::size_t held_bytes(ActivationHandle h) const;
  /// Bytes held now, and the most held at once since construction.
  std::size_t bytes() const { return bytes_; }
  std::size_t peak_bytes() const { return peak_; }
  /// Checkpoints held now.
  std::size_t count() const { return saved_.size(); }

 private:
  struct Saved {
    std::size_t n = 0;          // elements saved
    std::vector<float> values;  // whole, or this rank's padded chunk
  };
  /// Gathers n and the checkpoint each rank names (`saved`: null when it
  /// has none) over the group; "" when all agree, else the ranks whose n
  /// differs from rank 0's or from their checkpoint's, or that have none.
  std::string disagreeing_ranks(std::size_t n, const Saved* saved);

  Communicator* group_;  // null: not partitioned
  MemoryLedger& ledger_;
  std::map<std::uint64_t, Saved> saved_;
  std::uint64_t next_id_ = 1;
  std::size_t bytes_ = 0, peak_ = 0;
};

}  // namespace zeroshard
