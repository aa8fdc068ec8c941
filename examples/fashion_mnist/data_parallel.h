// Splitting a data set across data-parallel ranks.
//
// [Note: global batch layout]
// A global batch is micro x accumulation x world_size samples, taken in
// order from one permutation of the training set that every rank computes
// from the same seed (so no data is exchanged). Inside global batch s, the
// samples of micro-batch k of rank r are
//   perm[s*G + (k*W + r)*m, s*G + (k*W + r + 1)*m)
// with G the global batch, W the world size and m the micro-batch: the ranks'
// slices are disjoint and together cover the global batch. The last
// incomplete global batch of an epoch is dropped (torch DataLoader's
// drop_last=True with a DistributedSampler).
//
// [Note: resuming the data order]
// An epoch may start at sample `first` of its permutation (a run resumed
// from a checkpoint): global batch s is then perm[first + s*G, first +
// (s+1)*G). The permutation depends only on (seed, epoch), not on the world
// size or the batch size, so a run resumed at another world size continues
// at the same global sample position and sees each sample of the epoch at
// most once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "examples/fashion_mnist/idx_dataset.h"

namespace zeroshard::examples {

/// Index of one sample in a data set.
using SampleIndex = std::uint32_t;

/// Per-epoch shuffled, rank-disjoint micro-batches; see [Note: global batch
/// layout]. Thread safety: plain value type.
class DataParallelSampler {
 public:
  /// dataset_size samples; micro >= 1 samples per rank per micro-batch;
  /// accumulation >= 1 micro-batches per optimizer step; rank in
  /// [0, world_size). Throws InvariantError on invalid arguments.
  DataParallelSampler(std::size_t dataset_size, std::size_t micro, std::size_t accumulation,
                      int rank, int world_size, std::uint64_t seed);

  /// Shuffles for `epoch` (0-based): Fisher-Yates driven by
  /// std::mt19937_64 seeded from (seed, epoch), identical on every rank;
  /// the epoch's global batches start at sample `first` of the permutation
  /// (0, or a resumed run's position; see [Note: resuming the data order]).
  /// Allocation-free. Throws InvariantError if first > dataset size.
  void start_epoch(int epoch, std::size_t first = 0);

  /// Samples in one global batch (micro x accumulation x world size).
  std::size_t global_batch() const { return micro_ * accumulation_ * std::size_t(world_size_); }
  /// Complete global batches (optimizer steps) in this epoch from its first
  /// sample on.
  std::size_t steps_per_epoch() const { return (perm_.size() - first_) / global_batch(); }
  /// Samples in the data set (the permutation's length).
  std::size_t dataset_size() const { return perm_.size(); }
  /// This rank's indices for micro-batch k in [0, accumulation) of global
  /// batch `step` in [0, steps_per_epoch()): `micro` indices.
  std::span<const SampleIndex> micro_batch(std::size_t step, std::size_t k) const;

 private:
  std::size_t micro_;
  std::size_t accumulation_;
  int rank_;
  int world_size_;
  std::uint64_t seed_;
  std::size_t first_ = 0;
  std::vector<SampleIndex> perm_;
};

/// Uniform integer in [0, bound) from rng by rejection sampling (portable,
/// unlike std::uniform_int_distribution). bound >= 1.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound);

/// Balanced contiguous slice [begin, end) of `count` items for `rank` of
/// `world_size`: sizes differ by at most one; together they cover all items.
std::pair<std::size_t, std::size_t> rank_slice(std::size_t count, int rank, int world_size);

/// Copies the samples `indices` of `data` into x ([indices.size(), pixels]
/// floats) and labels ([indices.size()]). Allocation-free. Throws
/// InvariantError if the destinations are too small.
void gather_samples(const LabeledImages& data, std::span<const SampleIndex> indices,
                    std::span<float> x, std::span<std::uint8_t> labels);

}  // namespace zeroshard::examples
