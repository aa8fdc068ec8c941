// The pictures and observability output every training example writes for
// a run (issue: step breakdown, traces, charts): memory per rank by ledger
// category and the step-time breakdown per rank as SVG beside the --report
// file, the Chrome trace, and the comms_logger table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory_ledger.h"
#include "examples/report/svg_chart.h"
#include "runtime/config/observe_config.h"
#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// Current bytes per MemCategory (parameters, gradients, master weights,
/// optimizer states, unsharded buffers; all tiers) of one rank.
using MemoryByCategory = std::array<std::uint64_t, static_cast<std::size_t>(MemCategory::count)>;

/// A chart of memory per rank (MiB) stacked by ledger category, titled
/// `title`, one bar per rank ("rank r").
BarChart memory_chart(const std::string& title, const std::vector<MemoryByCategory>& ranks);

/// A chart of the mean step time per rank (ms) stacked by compute,
/// comm_wait, optimizer, io_wait, checkpoint and other, from Engine::observe_report()'s
/// "per_rank_mean_ms"; no bars when the report has none.
BarChart step_chart(const std::string& title, const nlohmann::json& observe_report);

/// A chart of one csv_monitor series (rows as read_monitor_series gives
/// them: samples, value), in `unit`: at most `max_bars` bars, each the
/// mean of consecutive rows and labelled with the sample count of its last
/// row. No bars for no rows.
BarChart monitor_chart(const std::string& title, const std::string& unit,
                       const std::vector<std::pair<std::int64_t, double>>& rows, std::size_t max_bars = 12);

/// With csv_monitor on: the charts of its train_loss, lr, grad_norm and
/// samples_per_second files (runtime/observe/csv_monitor.h) beside the
/// report, "<report>-monitor-<series>.svg", titled `what`; a series without
/// a file (no loss reported) is left out. Call on world rank 0, which wrote
/// the files, after training. Throws IoError / Error as read_monitor_series
/// and write_text_atomically.
void write_monitor_charts(const std::string& report_path, const CsvMonitorConfig& monitor, const std::string& what);

/// "<report without .json>-<suffix>.svg": where a chart of `report_path` goes.
std::string chart_path(const std::string& report_path, const std::string& suffix);

/// What a training example does at the end of a run with its engine
/// (collective over the engine's ranks): writes the Chrome trace
/// (Engine::write_trace, when zeroshard.trace is on), prints the comms_logger
/// table on rank 0 (when comms_logger is on), and returns the engine's
/// observe_report() with "trace" (the merged trace's path, or "") added.
nlohmann::json finish_observed_run(Engine& engine);

}  // namespace zeroshard::examples
