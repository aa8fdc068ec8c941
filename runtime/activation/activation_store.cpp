// ActivationStore: see runtime/activation/activation_store.h.
#include "runtime/activation/activation_store.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

std::size_t chunk_of(std::size_t n, int t) { return (n + static_cast<std::size_t>(t) - 1) / static_cast<std::size_t>(t); }

}  // namespace

ActivationStore::ActivationStore(const ActivationCheckpointingConfig& config, Communicator* tp_group,
                                 MemoryLedger& ledger)
    : group_(config.partition_activations && tp_group != nullptr && tp_group->world_size() > 1 ? tp_group : nullptr),
      ledger_(ledger) {}

ActivationStore::~ActivationStore() {
  if (bytes_ > 0) ledger_.remove(MemCategory::activations, MemTier::device, bytes_);
}

std::string ActivationStore::disagreeing_ranks(std::size_t n, const Saved* saved) {
  const int t = group_->world_size();
  // Counts as doubles (exact below 2^53 elements): the communicator's dtypes.
  const double mine[3] = {static_cast<double>(n), saved != nullptr ? 1.0 : 0.0,
                          saved != nullptr ? static_cast<double>(saved->n) : 0.0};
  std::vector<double> all(3 * static_cast<std::size_t>(t));
  group_->all_gather(mine, all.data(), 3, DType::f64);
  std::string bad;
  for (int r = 0; r < t; ++r) {
    const double* q = &all[3 * static_cast<std::size_t>(r)];
    if (q[1] == 0 || q[2] != q[0] || q[0] != all[0]) {
      const std::string what = q[1] == 0    ? ", no such checkpoint"
                               : q[2] != q[0] ? fmt::format(", saved with {}", q[2])
                                              : "";
      bad += fmt::format("{}tensor-parallel rank {} ({} elements{})", bad.empty() ? "" : ", ", r, q[0], what);
    }
  }
  return bad.empty() ? bad : fmt::format("{}; rank 0 has {} elements", bad, all[0]);
}

ActivationHandle ActivationStore::save(std::span<const float> values) {
  const std::size_t n = values.size();
  Saved s{n, {}};
  if (group_ == nullptr) {
    s.values.assign(values.begin(), values.end());
  } else {
    const Saved probe{n, {}};
    const std::string bad = disagreeing_ranks(n, &probe);
    if (!bad.empty()) {
      throw InvariantError(
          fmt::format("activation checkpoint: the tensor-parallel ranks save different sizes: {}", bad));
    }
    const std::size_t c = chunk_of(n, group_->world_size());
    const std::size_t begin = std::min(n, c * static_cast<std::size_t>(group_->rank())), end = std::min(n, begin + c);
    s.values.assign(c, 0.0f);
    std::copy(values.begin() + static_cast<std::ptrdiff_t>(begin), values.begin() + static_cast<std::ptrdiff_t>(end),
              s.values.begin());
  }
  const std::size_t b = s.values.size() * sizeof(float);
  ledger_.add(MemCategory::activations, MemTier::device, b);
  bytes_ += b;
  peak_ = std::max(peak_, bytes_);
  const ActivationHandle h{next_id_++};
  saved_.emplace(h.id, std::move(s));
  return h;
}

void ActivationStore::restore(ActivationHandle h, std::span<float> out) {
  const auto it = saved_.find(h.id);
  const bool known = it != saved_.end();
  if (group_ == nullptr) {
    if (!known) throw InvariantError(fmt::format("activation checkpoint {}: no such checkpoint (released?)", h.id));
    if (out.size() != it->second.n) {
      throw InvariantError(fmt::format("activation checkpoint {}: restoring {} elements into {}", h.id,
                                       it->second.n, out.size()));
    }
    std::copy(it->second.values.begin(), it->second.values.end(), out.begin());
    return;
  }
  const std::string bad = disagreeing_ranks(out.size(), known ? &it->second : nullptr);
  if (!bad.empty()) {
    throw InvariantError(
        fmt::format("activation checkpoint {}: the tensor-parallel ranks cannot restore it: {}", h.id, bad));
  }
  const int t = group_->world_size();
  const std::size_t n = out.size(), c = chunk_of(n, t);
  if (n == 0) return;
  std::vector<float> all(c * static_cast<std::size_t>(t));
  group_->all_gather(it->second.values.data(), all.data(), c, DType::f32);
  std::copy_n(all.begin(), static_cast<std::ptrdiff_t>(n), out.begin());
}

void ActivationStore::release(ActivationHandle h) {
  const auto it = saved_.find(h.id);
  if (it == saved_.end()) {
    throw InvariantError(fmt::format("activation checkpoint {}: released twice or never saved", h.id));
  }
  const std::size_t b = it->second.values.size() * sizeof(float);
  ledger_.remove(MemCategory::activations, MemTier::device, b);
  bytes_ -= b;
  saved_.erase(it);
}

std::size_t ActivationStore::held_bytes(ActivationHandle h) const {
  const auto it = saved_.find(h.id);
  return it == saved_.end() ? 0 : it->second.values.size() * sizeof(float);
}

}  // namespace zeroshard
