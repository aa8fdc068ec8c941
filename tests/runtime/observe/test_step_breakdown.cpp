// The tracer's exclusive-time accounts (core/tracer.h) and the breakdown and
// straggler arithmetic (runtime/observe/step_breakdown.h) on hand-made timelines:
// every figure is a closed-form value.
#include <doctest/doctest.h>

#include <thread>

#include "core/error.h"
#include "core/tracer.h"
#include "runtime/observe/step_breakdown.h"

using namespace zeroshard;

TEST_CASE("exclusive time: the innermost region wins and the parts add up to the wall time") {
  Tracer t;
  const std::int64_t t0 = 1000;
  t.set_accounting(true, t0);
  t.open(TimeCategory::compute, t0 + 100);     // other: 100
  t.open(TimeCategory::comm_wait, t0 + 300);   // compute: 200
  t.close(t0 + 350);                           // comm_wait: 50
  t.close(t0 + 500);                           // compute: 150
  t.open(TimeCategory::optimizer, t0 + 600);   // other: 100
  t.open(TimeCategory::io_wait, t0 + 610);     // optimizer: 10
  t.close(t0 + 640);                           // io_wait: 30
  t.close(t0 + 700);                           // optimizer: 60
  const StepTimes s = t.take_step(t0 + 1000);  // other: 300
  CHECK(s.wall_ns == 1000);
  CHECK(s[TimeCategory::compute] == 350);
  CHECK(s[TimeCategory::comm_wait] == 50);
  CHECK(s[TimeCategory::optimizer] == 70);
  CHECK(s[TimeCategory::io_wait] == 30);
  CHECK(s[TimeCategory::other] == 500);
  std::int64_t sum = 0;
  for (auto v : s.ns) sum += v;
  CHECK(sum == s.wall_ns);
  // The compute intervals leave out the wait inside them.
  REQUIRE(s.compute_intervals.size() == 2);
  CHECK(s.compute_intervals[0] == Interval{t0 + 100, t0 + 300});
  CHECK(s.compute_intervals[1] == Interval{t0 + 350, t0 + 500});
  // A region open across the step boundary is split between the steps.
  t.open(TimeCategory::compute, t0 + 1100);
  const StepTimes s2 = t.take_step(t0 + 1200);
  CHECK(s2[TimeCategory::compute] == 100);
  CHECK(s2[TimeCategory::other] == 100);
  t.close(t0 + 1250);
  CHECK(t.take_step(t0 + 1300)[TimeCategory::compute] == 50);
}

TEST_CASE("accounting and spans off: nothing is kept, scopes cost nothing") {
  Tracer t;
  CHECK_FALSE(t.active());
  {
    TraceScope a(&t, "forward", TraceThread::loop, TimeCategory::compute);
    TraceScope b(nullptr, "x", TraceThread::engine);
  }
  CHECK(t.span_count() == 0);
  CHECK(t.take_step(5).wall_ns == 0);
}

TEST_CASE("spans from scopes and other threads are kept; other threads are not accounted") {
  Tracer t;
  t.set_spans(true);
  t.set_accounting(true);
  {
    TraceScope a(&t, "forward", TraceThread::loop, TimeCategory::compute, "fc1", 64);
    a.end();
    a.end();  // idempotent
  }
  std::thread other([&] {
    TraceScope b(&t, "elsewhere", TraceThread::io, TimeCategory::io_wait);
  });
  other.join();
  auto [spans, counters] = t.take_all();
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].name == "forward");
  CHECK(spans[0].unit == "fc1");
  CHECK(spans[0].bytes == 64);
  CHECK(spans[0].end_ns >= spans[0].begin_ns);
  CHECK(counters.empty());
  CHECK(t.span_count() == 0);
  const StepTimes s = t.take_step(Tracer::now_ns());
  CHECK(s[TimeCategory::io_wait] == 0);
}

TEST_CASE("overlap_ns is the measure of the intersection of two unions") {
  CHECK(overlap_ns({}, {{0, 10}}) == 0);
  CHECK(overlap_ns({{0, 10}}, {{5, 20}}) == 5);
  // Overlapping and unsorted inputs are merged first: [0, 30) and [10, 15) + [25, 40).
  CHECK(overlap_ns({{20, 30}, {0, 25}}, {{25, 40}, {10, 15}}) == 10);
  CHECK(overlap_ns({{5, 5}, {9, 3}}, {{0, 100}}) == 0);  // empty and reversed count as nothing
}

