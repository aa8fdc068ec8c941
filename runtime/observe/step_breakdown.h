// The step breakdown and the straggler view: pure functions over one step's
// figures from every rank (no collectives here; runtime/observe/step_observer.h
// gathers the figures).
//
// [Note: step breakdown]
// Per optimizer step and rank, the loop thread's wall time is split into
// exclusive parts (core/tracer.h: the innermost open span wins):
//   compute    the loop's own spans (Engine::trace),
//   comm_wait  blocked in a collective: exposed communication,
//   optimizer  the update (its swap waits excluded),
//   io_wait    blocked on swap reads/writes,
//   checkpoint held by checkpoint saves between the steps: a synchronous
//              save whole, an async save's snapshot and its commit (the
//              background write runs on its own thread: a span
//              "checkpoint_write" on the io row of the trace),
//   other      the rest (engine bookkeeping, data loading, ...),
// which add up to the wall time exactly. Hidden communication is the time
// during which a collective of the step was in flight (issue to observed
// completion) while the loop computed: |union(collectives) ∩
// union(compute spans)|. Completion is observed at the wait (or a test), so
// a collective that finished early and was waited for later counts until
// that wait: hidden is an upper bound. The overlap fraction is hidden /
// (hidden + exposed). With overlap_comm off the engine waits for each
// collective right after issuing it, no compute runs under it, and hidden
// is 0.
//
// The straggler view takes, for each collective of the step, every rank's
// arrival (issue) time on rank 0's clock (comm/traced/clock_sync.h): the rank that
// arrived last made the others wait for (its arrival - the earliest
// arrival). Summed per rank over a step and over a run, that names the
// ranks that hold the others back (data skew, a slow host). A
// parameter-server worker adds its ps_* figures (StepFigures).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard {

/// One rank's figures for one optimizer step, in milliseconds (see
/// [Note: step breakdown]). Plain value type.
struct StepFigures {
  static constexpr std::size_t kFields = 11;
  /// Field names, in as_array() order.
  static const std::array<const char*, kFields>& names();

  double compute = 0, comm_wait = 0, optimizer = 0, io_wait = 0, checkpoint = 0, other = 0, wall = 0, hidden_comm = 0;
  /// A parameter-server worker's step ([Note: parameter-server layout] in
  /// runtime/ps/param_server.h), parts of comm_wait, not of the sum: the
  /// sends of its push (ms), the wait for a pull that was due (ms), and
  /// its staleness after the step (steps: the step count minus the step
  /// whose update its parameters hold). Zero without servers.
  double ps_push = 0, ps_pull_wait = 0, ps_staleness = 0;

  std::array<double, kFields> as_array() const;
  static StepFigures from_array(const std::array<double, kFields>& a);
  /// hidden / (hidden + exposed); 0 when there was no communication.
  double overlap_fraction() const;
};

/// A closed-open time interval [first, second) in nanoseconds.
using Interval = std::pair<std::int64_t, std::int64_t>;

/// Length of union(a) ∩ union(b) in nanoseconds (intervals in any order,
/// overlapping or not; empty or reversed ones count as nothing).
std::int64_t overlap_ns(std::vector<Interval> a, std::vector<Interval> b);

/// Min, median (mean of the middle two for an even count) and max of one
/// field over ranks, and the rank holding the max.
struct FieldStats {
  double min = 0, median = 0, max = 0;
  int max_rank = 0;
};

/// One step's figures over ranks.
struct BreakdownSummary {
  std::int64_t step = 0;
  std::array<FieldStats, StepFigures::kFields> fields{};
  int slowest_rank = 0;  ///< the rank with the largest wall time
  /// The field's stats by name ("compute", ...). Throws InvariantError for
  /// an unknown name.
  const FieldStats& field(const std::string& name) const;
};

/// Summarizes `per_rank` (index = rank, at least one). Throws
/// InvariantError when empty.
BreakdownSummary summarize(std::int64_t step, const std::vector<StepFigures>& per_rank);

/// The table rank 0 prints: one row per field with min / median / max over
/// ranks (ms; ps_staleness in steps) and the rank of the max, then the
/// overlap fraction and the slowest rank. The ps_* rows only when a rank
/// pushed to a parameter server.
std::string format_breakdown(const BreakdownSummary& summary);

/// Who arrived last at the collectives of one step (see [Note: step
/// breakdown]).
struct StragglerStep {
  int collectives = 0;            ///< collectives compared (the smallest count over ranks)
  bool counts_differ = false;     ///< ranks issued different numbers of collectives
  std::vector<double> late_ms;    ///< per rank: summed lateness where it arrived last
  std::vector<int> last_count;    ///< per rank: collectives it arrived last at
  int straggler = -1;             ///< the rank with the largest late_ms; -1 without collectives
  double worst_ms = 0;            ///< the largest single lateness of the step
};

/// `arrivals_ns[r][k]`: rank r's arrival time at its k-th collective of the
/// step, on a common clock (ns). Ranks with fewer collectives are compared
/// on their common prefix. Throws InvariantError when there are no ranks.
StragglerStep analyze_arrivals(const std::vector<std::vector<std::int64_t>>& arrivals_ns);

/// Straggler figures summed over a run.
struct StragglerTotals {
  std::vector<double> late_ms;   ///< per rank
  std::vector<int> last_count;   ///< per rank
  std::vector<int> straggler_steps;  ///< per rank: steps where it was the straggler
  std::int64_t steps = 0;
  /// Adds one step (resizes to its rank count).
  void add(const StragglerStep& step);
  /// "rank 1 made the others wait 512.3 ms over 10 steps (last at 40 of
  /// 44 collectives); ..." for the ranks with lateness, worst first, or
  /// "no straggler" text.
  std::string describe() const;
};

/// One line for a step: "straggler: rank 1 arrived last at 4 of 6
/// collectives, 51.2 ms late in all (worst 50.9 ms)".
std::string format_straggler(const StragglerStep& step);

}  // namespace zeroshard
