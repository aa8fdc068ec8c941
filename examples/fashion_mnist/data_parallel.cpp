#include "examples/fashion_mnist/data_parallel.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace zeroshard::examples {

std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  ZS_CHECK(bound >= 1, "uniform_below needs bound >= 1");
  // Reject the top partial copy of [0, bound) so every residue is equally likely.
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % bound;
  std::uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % bound;
}

std::pair<std::size_t, std::size_t> rank_slice(std::size_t count, int rank, int world_size) {
  ZS_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of world size {}", rank,
           world_size);
  const std::size_t w = std::size_t(world_size);
  const std::size_t r = std::size_t(rank);
  return {count * r / w, count * (r + 1) / w};
}

DataParallelSampler::DataParallelSampler(std::size_t dataset_size, std::size_t micro,
                                         std::size_t accumulation, int rank, int world_size,
                                         std::uint64_t seed)
    : micro_(micro),
      accumulation_(accumulation),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      perm_(dataset_size) {
  ZS_CHECK(micro >= 1 && accumulation >= 1, "micro-batch {} and accumulation {} must be >= 1",
           micro, accumulation);
  ZS_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of world size {}", rank,
           world_size);
  ZS_CHECK(dataset_size <= std::numeric_limits<SampleIndex>::max(),
           "{} samples do not fit 32-bit indices", dataset_size);
  std::iota(perm_.begin(), perm_.end(), SampleIndex{0});
}

void DataParallelSampler::start_epoch(int epoch, std::size_t first) {
  ZS_CHECK(first <= perm_.size(), "epoch {} cannot start at sample {} of {}", epoch, first, perm_.size());
  first_ = first;
  // Each epoch's permutation depends only on (seed, epoch), not on earlier
  // epochs, so a run stopped early and a full run agree epoch by epoch.
  std::iota(perm_.begin(), perm_.end(), SampleIndex{0});
  std::mt19937_64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * (std::uint64_t(epoch) + 1)));
  for (std::size_t i = perm_.size(); i > 1; --i) {
    const std::size_t j = std::size_t(uniform_below(rng, i));
    std::swap(perm_[i - 1], perm_[j]);
  }
}

std::span<const SampleIndex> DataParallelSampler::micro_batch(std::size_t step,
                                                              std::size_t k) const {
  ZS_CHECK(step < steps_per_epoch() && k < accumulation_,
           "micro-batch {} of step {} is outside {} steps x {} micro-batches", k, step,
           steps_per_epoch(), accumulation_);
  const std::size_t begin =
      first_ + step * global_batch() + (k * std::size_t(world_size_) + std::size_t(rank_)) * micro_;
  return std::span<const SampleIndex>(perm_).subspan(begin, micro_);
}

void gather_samples(const LabeledImages& data, std::span<const SampleIndex> indices,
                    std::span<float> x, std::span<std::uint8_t> labels) {
  const std::size_t pixels = data.images.pixels_per_image();
  ZS_CHECK(x.size() >= indices.size() * pixels && labels.size() >= indices.size(),
           "batch buffers hold {} floats and {} labels, {} samples need {} floats", x.size(),
           labels.size(), indices.size(), indices.size() * pixels);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::size_t s = indices[i];
    ZS_CHECK(s < data.size(), "sample index {} outside a data set of {}", s, data.size());
    std::copy_n(data.images.pixels.data() + s * pixels, pixels, x.data() + i * pixels);
    labels[i] = data.labels[s];
  }
}

}  // namespace zeroshard::examples