TEST_CASE("summarize: min, median, max over ranks and the slowest rank") {
  std::vector<StepFigures> r(3);
  r[0].wall = 10;
  r[1].wall = 30;
  r[2].wall = 20;
  r[0].compute = 4;
  r[1].compute = 1;
  r[2].compute = 2;
  r[1].hidden_comm = 3;
  r[1].comm_wait = 1;
  const BreakdownSummary s = summarize(7, r);
  CHECK(s.step == 7);
  CHECK(s.slowest_rank == 1);
  CHECK(s.field("wall").min == 10);
  CHECK(s.field("wall").median == 20);
  CHECK(s.field("wall").max == 30);
  CHECK(s.field("compute").max_rank == 0);
  CHECK(r[1].overlap_fraction() == doctest::Approx(0.75));
  CHECK(r[0].overlap_fraction() == 0);
  std::vector<StepFigures> even(2);
  even[0].wall = 1;
  even[1].wall = 4;
  CHECK(summarize(1, even).field("wall").median == 2.5);
  const std::string text = format_breakdown(s);
  CHECK(text.find("slowest rank 1") != std::string::npos);
  CHECK(text.find("hidden_comm") != std::string::npos);
  CHECK(text.find("ps_push") == std::string::npos);  // no parameter server: no ps_* rows
  // A parameter-server worker's rows: push, pull wait and staleness.
  r[2].ps_push = 0.5;
  r[0].ps_pull_wait = 2;
  for (StepFigures& f : r) f.ps_staleness = 2;
  const BreakdownSummary ps = summarize(8, r);
  CHECK(ps.field("ps_pull_wait").max_rank == 0);
  CHECK(ps.field("ps_staleness").median == 2);
  const std::string ps_text = format_breakdown(ps);
  CAPTURE(ps_text);
  CHECK(ps_text.find("  ps_push                          0.00     0.00     0.50  (2)") != std::string::npos);
  CHECK(ps_text.find("  ps_pull_wait                     0.00     0.00     2.00  (0)") != std::string::npos);
  CHECK(ps_text.find("  ps_staleness (steps)             2.00     2.00     2.00  (0)") != std::string::npos);
  CHECK(StepFigures::from_array(r[2].as_array()).ps_push == 0.5);
  CHECK_THROWS_AS(summarize(1, {}), InvariantError);
  CHECK_THROWS_AS((void)s.field("nope"), InvariantError);
}

TEST_CASE("straggler: the last rank at each collective is charged its lateness") {
  // Rank 1 arrives 50 ms late at the first collective and 2 ms late at the
  // third; rank 2 is last at the second by 1 ms.
  const std::int64_t ms = 1000000;
  const std::vector<std::vector<std::int64_t>> a = {
      {0, 100 * ms, 200 * ms},
      {50 * ms, 100 * ms, 202 * ms},
      {1 * ms, 101 * ms, 200 * ms},
  };
  const StragglerStep s = analyze_arrivals(a);
  CHECK(s.collectives == 3);
  CHECK_FALSE(s.counts_differ);
  CHECK(s.straggler == 1);
  CHECK(s.late_ms[1] == doctest::Approx(52.0));
  CHECK(s.late_ms[2] == doctest::Approx(1.0));
  CHECK(s.last_count[1] == 2);
  CHECK(s.worst_ms == doctest::Approx(50.0));
  CHECK(format_straggler(s).find("rank 1 arrived last at 2 of 3") != std::string::npos);
  StragglerTotals totals;
  totals.add(s);
  totals.add(s);
  CHECK(totals.steps == 2);
  CHECK(totals.late_ms[1] == doctest::Approx(104.0));
  CHECK(totals.straggler_steps[1] == 2);
  CHECK(totals.describe().rfind("rank 1 made the others wait 104.0 ms", 0) == 0);
  // Different counts: compared on the common prefix and flagged.
  const StragglerStep d = analyze_arrivals({{0, 5}, {3}});
  CHECK(d.collectives == 1);
  CHECK(d.counts_differ);
  CHECK(d.straggler == 1);
  // One rank, or no collectives: nobody is late.
  CHECK(analyze_arrivals({{1, 2}}).straggler == -1);
  CHECK(analyze_arrivals({{}, {}}).straggler == -1);
  CHECK(StragglerTotals{}.describe() == "no rank made the others wait");
  CHECK_THROWS_AS(analyze_arrivals({}), InvariantError);
}
