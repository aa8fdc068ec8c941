// The reduce order check ([Note: reduce order check] in
// runtime/engine/reduce_order.h), at stages 0-3 and world sizes 1-4:
//   - a rank that calls reduce_gradients in another unit order than rank 0
//     (units of equal size, which the buckets would sum crosswise without a
//     word) makes step() throw the same AgreedConfigError on every rank,
//     naming the step, the micro-batch, the units each order reduced and
//     the ranks; no parameter changes (stage 0's replicas included), and
//     the next step, in order, trains as if the bad step had not happened;
//   - the same with gradient accumulation, the difference in micro-batch 2;
//   - every rank reducing in the same unusual order (reverse) is no error
//     and gives the SGD closed form.
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/collective_error.h"
#include "core/error.h"
#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr std::size_t kElems = 57;
constexpr int kUnits = 3;

// Plain SGD (lr 0.5) at `stage` with `accumulation` micro-batches per step.
EngineConfig sgd(int stage, int accumulation) {
  EngineConfig c = sgd_config(stage, 0.0);
  c.gradient_accumulation_steps = accumulation;
  return c;
}

struct Model {
  Engine e;
  std::vector<ParamId> p;
  explicit Model(const EngineConfig& c) : e(c, world()) {
    for (int u = 0; u < kUnits; ++u) {
      p.push_back(e.add_parameter(e.add_unit(fmt::format("u{}", u)), fmt::format("u{}.w", u), {kElems}));
    }
    e.finalize();
    for (int u = 0; u < kUnits; ++u) {
      std::vector<float> v(kElems);
      for (std::size_t i = 0; i < kElems; ++i) v[i] = static_cast<float>(u) + 0.25f * static_cast<float>(i % 5);
      e.set_parameter(p[static_cast<std::size_t>(u)], v);
    }
  }
  // Unit u's gradient on rank r: u + 1 + r (exact in fp32).
  static float grad_value(int u, int r) { return static_cast<float>(u + 1 + r); }
  // One micro-batch: gradients added, units reduced in `order` (a unit not
  // in it is left to step()).
  StepResult micro_batch(const std::vector<int>& order) {
    const int r = world().rank();
    for (int u = kUnits - 1; u >= 0; --u) {
      if (e.stage() == 3) e.unshard(u);
      for (float& g : e.grad(p[static_cast<std::size_t>(u)])) g += grad_value(u, r);
      if (e.stage() == 3) e.reshard(u);
    }
    for (int u : order) e.reduce_gradients(u);
    return e.step();
  }
  std::vector<std::vector<float>> params() {
    std::vector<std::vector<float>> out;
    for (ParamId id : p) out.push_back(e.gather_parameter(id));
    return out;
  }
};

// What step() threw on this rank ("" if nothing); `agreed` whether it is an
// agreed error.
template <class F>
std::string thrown(F&& f, bool& agreed) {
  agreed = false;
  try {
    f();
  } catch (const ConfigError& err) {
    agreed = is_agreed(err);
    return err.what();
  }
  return "";
}

// The SGD closed form after one step in unit order from `before`: the mean
// of the ranks' gradients, u + 1 + (N - 1) / 2, times lr 0.5, times the
// accumulation (each micro-batch adds the same gradient) / accumulation.
void check_one_sgd_step(const std::vector<std::vector<float>>& before, const std::vector<std::vector<float>>& after) {
  const int n = world().world_size();
  for (int u = 0; u < kUnits; ++u) {
    const double mean = u + 1 + (n - 1) / 2.0;
    for (std::size_t i = 0; i < kElems; ++i) {
      CHECK(after[static_cast<std::size_t>(u)][i] ==
            doctest::Approx(before[static_cast<std::size_t>(u)][i] - 0.5 * mean).epsilon(1e-6));
    }
  }
}

}  // namespace

TEST_CASE("reduce_gradients in another unit order on one rank is an agreed error naming the units and ranks") {
  const int n = world().world_size();
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Model m(sgd(stage, 1));
    const auto before = m.params();
    // The last rank reduces u2, u0, u1; the others u0, u1, u2.
    const bool odd = n > 1 && world().rank() == n - 1;
    bool agreed = false;
    const std::string err =
        thrown([&] { m.micro_batch(odd ? std::vector<int>{2, 0, 1} : std::vector<int>{0, 1, 2}); }, agreed);
    if (n == 1) {
      CHECK(err.empty());
      continue;
    }
    CHECK(agreed);
    CHECK(err.find("reduce_gradients order differs between data-parallel ranks in step 1, micro-batch 1: from its "
                   "reduction 1 of that micro-batch on, rank 0 reduced units \"u0\", \"u1\", \"u2\" and rank " +
                   std::to_string(n - 1) + " reduced \"u2\", \"u0\", \"u1\" (ranks whose order differs from rank "
                   "0's: " + std::to_string(n - 1) + ")") != std::string::npos);
    CHECK(err.find("No parameter was updated") != std::string::npos);
    // Nothing changed, on any rank (at stage 0 each rank's own replica).
    CHECK(m.params() == before);
    // The next step, in order, is the closed form from the same parameters.
    const StepResult r = m.micro_batch({0, 1, 2});
    CHECK(r.applied);
    check_one_sgd_step(before, m.params());
  }
}

TEST_CASE("a different reduce order in the second micro-batch of an accumulation cycle is named") {
  const int n = world().world_size();
  if (n == 1) return;
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Model m(sgd(stage, 2));
    const auto before = m.params();
    CHECK_FALSE(m.micro_batch({0, 1, 2}).boundary);
    // Rank 0 reduces u1 then u0 (u2 left to step()); the others u1, u2.
    bool agreed = false;
    const std::string err = thrown(
        [&] { m.micro_batch(world().rank() == 0 ? std::vector<int>{1, 0} : std::vector<int>{1, 2}); }, agreed);
    CHECK(agreed);
    const std::string ranks = n == 2 ? "1" : n == 3 ? "1, 2" : "1, 2, 3";
    // Stages 0/1 reduce at the boundary only: its micro-batch is the step's first with reductions.
    CHECK(err.find(fmt::format("in step 1, micro-batch 2: from its reduction 2 of that micro-batch on, rank 0 "
                               "reduced units \"u1\", \"u0\", \"u2\" and rank 1 reduced \"u1\", \"u2\", \"u0\" "
                               "(ranks whose order differs from rank 0's: {})",
                               ranks)) != std::string::npos);
    CHECK(m.params() == before);
  }
}

TEST_CASE("every rank reducing in the same unusual order trains as in unit order") {
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Model m(sgd(stage, 1));
    const auto before = m.params();
    const StepResult r = m.micro_batch({2, 1, 0});
    CHECK(r.applied);
    check_one_sgd_step(before, m.params());
  }
}
