#include "examples/report/run_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "runtime/observe/csv_monitor.h"

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
  BarChart chart{title, "ms", {"compute", "comm_wait", "optimizer", "io_wait", "checkpoint", "other"}, {}};
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

BarChart monitor_chart(const std::string& title, const std::string& unit,
                       const std::vector<std::pair<std::int64_t, double>>& rows, std::size_t max_bars) {
  BarChart chart{title, unit, {"mean of the rows"}, {}};
  if (rows.empty() || max_bars == 0) return chart;
  const std::size_t per_bar = (rows.size() + max_bars - 1) / max_bars;
  for (std::size_t first = 0; first < rows.size(); first += per_bar) {
    const std::size_t last = std::min(rows.size(), first + per_bar);
    double sum = 0;
    for (std::size_t i = first; i < last; ++i) sum += rows[i].second;
    chart.bars.push_back(
        Bar{fmt::format("{}", rows[last - 1].first), {sum / static_cast<double>(last - first)}});
  }
  return chart;
}

void write_monitor_charts(const std::string& report_path, const CsvMonitorConfig& monitor, const std::string& what) {
  if (!monitor.enabled) return;
  const std::pair<const char*, const char*> series[] = {
      {"train_loss", "nats"}, {"lr", "learning rate"}, {"grad_norm", "L2 norm"}, {"samples_per_second", "samples/s"}};
  for (const auto& [name, unit] : series) {
    const std::string file = CsvMonitor::file_of(monitor.directory(), name);
    if (!std::filesystem::exists(file)) continue;
    const BarChart chart =
        monitor_chart(fmt::format("{}: {} by samples trained ({})", what, name, CsvMonitor::event_name(name)), unit,
                      read_monitor_series(file));
    write_text_atomically(chart_path(report_path, fmt::format("monitor-{}", name)), stacked_bar_svg(chart));
  }
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
