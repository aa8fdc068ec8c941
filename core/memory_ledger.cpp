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

MemoryLedger::MemoryLedger(const MemoryLedger& other) : n_(other.snapshot()) {}

MemoryLedger& MemoryLedger::operator=(const MemoryLedger& other) {
  if (this != &other) {
    const Counts copy = other.snapshot();
    const std::lock_guard<std::mutex> lock(mutex_);
    n_ = copy;
  }
  return *this;
}

MemoryLedger::Counts MemoryLedger::snapshot() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_;
}

std::uint64_t MemoryLedger::Counts::current(int c) const {
  std::uint64_t s = 0;
  for (auto v : cur[c]) s += v;
  return s;
}

std::uint64_t MemoryLedger::Counts::padding(int c) const {
  std::uint64_t s = 0;
  for (auto v : pad[c]) s += v;
  return s;
}

void MemoryLedger::add(MemCategory c, MemTier t, std::uint64_t bytes, std::uint64_t padding_bytes) {
  const int ci = static_cast<int>(c);
  const int ti = static_cast<int>(t);
  const std::lock_guard<std::mutex> lock(mutex_);
  n_.cur[ci][ti] += bytes;
  n_.pad[ci][ti] += padding_bytes;
  n_.peak[ci] = std::max(n_.peak[ci], n_.current(ci));
  n_.total += bytes;
  n_.peak_total = std::max(n_.peak_total, n_.total);
  n_.tier_total[ti] += bytes;
  n_.peak_tier[ti] = std::max(n_.peak_tier[ti], n_.tier_total[ti]);
}

void MemoryLedger::remove(MemCategory c, MemTier t, std::uint64_t bytes,
                          std::uint64_t padding_bytes) {
  const int ci = static_cast<int>(c);
  const int ti = static_cast<int>(t);
  const std::lock_guard<std::mutex> lock(mutex_);
  ZS_CHECK(n_.cur[ci][ti] >= bytes && n_.pad[ci][ti] >= padding_bytes,
           "memory ledger: releasing {} bytes of {} that were never recorded", bytes, mem_category_name(c));
  n_.cur[ci][ti] -= bytes;
  n_.pad[ci][ti] -= padding_bytes;
  n_.total -= bytes;
  n_.tier_total[ti] -= bytes;
}

std::uint64_t MemoryLedger::current(MemCategory c) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.current(static_cast<int>(c));
}

std::uint64_t MemoryLedger::current(MemCategory c, MemTier t) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.cur[static_cast<int>(c)][static_cast<int>(t)];
}

std::uint64_t MemoryLedger::peak(MemCategory c) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.peak[static_cast<int>(c)];
}

std::uint64_t MemoryLedger::padding(MemCategory c) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.padding(static_cast<int>(c));
}

namespace {
constexpr MemCategory kModelState[] = {MemCategory::parameters, MemCategory::gradients,
                                       MemCategory::grad_accumulator, MemCategory::master_weights,
                                       MemCategory::optimizer_states};
}

std::uint64_t MemoryLedger::model_state_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t s = 0;
  for (auto c : kModelState) s += n_.current(static_cast<int>(c));
  return s;
}

std::uint64_t MemoryLedger::model_state_padding() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t s = 0;
  for (auto c : kModelState) s += n_.padding(static_cast<int>(c));
  return s;
}

std::uint64_t MemoryLedger::peak_total() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.peak_total;
}

std::uint64_t MemoryLedger::current_total() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.total;
}

std::uint64_t MemoryLedger::peak_total(MemTier t) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.peak_tier[static_cast<int>(t)];
}

std::uint64_t MemoryLedger::current_total(MemTier t) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return n_.tier_total[static_cast<int>(t)];
}

std::string format_bytes(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  if (bytes >= (std::uint64_t{1} << 10)) return fmt::format("{:.2f} KiB", b / (1 << 10));
  return fmt::format("{} B", bytes);
}

std::string MemoryLedger::table(std::string_view title) const {
  const Counts n = snapshot();
  std::string out = fmt::format("{}\n{:<18} {:>12} {:>12} {:>12} {:>12} {:>12}\n", title,
                                "category", "device", "host", "nvme", "padding", "peak");
  for (int c = 0; c < kC; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    out += fmt::format("{:<18} {:>12} {:>12} {:>12} {:>12} {:>12}\n", mem_category_name(cat), format_bytes(n.cur[c][0]),
                       format_bytes(n.cur[c][1]), format_bytes(n.cur[c][2]), format_bytes(n.padding(c)),
                       format_bytes(n.peak[c]));
  }
  std::uint64_t model = 0, model_padding = 0;
  for (auto c : kModelState) {
    model += n.current(static_cast<int>(c));
    model_padding += n.padding(static_cast<int>(c));
  }
  out += fmt::format("{:<18} {:>12}   (of which padding {}; peak of all categories {})\n", "model states",
                     format_bytes(model), format_bytes(model_padding), format_bytes(n.peak_total));
  return out;
}

}  // namespace zeroshard
