// Pipeline schedule tables (parallel/pipeline_schedule.h): the printed
// tables of small cases, and for p = 1-4 stages and m = 1-8 micro-batches,
// both schedules: every micro-batch forwarded and backwarded exactly once
// per stage, backwards in micro-batch order, each stage's sends matched by
// its neighbour's receives in the same order, the in-flight count (1F1B:
// min(p - s, m) <= p; GPipe: m), and the simulated bubble equal to
// (p - 1) / (m + p - 1). Tables that are wrong are rejected by name.
// No communication: the same checks run on every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "tests/support/thrown.h"

namespace zeroshard {
namespace {

using testing::contains;
using testing::error_message;

const PipelineScheduleKind kKinds[] = {PipelineScheduleKind::gpipe,
                                       PipelineScheduleKind::one_f_one_b};

// The micro-batches of `op` in a stage's actions, in order.
std::vector<int> order(const std::vector<PipelineAction>& actions, PipelineOp op) {
  std::vector<int> out;
  for (const PipelineAction& a : actions) {
    if (a.op == op) out.push_back(a.micro_batch);
  }
  return out;
}

std::vector<int> iota(int m) {
  std::vector<int> v(static_cast<std::size_t>(m));
  for (int i = 0; i < m; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

std::string invariant_error(const PipelineTable& t) {
  return error_message<InvariantError>([&] { validate_pipeline_table(t); });
}

TEST_CASE("pipeline schedule: printed tables of 1F1B and GPipe at 2 stages") {
  const PipelineTable f = make_pipeline_table(PipelineScheduleKind::one_f_one_b, 2, 3);
  CHECK(to_string(f) ==
        "1f1b: 2 stages, 3 micro-batches\n"
        "stage 0: fwd 0 | send_act 0 | fwd 1 | send_act 1 | recv_grad 0 | bwd 0 | fwd 2 | send_act 2 | "
        "recv_grad 1 | bwd 1 | recv_grad 2 | bwd 2\n"
        "stage 1: recv_act 0 | fwd 0 | bwd 0 | send_grad 0 | recv_act 1 | fwd 1 | bwd 1 | send_grad 1 | "
        "recv_act 2 | fwd 2 | bwd 2 | send_grad 2\n");
  const PipelineTable g = make_pipeline_table(PipelineScheduleKind::gpipe, 2, 2);
  CHECK(to_string(g) ==
        "gpipe: 2 stages, 2 micro-batches\n"
        "stage 0: fwd 0 | send_act 0 | fwd 1 | send_act 1 | recv_grad 0 | bwd 0 | recv_grad 1 | bwd 1\n"
        "stage 1: recv_act 0 | fwd 0 | recv_act 1 | fwd 1 | bwd 0 | send_grad 0 | bwd 1 | send_grad 1\n");
  CHECK(to_string(make_pipeline_table(PipelineScheduleKind::gpipe, 1, 1)) ==
        "gpipe: 1 stage, 1 micro-batch\nstage 0: fwd 0 | bwd 0\n");
}

TEST_CASE("pipeline schedule: 1F1B at 4 stages and 8 micro-batches is Narayanan et al.'s figure") {
  // Warm-up p - s - 1 forwards, one forward one backward, cool-down.
  const PipelineTable t = make_pipeline_table(PipelineScheduleKind::one_f_one_b, 4, 8);
  CHECK(compute_order(t.actions[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(compute_order(t.actions[1]) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  CHECK(compute_order(t.actions[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  CHECK(compute_order(t.actions[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: warm-up is all of them.
  const PipelineTable s = make_pipeline_table(PipelineScheduleKind::one_f_one_b, 4, 2);
  CHECK(compute_order(s.actions[0]) == "F0 F1 B0 B1");
  CHECK(compute_order(s.actions[3]) == "F0 B0 F1 B1");
  CHECK(compute_order(make_pipeline_table(PipelineScheduleKind::gpipe, 3, 3).actions[1]) ==
        "F0 F1 F2 B0 B1 B2");
}

TEST_CASE("pipeline schedule: p = 1-4, m = 1-8, both schedules: counts, order, matching, in flight") {
  for (PipelineScheduleKind kind : kKinds) {
    for (int p = 1; p <= 4; ++p) {
      for (int m = 1; m <= 8; ++m) {
        CAPTURE(to_string(kind));
        CAPTURE(p);
        CAPTURE(m);
        const PipelineTable t = make_pipeline_table(kind, p, m);
        REQUIRE(t.actions.size() == static_cast<std::size_t>(p));
        CHECK_NOTHROW(validate_pipeline_table(t));
        for (int s = 0; s < p; ++s) {
          CAPTURE(s);
          const auto& a = t.actions[static_cast<std::size_t>(s)];
          CHECK(a == pipeline_stage_actions(kind, p, s, m));
          // Forwards and backwards: each micro-batch once, in micro-batch order.
          CHECK(order(a, PipelineOp::forward) == iota(m));
          CHECK(order(a, PipelineOp::backward) == iota(m));
          // Receives and sends only towards existing neighbours, each once.
          CHECK(order(a, PipelineOp::recv_activation) == (s > 0 ? iota(m) : std::vector<int>{}));
          CHECK(order(a, PipelineOp::send_gradient) == (s > 0 ? iota(m) : std::vector<int>{}));
          CHECK(order(a, PipelineOp::send_activation) == (s < p - 1 ? iota(m) : std::vector<int>{}));
          CHECK(order(a, PipelineOp::recv_gradient) == (s < p - 1 ? iota(m) : std::vector<int>{}));
          // Each stage's sends in the order its neighbour receives them.
          if (s + 1 < p) {
            const auto& b = t.actions[static_cast<std::size_t>(s + 1)];
            CHECK(order(a, PipelineOp::send_activation) == order(b, PipelineOp::recv_activation));
            CHECK(order(b, PipelineOp::send_gradient) == order(a, PipelineOp::recv_gradient));
          }
          // The backward of i after its forward; the in-flight count.
          int in_flight = 0, peak = 0;
          std::vector<bool> forwarded(static_cast<std::size_t>(m), false);
          for (const PipelineAction& x : a) {
            if (x.op == PipelineOp::forward) {
              forwarded[static_cast<std::size_t>(x.micro_batch)] = true;
              peak = std::max(peak, ++in_flight);
            } else if (x.op == PipelineOp::backward) {
              CHECK(forwarded[static_cast<std::size_t>(x.micro_batch)]);
              --in_flight;
            }
          }
          CHECK(in_flight == 0);
          CHECK(max_in_flight(a) == peak);
          if (kind == PipelineScheduleKind::one_f_one_b) {
            CHECK(peak == std::min(p - s, m));
            CHECK(peak <= p);
          } else {
            CHECK(peak == m);
          }
        }
      }
    }
  }
}

TEST_CASE("pipeline schedule: simulated bubble equals (p - 1) / (m + p - 1) for both schedules") {
  // With forward time tf and backward time tb on every stage, each stage
  // idles (p - 1)(tf + tb) of a step of (m + p - 1)(tf + tb): exact in
  // integer time units.
  for (PipelineScheduleKind kind : kKinds) {
    for (int p = 1; p <= 4; ++p) {
      for (int m = 1; m <= 8; ++m) {
        for (const auto& entry : {std::pair<int, int>{1, 1}, {1, 2}, {3, 5}}) {
          // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
          const auto& tf = entry.first;
          const auto& tb = entry.second;
          CAPTURE(to_string(kind));
          CAPTURE(p);
          CAPTURE(m);
          CAPTURE(tf);
          CAPTURE(tb);
          const PipelineSimulation sim = simulate_pipeline(make_pipeline_table(kind, p, m), tf, tb);
          CHECK(sim.makespan == static_cast<std::int64_t>(m + p - 1) * (tf + tb));
          for (int s = 0; s < p; ++s) {
            CHECK(sim.idle[static_cast<std::size_t>(s)] == static_cast<std::int64_t>(p - 1) * (tf + tb));
          }
          CHECK(sim.bubble_fraction() == doctest::Approx(static_cast<double>(p - 1) / (m + p - 1)));
        }
      }
    }
  }
}

TEST_CASE("pipeline schedule: wrong tables are rejected naming the stage and the action") {
  PipelineTable t = make_pipeline_table(PipelineScheduleKind::one_f_one_b, 2, 3);
  {
    // Stage 0 waits for the gradient of 0 before sending activation 0: deadlock.
    PipelineTable d = t;
    auto& a = d.actions[0];
    std::swap(a[1], a[4]);  // send_act 0 <-> recv_grad 0
    std::swap(a[0], a[1]);  // ... and before the forward it needs, still wrong
    const std::string what = invariant_error(d);
    CHECK(contains(what, "stage 0"));
  }
  {
    // A receive before the forward only: send_act 0 moved after recv_grad 0.
    PipelineTable d = make_pipeline_table(PipelineScheduleKind::gpipe, 2, 1);
    // stage 0: fwd 0 | send_act 0 | recv_grad 0 | bwd 0 -> fwd 0 | recv_grad 0 | send_act 0 | bwd 0
    std::swap(d.actions[0][1], d.actions[0][2]);
    const std::string what = invariant_error(d);
    CHECK(contains(what, "deadlocks"));
    CHECK(contains(what, "stage 0 waits in action 1 (recv_grad 0)"));
    CHECK(contains(what, "stage 1 waits in action 0 (recv_act 0)"));
  }
  {
    PipelineTable d = t;  // micro-batch 2 forwarded twice on stage 1
    d.actions[1][9] = {PipelineOp::forward, 1};
    CHECK(contains(invariant_error(d), "stage 1 runs fwd 1 twice"));
  }
  {
    PipelineTable d = t;  // stage 0 sends activations 1 and 2 in the other order
    std::swap(d.actions[0][3], d.actions[0][7]);
    const std::string what = invariant_error(d);
    CHECK(contains(what, "stage 0 needs send_act"));
  }
  {
    PipelineTable d = make_pipeline_table(PipelineScheduleKind::gpipe, 2, 2);
    // Stage 1 receives activation 1 before 0 (and forwards in that order).
    std::swap(d.actions[1][0], d.actions[1][2]);
    std::swap(d.actions[1][1], d.actions[1][3]);
    CHECK(contains(invariant_error(d), "out of order"));
  }
  {
    PipelineTable d = t;  // the first stage sends a gradient to no one
    d.actions[0].push_back({PipelineOp::send_gradient, 0});
    CHECK(contains(invariant_error(d), "stage 0 of 2 has send_grad 0"));
  }
  {
    PipelineTable d = t;
    d.actions.pop_back();
    CHECK(contains(invariant_error(d), "2 stages, 3 micro-batches and 1 action lists"));
  }
}

TEST_CASE("pipeline schedule: names and bad sizes") {
  CHECK(parse_pipeline_schedule("gpipe") == PipelineScheduleKind::gpipe);
  CHECK(parse_pipeline_schedule("1f1b") == PipelineScheduleKind::one_f_one_b);
  CHECK(std::string(to_string(PipelineScheduleKind::one_f_one_b)) == "1f1b");
  CHECK(to_string(PipelineAction{PipelineOp::recv_gradient, 7}) == "recv_grad 7");
  try {
    parse_pipeline_schedule("1F1B ");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(contains(e.what(), "\"1F1B \" is unknown; use \"gpipe\" or \"1f1b\""));
  }
  CHECK_THROWS_AS(make_pipeline_table(PipelineScheduleKind::gpipe, 0, 4), ConfigError);
  CHECK_THROWS_AS(make_pipeline_table(PipelineScheduleKind::gpipe, 2, 0), ConfigError);
  try {
    pipeline_stage_actions(PipelineScheduleKind::one_f_one_b, 2, 2, 4);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(contains(e.what(), "stage 2 is outside [0, 2)"));
  }
  CHECK_THROWS_AS(simulate_pipeline(make_pipeline_table(PipelineScheduleKind::gpipe, 2, 2), -1, 1),
                  InvariantError);
}

}  // namespace
}  // namespace zeroshard
