#include "examples/report/run_charts.h"

#include <fmt/format.h>

namespace zeroshard::examples {

MemoryByCategory memory_by_category(const MemoryLedger& ledger) {
  MemoryByCategory m{};
  for (std::size_t c = 0; c < m.size(); ++c) m[c] = ledger.current(static_cast<MemCategory>(c));
  return m;
}

std::vector<MemoryByCategory> gather_memory_by_category(Communicator& comm, const MemoryLedger& ledger) {
  const MemoryByCategory mine = memory_by_category(ledger);
  std::vector<double> send(mine.begin(), mine.end());
  std::vector<double> all(send.size() * static_cast<std::size_t>(comm.world_size()));
  comm.all_gather(send.data(), all.data(), send.size(), DType::f64);
  std::vector<MemoryByCategory> out(static_cast<std::size_t>(comm.world_size()));
  for (std::size_t r = 0; r < out.size(); ++r) {
    for (std::size_t c = 0; c < mine.size(); ++c) out[r][c] = static_cast<std::uint64_t>(all[r * mine.size() + c]);
  }
  return out;
}

BarChart memory_chart(const std::string& title, const std::vector<MemoryByCategory>& ranks) {
  BarChart chart{title, "MiB", {}, {}};
  for (std::size_t c = 0; c < std::tuple_size_v<MemoryByCategory>; ++c) {
    chart.categories.emplace_back(mem_category_name(static_cast<MemCategory>(c)));
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    Bar bar{fmt::format("rank {}", r), {}};
    for (const std::uint64_t b : ranks[r]) bar.values.push_back(static_cast<double>(b) / (1024.0 * 1024.0));
    chart.bars.push_back(std::move(bar));
  }
  return chart;
}

BarChart step_chart(const std::string& title, const nlohmann::json& observe_report) {
  BarChart chart{title, "ms", {"compute", "comm_wait", "optimizer", "io_wait", "other"}, {}};
  const nlohmann::json* ranks =
      observe_report.contains("per_rank_mean_ms") ? &observe_report["per_rank_mean_ms"] : nullptr;
  if (ranks == nullptr || !ranks->is_array()) return chart;
  for (std::size_t r = 0; r < ranks->size(); ++r) {
    Bar bar{fmt::format("rank {}", r), {}};
    for (const std::string& c : chart.categories) bar.values.push_back((*ranks)[r].value(c, 0.0));
    chart.bars.push_back(std::move(bar));
  }
  return chart;
}

std::string chart_path(const std::string& report_path, const std::string& suffix) {
  std::string stem = report_path;
  if (stem.size() > 5 && stem.ends_with(".json")) stem.resize(stem.size() - 5);
  return fmt::format("{}-{}.svg", stem, suffix);
}

nlohmann::json finish_observed_run(Engine& engine) {
  nlohmann::json j = engine.observe_report();
  j["trace"] = engine.write_trace();
  if (engine.config().observe.comms_logger.enabled && engine.rank() == 0 && engine.tp_rank() == 0) {
    fmt::print("\ncomms_logger (rank 0):\n{}\n", engine.comms_summary());
  }
  return j;
}

}  // namespace zeroshard::examples
