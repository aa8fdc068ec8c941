// Tracer: the spans and step-time accounts of one process (one rank).
//
// [Note: tracing]
// Two independent switches, both off by default:
//  - spans (`set_spans(true)`): every span is kept (name, thread, unit,
//    bytes, begin, end) for the Chrome trace (runtime/observe/chrome_trace.h);
//  - accounting (`set_accounting(true)`): the calling thread's time is
//    charged to the category of the innermost open span ("exclusive time":
//    a span's time minus that of the spans opened inside it), so that per
//    step compute + comm_wait + optimizer + io_wait + other equals the
//    step's wall time exactly; `take_step` returns and resets the sums.
// With both off, a span costs one predictable branch (`active()`); a build
// configured with `-Dtracing=false` compiles `active()` to false
// (ZS_TRACING in zs_config.h), which bench/step compares against.
//
// Times are std::chrono::steady_clock nanoseconds of this process
// (`now_ns`); ranks of one host share that clock, other hosts are aligned
// by the offset comm/traced/clock_sync.h estimates, applied when a trace is
// written.
//
// Thread safety: spans and counters may be added from any thread (a mutex
// guards them, taken only when spans are on). Accounting (`open`/`close`,
// `take_step`) follows one thread, the training loop's: calls from other
// threads are not accounted (their spans are still kept).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "zs_config.h"

namespace zeroshard {

/// The Chrome trace "thread" a span is drawn on.
enum class TraceThread : std::uint8_t {
  loop,    ///< the training loop's own compute (Engine::trace)
  engine,  ///< the engine's work on the loop's thread: waits, optimizer, norm exchange
  comm,    ///< a collective from issue to completion (may overlap the loop)
  io,      ///< swap-file reads and writes from issue to completion
};
/// Lower-case name ("loop", "engine", "comm", "io").
const char* to_string(TraceThread thread);

/// What the loop thread's time is charged to in the step breakdown.
enum class TimeCategory : std::uint8_t {
  compute,    ///< the loop's own spans (forward, backward, loss)
  comm_wait,  ///< blocked waiting for a collective (exposed communication)
  optimizer,  ///< the optimizer update (its own I/O waits excluded)
  io_wait,    ///< blocked waiting for swap reads or writes
  checkpoint, ///< held by checkpoint saves: a synchronous save, an async save's snapshot and commit
  other,      ///< everything else: the engine's bookkeeping, data loading, ...
};
inline constexpr std::size_t kTimeCategories = 6;
/// Lower-case name ("compute", "comm_wait", "optimizer", "io_wait",
/// "checkpoint", "other").
const char* to_string(TimeCategory category);

/// One recorded span. Times in steady-clock nanoseconds of this process.
struct TraceSpan {
  std::string name;        ///< e.g. "all_gather", "forward", "swap_read"
  TraceThread thread = TraceThread::engine;
  std::string unit;        ///< unit or bucket label, empty if none
  std::uint64_t bytes = 0; ///< bytes moved, 0 if not applicable
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t seq = -1;   ///< collective sequence number, -1 if none
};

/// A sample of a counter track (e.g. the memory ledger by category, bytes).
struct TraceCounter {
  std::string name;
  std::int64_t ts_ns = 0;
  std::vector<std::pair<std::string, double>> values;
};

/// Exclusive nanoseconds per TimeCategory over one step, and the step's
/// wall time; `other` already holds wall minus the sum of the rest.
struct StepTimes {
  std::array<std::int64_t, kTimeCategories> ns{};
  std::int64_t wall_ns = 0;
  /// The step's exclusive compute time as intervals [begin, end) (compute
  /// regions minus the regions opened inside them, such as a collective's
  /// wait): for the hidden communication, runtime/observe/step_breakdown.h.
  std::vector<std::pair<std::int64_t, std::int64_t>> compute_intervals;
  std::int64_t& operator[](TimeCategory c) { return ns[static_cast<std::size_t>(c)]; }
  std::int64_t operator[](TimeCategory c) const { return ns[static_cast<std::size_t>(c)]; }
};

/// See [Note: tracing]. One per engine (per rank).
class Tracer {
 public:
  /// steady_clock now, in nanoseconds.
  static std::int64_t now_ns();

  /// Keep spans and counters (off by default).
  void set_spans(bool on);
  /// Account the loop thread's time per category (off by default); the
  /// thread that calls this with true is the accounted one, and the current
  /// step starts at `now` (steady-clock ns; tests pass their own times).
  void set_accounting(bool on, std::int64_t now = now_ns());
  bool spans_on() const { return ZS_TRACING && spans_; }
  bool accounting_on() const { return ZS_TRACING && accounting_; }
  /// True when either switch is on: the one branch a disabled span costs.
  bool active() const { return ZS_TRACING && (spans_ || accounting_); }

  /// Opens an accounted region of `category` on the calling thread at time
  /// `now` (no-op off the accounted thread or with accounting off).
  void open(TimeCategory category, std::int64_t now);
  /// Closes the innermost region opened by `open` at time `now`.
  void close(std::int64_t now);
  /// Ends the current step at `now`: returns its exclusive times (other =
  /// wall - the rest) and starts the next step at `now`. All zero with
  /// accounting off. Open regions carry on into the next step.
  StepTimes take_step(std::int64_t now);

  /// Keeps `span` if spans are on (any thread).
  void add_span(TraceSpan span);
  /// Keeps `counter` if spans are on (any thread).
  void add_counter(TraceCounter counter);
  /// The spans and counters kept so far, and clears them.
  std::pair<std::vector<TraceSpan>, std::vector<TraceCounter>> take_all();
  /// Number of spans kept so far.
  std::size_t span_count() const;

 private:
  bool spans_ = false;
  bool accounting_ = false;
  std::thread::id accounted_thread_{};
  void charge(std::int64_t now);
  std::vector<std::pair<TimeCategory, std::int64_t>> stack_;  ///< open regions and their begin
  std::int64_t last_ns_ = 0;
  std::int64_t step_begin_ns_ = 0;
  StepTimes current_{};
  mutable std::mutex mutex_;
  std::vector<TraceSpan> spans_kept_;
  std::vector<TraceCounter> counters_kept_;
};

/// RAII span: records [construction, destruction) on `tracer` as `name` on
/// `thread`, and, when `category` is given, charges the loop thread's time
/// inside it to that category. A null tracer or an inactive one costs one
/// branch. Not copyable or movable.
class TraceScope {
 public:
  TraceScope(Tracer* tracer, const char* name, TraceThread thread, TimeCategory category,
             std::string unit = {}, std::uint64_t bytes = 0);
  /// A span only: the loop thread's time inside stays charged to the
  /// enclosing region's category.
  TraceScope(Tracer* tracer, const char* name, TraceThread thread, std::string unit = {},
             std::uint64_t bytes = 0);
  ~TraceScope() { end(); }
  /// Ends the span now (the destructor then does nothing); idempotent.
  void end();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* tracer_ = nullptr;  ///< null when inactive at construction
  const char* name_ = nullptr;
  TraceThread thread_ = TraceThread::engine;
  std::string unit_;
  std::uint64_t bytes_ = 0;
  std::int64_t begin_ns_ = 0;
  bool accounted_ = false;  ///< opened a region on the tracer
};

}  // namespace zeroshard
