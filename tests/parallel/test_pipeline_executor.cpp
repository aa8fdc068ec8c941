// PipelineExecutor (parallel/pipeline_executor.h) on a toy pipeline over
// the pipeline-parallel group of a Mesh, at world sizes 1-4: stage s maps
// each element x to a_s * x + b_s, the loss is the sum of the last stage's
// outputs, and the gradients are written by hand. For both schedules and
// m = 1, 3, 4 micro-batches, every stage's inputs, incoming gradients,
// parameter gradients, the loss and the order of forward and backward calls
// equal their closed forms exactly (small integers, exact in f32 and f64).
// A stage that is slow still finishes; bad stage descriptions are one
// ConfigError on every stage. At 4 ranks, dp x pp = 2 x 2 runs two
// pipelines side by side.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/mesh.h"
#include "comm/self/self_communicator.h"
#include "core/error.h"
#include "parallel/pipeline_executor.h"
#include "parallel_test_util.h"

namespace zeroshard {
namespace {

using tptest::world;

constexpr std::size_t kWidth = 7;  // elements of an activation

double a_of(int s) { return s + 2; }   // 2, 3, 4, 5
double b_of(int s) { return s - 1; }   // -1, 0, 1, 2

// Closed forms for p stages, m micro-batches, inputs x0[i][k] = i + k:
// stage s's input x_s = P_s (i + k) + C_s with P_s = prod_{t<s} a_t and
// C_s = sum_{u<s} b_u prod_{u<t<s} a_t; the gradient reaching stage s's
// output is G_s = prod_{t>s} a_t in every element.
double P(int s) {
  double v = 1;
  for (int t = 0; t < s; ++t) v *= a_of(t);
  return v;
}
double C(int s) {
  double v = 0;
  for (int u = 0; u < s; ++u) v = a_of(u) * v + b_of(u);
  return v;
}
double G(int s, int p) {
  double v = 1;
  for (int t = s + 1; t < p; ++t) v *= a_of(t);
  return v;
}

// One stage of the toy model, in element type T.
template <class T>
struct ToyPipelineStage {
  int s = 0, p = 1;
  double delay_ms = 0;
  std::vector<std::vector<T>> stash;  // inputs kept for the backward, per micro-batch
  double grad_a = 0, grad_b = 0, loss = 0;
  std::string calls;  // "F0 F1 B0 ..."
  int wrong_inputs = 0, wrong_grads = 0;

