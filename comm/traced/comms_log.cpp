// CommsLog; see comm/traced/comms_log.h.
#include "comm/traced/comms_log.h"

#include <fmt/format.h>

#include <ostream>

#include "core/error.h"
#include "core/memory_ledger.h"  // format_bytes

namespace zeroshard {

namespace {

// algbw in GB/s of `bytes` in `ns` nanoseconds (bytes / ns == GB/s).
double gbps(std::uint64_t bytes, std::int64_t ns) {
  return ns > 0 ? static_cast<double>(bytes) / static_cast<double>(ns) : 0.0;
}

}  // namespace

CommsLog::CommsLog(CommsLogOptions options, std::ostream* verbose_out)
    : options_(std::move(options)), out_(verbose_out) {
  for (std::size_t i = 0; i < kCollectiveKinds; ++i) profiled_[i] = options_.prof_all;
  for (const std::string& name : options_.prof_ops) {
    CollectiveKind kind{};
    if (!parse_collective_kind(name, kind)) {
      throw ConfigError(fmt::format(
          "comms_logger.prof_ops: unknown collective \"{}\" (known: all_reduce, reduce_scatter, "
          "all_gather, all_to_all, broadcast, barrier)",
          name));
    }
    profiled_[static_cast<std::size_t>(kind)] = true;
  }
}

void CommsLog::record(CollectiveKind kind, std::uint64_t bytes, std::int64_t latency_ns,
                      int world_size, std::string_view communicator, std::string_view label,
                      std::uint64_t cross_host) {
  if (!profiles(kind)) return;
  if (latency_ns < 0) latency_ns = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  Sums& s = sums_[Key{kind, bytes, world_size}];
  ++s.count;
  s.total_ns += latency_ns;
  s.cross_host += cross_host;
  if (options_.verbose && out_ != nullptr) {
    const double algbw = gbps(bytes, latency_ns);
    std::string line = fmt::format(
        "comm op: {} | time (ms): {:.3f} | msg size: {} | algbw (GB/s): {:.3f} | busbw (GB/s): "
        "{:.3f}",
        to_string(kind), static_cast<double>(latency_ns) * 1e-6, format_bytes(bytes), algbw,
        algbw * bus_bandwidth_factor(kind, world_size));
    if (options_.debug) {
      line += fmt::format(" | comm: {} | unit: {}", communicator, label.empty() ? "-" : label);
    }
    *out_ << line << '\n';
  }
}

std::vector<CommsLogRow> CommsLog::rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CommsLogRow> out;
  out.reserve(sums_.size());
  for (const auto& [key, s] : sums_) {
    CommsLogRow r;
    r.kind = std::get<0>(key);
    r.message_bytes = std::get<1>(key);
    r.world_size = std::get<2>(key);
    r.count = s.count;
    r.total_bytes = s.count * r.message_bytes;
    r.cross_host_bytes = s.cross_host;
    r.total_ms = static_cast<double>(s.total_ns) * 1e-6;
    r.mean_ms = s.count > 0 ? r.total_ms / static_cast<double>(s.count) : 0.0;
    r.algbw_gbps = gbps(r.total_bytes, s.total_ns);
    r.busbw_gbps = r.algbw_gbps * bus_bandwidth_factor(r.kind, r.world_size);
    out.push_back(r);
  }
  return out;
}

std::uint64_t CommsLog::cross_host_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& [key, s] : sums_) total += s.cross_host;
  return total;
}

std::string CommsLog::summary() const {
  const std::vector<CommsLogRow> rs = rows();
  if (rs.empty()) return "no collectives logged\n";
  std::string out = fmt::format("{:<15}{:>12}{:>7}{:>9}{:>16}{:>16}{:>14}{:>14}{:>14}\n", "Comm. Op",
                                "Msg size", "Ranks", "Count", "Total lat (ms)", "Avg lat (ms)",
                                "algbw (GB/s)", "busbw (GB/s)", "Cross-host");
  for (const CommsLogRow& r : rs) {
    out += fmt::format("{:<15}{:>12}{:>7}{:>9}{:>16.3f}{:>16.3f}{:>14.3f}{:>14.3f}{:>14}\n",
                       to_string(r.kind), format_bytes(r.message_bytes), r.world_size, r.count,
                       r.total_ms, r.mean_ms, r.algbw_gbps, r.busbw_gbps, format_bytes(r.cross_host_bytes));
  }
  return out;
}

void CommsLog::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  sums_.clear();
}

}  // namespace zeroshard
