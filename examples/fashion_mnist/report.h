// The run's figures as JSON (--report) and the per-rank memory figures the
// program prints and compares.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "examples/fashion_mnist/trainer.h"
#include "runtime/config/config.h"
#include "core/memory_ledger.h"

namespace zeroshard::examples {

inline constexpr int kMemCategories = static_cast<int>(MemCategory::count);

/// One rank's ledger figures (bytes).
struct LedgerFigures {
  std::array<std::uint64_t, kMemCategories> current{};  ///< per category, padding included
  std::array<std::uint64_t, kMemCategories> peak{};     ///< per category
  std::array<std::uint64_t, kMemCategories> padding{};  ///< per category, part of current
  std::uint64_t model_state = 0;  ///< parameters + gradients + master weights + optimizer states
  std::uint64_t model_state_padding = 0;  ///< padding part of model_state
  std::uint64_t current_total = 0;        ///< all categories now
  std::uint64_t peak_total = 0;           ///< highest total at any moment
  /// Model-state bytes per tier (device, host, nvme: MemTier order).
  std::array<std::uint64_t, 3> model_state_tier{};

  /// Reads them from a ledger.
  static LedgerFigures of(const MemoryLedger& ledger);
  /// Current bytes of category c.
  std::uint64_t now(MemCategory c) const { return current[std::size_t(c)]; }
};

/// Every rank's figures, in rank order (one all_gather). Collective.
std::vector<LedgerFigures> gather_ledger_figures(Communicator& comm, const LedgerFigures& mine);

/// Each rank's current bytes per category (LedgerFigures::current), in the
/// order of `ranks`: what examples/report/run_charts.h's memory_chart draws.
std::vector<std::array<std::uint64_t, kMemCategories>> current_per_rank(const std::vector<LedgerFigures>& ranks);

/// {"parameters": {"current": B, "peak": B, "padding": B}, ..., "model_state_bytes": B,
///  "model_state_padding_bytes": B, "current_total_bytes": B, "peak_total_bytes": B}.
nlohmann::json to_json(const LedgerFigures& figures);

/// The configuration in ds_config form (the keys EngineConfig::from_json reads).
nlohmann::json to_json(const EngineConfig& config);

/// Per-epoch figures and the run summary.
nlohmann::json to_json(const TrainResult& result);

/// Writes `report` (pretty-printed; bytes that are not UTF-8 replaced by
/// U+FFFD) to `path` atomically and durably (write_file_atomic: `path`.tmp,
/// fsync, rename). Throws zeroshard::IoError naming the file if it cannot
/// be written.
void write_json_file(const std::string& path, const nlohmann::json& report);

}  // namespace zeroshard::examples