  PipelineStageFunctions functions(DType dtype, int m) {
    stash.assign(static_cast<std::size_t>(m), {});
    PipelineStageFunctions f;
    f.dtype = dtype;
    f.input_count = s > 0 ? kWidth : 0;
    f.output_count = s < p - 1 ? kWidth : 0;
    f.forward = [this](int i, const void* in, void* out) {
      calls += (calls.empty() ? "F" : " F") + std::to_string(i);
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
      std::vector<T> x(kWidth);
      for (std::size_t k = 0; k < kWidth; ++k) {
        x[k] = s == 0 ? static_cast<T>(i + static_cast<int>(k)) : static_cast<const T*>(in)[k];
        if (static_cast<double>(x[k]) != P(s) * (i + static_cast<double>(k)) + C(s)) ++wrong_inputs;
        const T y = static_cast<T>(a_of(s)) * x[k] + static_cast<T>(b_of(s));
        if (s < p - 1) {
          static_cast<T*>(out)[k] = y;
        } else {
          loss += static_cast<double>(y);
        }
      }
      stash[static_cast<std::size_t>(i)] = std::move(x);
    };
    f.backward = [this](int i, const void* grad_out, void* grad_in) {
      calls += " B" + std::to_string(i);
      const std::vector<T>& x = stash[static_cast<std::size_t>(i)];
      for (std::size_t k = 0; k < kWidth; ++k) {
        const T g = s == p - 1 ? T(1) : static_cast<const T*>(grad_out)[k];
        if (static_cast<double>(g) != G(s, p)) ++wrong_grads;
        grad_a += static_cast<double>(g) * static_cast<double>(x[k]);
        grad_b += static_cast<double>(g);
        if (s > 0) static_cast<T*>(grad_in)[k] = static_cast<T>(a_of(s)) * g;
      }
      stash[static_cast<std::size_t>(i)].clear();
    };
    return f;
  }
};

// Runs the toy pipeline over `pp` (stage = pp.rank()) and checks every
// closed form. `slow`: the stage that sleeps in each forward (-1: none).
template <class T>
void run_toy(Communicator& pp, DType dtype, PipelineScheduleKind kind, int m, int slow = -1) {
  const int p = pp.world_size(), s = pp.rank();
  CAPTURE(to_string(kind));
  CAPTURE(p);
  CAPTURE(s);
  CAPTURE(m);
  CAPTURE(dtype_name(dtype));
  ToyPipelineStage<T> toy;
  toy.s = s;
  toy.p = p;
  toy.delay_ms = s == slow ? 5.0 : 0.0;
  PipelineExecutor ex(pp, toy.functions(dtype, m));
  CHECK(ex.pp_rank() == s);
  CHECK(ex.pp_size() == p);
  const PipelineTable table = make_pipeline_table(kind, p, m);
  for (int step = 0; step < 2; ++step) {  // buffers are reused by the second run
    toy.grad_a = toy.grad_b = toy.loss = 0;
    toy.calls.clear();
    const PipelineTimeline tl = ex.run(table);
    const auto& actions = table.actions[static_cast<std::size_t>(s)];
    CHECK(toy.calls == compute_order(actions));
    CHECK(toy.wrong_inputs == 0);
    CHECK(toy.wrong_grads == 0);
    // sum over i < m, k < width of (i + k)
    const double sum_x0 = kWidth * m * (m - 1) / 2.0 + m * kWidth * (kWidth - 1) / 2.0;
    const double n = static_cast<double>(m) * kWidth;
    CHECK(toy.grad_b == n * G(s, p));
    CHECK(toy.grad_a == G(s, p) * (P(s) * sum_x0 + n * C(s)));
    if (s == p - 1) {
      CHECK(toy.loss == P(p) * sum_x0 + n * C(p));
    }
    // The timeline: one event per action, in order, inside the run.
    REQUIRE(tl.events.size() == actions.size());
    CHECK(tl.pp_rank == s);
    std::int64_t last = tl.begin_ns;
    for (std::size_t k = 0; k < actions.size(); ++k) {
      CHECK(tl.events[k].action == actions[k]);
      CHECK(tl.events[k].begin_ns >= last);
      CHECK(tl.events[k].end_ns >= tl.events[k].begin_ns);
      last = tl.events[k].end_ns;
    }
    CHECK(tl.end_ns >= last);
    CHECK(tl.compute_ns() >= 0);
    CHECK(tl.idle_ns() >= 0);
    CHECK(tl.idle_fraction() >= 0.0);
    CHECK(tl.idle_fraction() <= 1.0);
    if (slow >= 0 && s == slow) CHECK(tl.compute_ns() >= static_cast<std::int64_t>(m) * 5'000'000);
  }
}

TEST_CASE("pipeline executor: the toy pipeline equals its closed forms, both schedules, m = 1, 3, 4") {
  Communicator& w = world();
  const int n = w.world_size();
  Mesh mesh(w, MeshShape{1, 1, n});
  REQUIRE(mesh.pp_group().world_size() == n);
  for (PipelineScheduleKind kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
    for (int m : {1, 3, 4}) {
      run_toy<float>(mesh.pp_group(), DType::f32, kind, m);
    }
  }
  run_toy<double>(mesh.pp_group(), DType::f64, PipelineScheduleKind::one_f_one_b, 4);
}

TEST_CASE("pipeline executor: a slow stage still finishes with the same results") {
  Communicator& w = world();
  const int n = w.world_size();
  Mesh mesh(w, MeshShape{1, 1, n});
  for (PipelineScheduleKind kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
    run_toy<float>(mesh.pp_group(), DType::f32, kind, 4, /*slow=*/n / 2);
  }
}

TEST_CASE("pipeline executor: two pipelines side by side on a dp x pp mesh") {
  Communicator& w = world();
  if (w.world_size() != 4) return;
  Mesh mesh(w, MeshShape{2, 1, 2});
  CHECK(mesh.pp_rank() == w.rank() / 2);
  run_toy<float>(mesh.pp_group(), DType::f32, PipelineScheduleKind::one_f_one_b, 3);
  run_toy<float>(mesh.pp_group(), DType::f32, PipelineScheduleKind::gpipe, 4);
}

// The ConfigError every stage throws for `f` (built per stage), or "".
std::string executor_error(Communicator& pp, const PipelineStageFunctions& f) {
  try {
    PipelineExecutor ex(pp, f);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("pipeline executor: mismatched stage descriptions are one ConfigError on every stage") {
  Communicator& w = world();
  const int p = w.world_size(), s = w.rank();
  ToyPipelineStage<float> toy;
  toy.s = s;
  toy.p = p;
  {
    PipelineStageFunctions f = toy.functions(DType::f32, 1);
    if (s == 0) f.input_count = 5;
    CHECK(executor_error(w, f).find("stage 0 has input_count 5") != std::string::npos);
  }
  if (p >= 2) {
    PipelineStageFunctions f = toy.functions(DType::f32, 1);
    if (s == 1) f.input_count = 8;
    const std::string what = executor_error(w, f);
    CHECK(what.find("pipeline executor over " + std::to_string(p) + " stages") == 0);
    CHECK(what.find("stage 0 sends output_count 7 elements but stage 1 expects input_count 8") !=
          std::string::npos);
    PipelineStageFunctions g = toy.functions(s == p - 1 ? DType::f64 : DType::f32, 1);
    CHECK(executor_error(w, g).find("stage " + std::to_string(p - 1) + " uses dtype f64 but stage 0 uses f32") !=
          std::string::npos);
  }
  {
    PipelineStageFunctions f = toy.functions(DType::f32, 1);
    if (s == p - 1) f.backward = nullptr;
    CHECK(executor_error(w, f).find("stage " + std::to_string(p - 1) + " has no forward or no backward") !=
          std::string::npos);
  }
  // A table for another number of stages is refused before any message.
  PipelineExecutor ex(w, toy.functions(DType::f32, 2));
  CHECK_THROWS_AS(ex.run(make_pipeline_table(PipelineScheduleKind::gpipe, p + 1, 2)), InvariantError);
  // The executor still runs afterwards.
  ex.run(make_pipeline_table(PipelineScheduleKind::gpipe, p, 2));
  if (s == p - 1) CHECK(toy.loss != 0.0);
}

TEST_CASE("pipeline executor: an exception from a stage's forward reaches the caller (one stage)") {
  SelfCommunicator self;
  PipelineStageFunctions f;
  f.forward = [](int i, const void*, void*) {
    if (i == 1) throw IoError("forward of micro-batch 1 failed");
  };
  f.backward = [](int, const void*, void*) {};
  PipelineExecutor ex(self, f);
  CHECK_THROWS_WITH_AS(ex.run(make_pipeline_table(PipelineScheduleKind::one_f_one_b, 1, 3)),
                       "forward of micro-batch 1 failed", IoError);
  f.forward = [](int, const void*, void*) {};
  PipelineExecutor again(self, f);
  CHECK(again.run(make_pipeline_table(PipelineScheduleKind::gpipe, 1, 2)).events.size() == 4);
}

}  // namespace
}  // namespace zeroshard
