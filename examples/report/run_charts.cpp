#include "examples/report/run_charts.h"

#include <fmt/format.h>

namespace zeroshard::examples {

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
