// StepObserver: the engine's component that turns one rank's tracer
// accounts and collective records into the step breakdown, the straggler
// view and the run report ([Note: step breakdown] in runtime/observe/step_breakdown.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/tracer.h"
#include "runtime/config/observe_config.h"
#include "runtime/observe/step_breakdown.h"

namespace zeroshard {

/// Owns a rank's Tracer and the breakdown history. Explicit inputs: the
/// configuration, then (start) a communicator to gather the figures on (the
/// engine's world, unwrapped so that these gathers are not themselves
/// recorded), this rank's clock offset to that communicator's rank 0
/// (comm/traced/clock_sync.h) and the origin of the common clock.
/// Thread safety: one thread (the engine's).
class StepObserver {
 public:
  StepObserver(const ObserveConfig& config, std::int64_t steps_per_print);

  Tracer& tracer() { return tracer_; }
  const Tracer& tracer() const { return tracer_; }
  const ObserveConfig& config() const { return config_; }
  /// True when end_step gathers (breakdown or trace on).
  bool gathering() const { return config_.records(); }

  /// Starts gathering on `gather_comm` (must outlive the observer) with
  /// this rank's offset to its rank 0's steady clock (ns, added to local
  /// times), the error bound (ns), and the common origin (rank 0's time at
  /// start-up, ns) the trace's timestamps count from. Until then end_step
  /// only takes the tracer's step.
  void start(Communicator& gather_comm, std::int64_t offset_ns, std::int64_t bound_ns, std::int64_t origin_ns);
  /// The gather communicator given to start (null before).
  Communicator* gather_comm() const { return comm_; }
  std::int64_t clock_offset_ns() const { return offset_ns_; }
  std::int64_t clock_bound_ns() const { return bound_ns_; }
  std::int64_t clock_origin_ns() const { return origin_ns_; }

  /// Ends optimizer step `step` (1-based) on this rank. `collectives`: the
  /// step's collectives of this rank as [issue, completion) on the local
  /// clock; `arrivals_ns`: the issue times of the data-parallel
  /// collectives compared across ranks, local clock. When gathering():
  /// collective over the gather communicator (two all-gathers: the figures,
  /// then the arrivals); every steps_per_print steps rank 0 prints the
  /// breakdown table and the straggler line to `out` when
  /// wall_clock_breakdown is on. Throws what the communicator throws.
  void end_step(std::int64_t step, const std::vector<Interval>& collectives,
                const std::vector<std::int64_t>& arrivals_ns, std::ostream& out);

  /// A parameter-server worker's figures for the step end_step ends next:
  /// its client's totals since start-up (seconds in pushes, waiting for
  /// pulls; ParameterServerClientStats) and its staleness after the step
  /// (steps). end_step takes this step's share of the totals into
  /// StepFigures::ps_push and ps_pull_wait, and adds the staleness to the
  /// trace as a counter when spans are on.
  void note_parameter_server(double push_s_total, double wait_s_total, std::int64_t staleness);

  /// This rank's figures of the last step (zero before the first).
  const StepFigures& last_figures() const { return last_; }
  /// The last step's summary over ranks (empty before the first gathered step).
  const std::vector<BreakdownSummary>& summaries() const { return summaries_; }
  const StragglerTotals& straggler_totals() const { return straggler_; }
  /// Each rank's mean figures over the gathered steps (index = rank).
  std::vector<StepFigures> mean_per_rank() const;
  /// {"steps", "per_rank_mean_ms": [{field: ms}], "overlap_fraction",
  /// "slowest_rank", "straggler": {"late_ms", "last_count",
  /// "straggler_steps", "text"}, "clock": {"offset_ns", "bound_ns"}}.
  nlohmann::json report() const;

 private:
  ObserveConfig config_;
  Communicator* comm_ = nullptr;
  std::int64_t steps_per_print_;
  Tracer tracer_;
  std::int64_t offset_ns_ = 0, bound_ns_ = 0, origin_ns_ = 0;
  StepFigures last_{};
  /// note_parameter_server's figures: the totals at the last end_step and now.
  double ps_push_s_ = 0, ps_wait_s_ = 0, ps_push_taken_s_ = 0, ps_wait_taken_s_ = 0;
  std::int64_t ps_staleness_ = 0;
  std::vector<BreakdownSummary> summaries_;
  std::vector<std::array<double, StepFigures::kFields>> sums_;  ///< per rank
  std::int64_t gathered_steps_ = 0;
  StragglerTotals straggler_;
};

}  // namespace zeroshard
