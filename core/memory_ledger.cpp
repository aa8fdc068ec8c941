#include "core/memory_ledger.h"

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::parameters: return "parameters";
    case MemCategory::gradients: return "gradients";
    case MemCategory::grad_accumulator: return "grad accumulator";
    case MemCategory::master_weights: return "master weights";
    case MemCategory::optimizer_states: return "optimizer states";
    case MemCategory::unsharded: return "unsharded buffers";
    case MemCategory::persistent: return "persistent units";
    case MemCategory::secondary: return "hpZ secondary";
    case MemCategory::residual: return "qgZ residuals";
    case MemCategory::checkpoint_staging: return "checkpoint staging";
    case MemCategory::activations: return "activation checkpoints";
    case MemCategory::count: break;
  }
  return "?";
}

std::string_view mem_tier_name(MemTier t) {
  switch (t) {
    case MemTier::device: return "device";
    case MemTier::host: return "host";
    case MemTier::nvme: return "nvme";
    case MemTier::count: break;
  }
  return "?";
}

void MemoryLedger::add(MemCategory c, MemTier t, std::uint64_t bytes, std::uint64_t padding_bytes) {
  const int ci = static_cast<int>(c);
  const int ti = static_cast<int>(t);
  cur_[ci][ti] += bytes;
  pad_[ci][ti] += padding_bytes;
  peak_[ci] = std::max(peak_[ci], current(c));
  total_ += bytes;
  peak_total_ = std::max(peak_total_, total_);
  tier_total_[ti] += bytes;
  peak_tier_[ti] = std::max(peak_tier_[ti], tier_total_[ti]);
}

void MemoryLedger::remove(MemCategory c, MemTier t, std::uint64_t bytes,
                          std::uint64_t padding_bytes) {
  const int ci = static_cast<int>(c);
  const int ti = static_cast<int>(t);
  ZS_CHECK(cur_[ci][ti] >= bytes && pad_[ci][ti] >= padding_bytes,
           "memory ledger: releasing {} bytes of {} that were never recorded", bytes,
           mem_category_name(c));
  cur_[ci][ti] -= bytes;
  pad_[ci][ti] -= padding_bytes;
  total_ -= bytes;
  tier_total_[ti] -= bytes;
}

std::uint64_t MemoryLedger::current(MemCategory c) const {
  std::uint64_t s = 0;
  for (auto v : cur_[static_cast<int>(c)]) s += v;
  return s;
}

std::uint64_t MemoryLedger::current(MemCategory c, MemTier t) const {
  return cur_[static_cast<int>(c)][static_cast<int>(t)];
}

std::uint64_t MemoryLedger::peak(MemCategory c) const { return peak_[static_cast<int>(c)]; }

std::uint64_t MemoryLedger::padding(MemCategory c) const {
  std::uint64_t s = 0;
  for (auto v : pad_[static_cast<int>(c)]) s += v;
  return s;
}

namespace {
constexpr MemCategory kModelState[] = {MemCategory::parameters, MemCategory::gradients,
                                       MemCategory::grad_accumulator, MemCategory::master_weights,
                                       MemCategory::optimizer_states};
}

std::uint64_t MemoryLedger::model_state_bytes() const {
  std::uint64_t s = 0;
  for (auto c : kModelState) s += current(c);
  return s;
}

std::uint64_t MemoryLedger::model_state_padding() const {
  std::uint64_t s = 0;
  for (auto c : kModelState) s += padding(c);
  return s;
}

std::uint64_t MemoryLedger::peak_total() const { return peak_total_; }
std::uint64_t MemoryLedger::current_total() const { return total_; }

std::string format_bytes(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  if (bytes >= (std::uint64_t{1} << 10)) return fmt::format("{:.2f} KiB", b / (1 << 10));
  return fmt::format("{} B", bytes);
}

std::string MemoryLedger::table(std::string_view title) const {
  std::string out = fmt::format("{}\n{:<18} {:>12} {:>12} {:>12} {:>12} {:>12}\n", title,
                                "category", "device", "host", "nvme", "padding", "peak");
  for (int c = 0; c < kC; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    out += fmt::format("{:<18} {:>12} {:>12} {:>12} {:>12} {:>12}\n", mem_category_name(cat),
                       format_bytes(cur_[c][0]), format_bytes(cur_[c][1]),
                       format_bytes(cur_[c][2]), format_bytes(padding(cat)),
                       format_bytes(peak_[c]));
  }
  out += fmt::format("{:<18} {:>12}   (of which padding {}; peak of all categories {})\n",
                     "model states", format_bytes(model_state_bytes()),
                     format_bytes(model_state_padding()), format_bytes(peak_total_));
  return out;
}

}  // namespace zeroshard
