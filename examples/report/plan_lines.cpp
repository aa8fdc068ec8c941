#include "examples/report/plan_lines.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/plan/memory_estimate.h"

namespace zeroshard::examples {

std::string estimate_beside_ledger(const Engine& engine) {
  const MemoryEstimate est = estimate_memory(engine.layout(), engine.config(), engine.rank());
  const MemoryLedger& ledger = engine.ledger();
  std::string tiers, differ;
  for (int t = 0; t < static_cast<int>(MemTier::count); ++t) {
    const std::uint64_t want = est.after_finalize.current_total(static_cast<MemTier>(t));
    const std::uint64_t got = ledger.current_total(static_cast<MemTier>(t));
    const auto name = mem_tier_name(static_cast<MemTier>(t));
    tiers += fmt::format("{}{} {} / {}", t == 0 ? "" : ", ", name, want, got);
    if (want != got) differ += fmt::format(" {}", name);
  }
  return fmt::format("memory estimate (zs_plan) / ledger after finalize, rank {}, bytes: {}: {}\n", engine.rank(),
                     tiers, differ.empty() ? "equal" : "DIFFER on" + differ);
}

std::string predicted_beside_measured(const Engine& engine, const MachineRates& rates) {
  const nlohmann::json report = engine.observe_report();
  const auto& rows = report.at("per_rank_mean_ms");
  if (report.value("steps", 0) == 0 || rows.size() <= static_cast<std::size_t>(engine.rank())) {
    return "predicted step time: no step breakdown recorded (wall_clock_breakdown off)\n";
  }
  const auto& m = rows.at(static_cast<std::size_t>(engine.rank()));
  const double wall = m.at("wall"), loop = m.at("compute").get<double>() + m.at("other").get<double>();
  const double micro = static_cast<double>(std::max<std::int64_t>(1, engine.config().gradient_accumulation_steps));
  StepCost c;
  try {
    c = predict_step(engine.layout(), engine.config(), engine.rank(), rates, loop / micro / 1e3);
  } catch (const ConfigError& e) {
    return fmt::format("predicted step time: {}\n", e.what());
  }
  const double predicted = c.step() * 1e3;
  return fmt::format(
      "step time, rank {} (mean of {} steps, ms): measured {:.2f}, predicted {:.2f} ({:+.0f}%); loop {:.2f} "
      "(measured, the model's input); optimizer {:.2f} predicted / {:.2f} measured; exposed communication "
      "{:.2f} / {:.2f}; swap waits {:.2f} / {:.2f}\n",
      engine.rank(), report.at("steps").get<std::int64_t>(), wall, predicted, (predicted - wall) / wall * 100, loop,
      c.optimizer * 1e3, m.at("optimizer").get<double>(), c.comm_exposed * 1e3, m.at("comm_wait").get<double>(),
      c.swap_exposed * 1e3, m.at("io_wait").get<double>());
}

}  // namespace zeroshard::examples
