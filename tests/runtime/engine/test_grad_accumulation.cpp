// Gradient accumulation in mixed precision ([Note: gradient accumulator] in
// runtime/engine/engine.h): bf16 micro-batch gradients summed in fp32 by
// default at every ZeRO stage and offload tier, the 16-bit sum only with
// data_types.grad_accum_dtype, and the accumulator in the ledger and the
// memory estimate.
//
// The closed form (DeepSpeed #1800): every rank adds x = bf16(0.003) =
// 0.0030059814453125 = 197 / 2^16 into its gradient in each of k
// micro-batches. Every partial sum j x (j <= 700 x 4 ranks) is an integer
// times 2^-16 below 2^24 x 2^-16, so fp32 holds each exactly: the rank-sum
// of the k micro-batches is N k x, and the averaged gradient (the sum over
// ranks and micro-batches divided by N k, which StepResult::grad_norm
// reports for a one-element parameter) is k x / k, whatever the world size
// N. Scaled back by k and rounded to fp32 it must equal k x exactly:
// 0.90179443359375 for k = 300, 2.10418701171875 for k = 700. A bf16 sum
// stops at 1.0 (ulp 2^-7 there, so x < ulp / 2 is lost), and so does the
// mean over ranks that a bf16 accumulator holds (N x / N rounds to x).
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/dtype.h"
#include "core/error.h"
#include "runtime/engine/engine.h"
#include "runtime/plan/memory_estimate.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr float kX = 0.0030059814453125f;  // bf16(0.003), exact in bf16

// A bf16 engine at `stage` with plain SGD (lr 1, no decay, no momentum),
// `k` micro-batches per step, the accumulator in `accum` (unset: the
// default), optimizer state and gradient shard on `offload`.
EngineConfig accumulation_config(int stage, int k, std::optional<DType> accum,
                                 OffloadDevice offload = OffloadDevice::none) {
  OptimizerHyper h;
  h.kind = OptimizerKind::sgd;
  h.lr = 1.0;
  h.weight_decay = 0.0;
  EngineConfig c = make_config(stage, h, k);
  c.compute_dtype = DType::bf16;
  c.grad_accum_dtype = accum;
  if (stage > 0) c.offload.optimizer.device = offload;
  return c;
}

// Runs one optimizer step of k micro-batches on a one-element parameter
// (initial value 0), each rank adding kX into grad() per micro-batch as a
// loop's bf16 backward does (sum rounded to bf16), and returns the
// boundary step's result; `master` receives the updated fp32 master value.
StepResult accumulate(const EngineConfig& config, int k, float& master) {
  Engine e(config, world());
  const UnitId u = e.add_unit("u");
  const ParamId p = e.add_parameter(u, "p", {1});
  e.finalize();
  e.set_parameter(p, std::vector<float>{0.0f});
  StepResult last;
  for (int m = 0; m < k; ++m) {
    std::span<bf16> g = e.grad_as<bf16>(p);
    g[0] = from_float<bf16>(to_float(g[0]) + kX);
    e.reduce_gradients(u);
    last = e.step();
    CHECK(last.boundary == (m == k - 1));
  }
  master = e.gather_master(p)[0];
  return last;
}

// For k = 300 and 700 at stages 0-3 with the accumulator in `accum`: the
// boundary step's grad_norm x k, rounded to fp32, is exactly sum(k), and the
// SGD update from 0 (lr 1) is -sum(k) / k within 1e-6.
template <class Sum>
void check_sums(std::optional<DType> accum, Sum sum) {
  CAPTURE(world().world_size());
  for (const int k : {300, 700}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(k);
      CAPTURE(stage);
      float master = 0;
      const StepResult r = accumulate(accumulation_config(stage, k, accum), k, master);
      REQUIRE(r.applied);
      // grad_norm = |averaged gradient| = sum over ranks and micro-batches / (N k).
      CHECK(static_cast<float>(r.grad_norm * k) == sum(k));
      CHECK(master == doctest::Approx(-sum(k) / k).epsilon(1e-6));
    }
  }
}

}  // namespace

TEST_CASE("bf16 gradients of k micro-batches sum in fp32 by default, at every stage") {
  CHECK(300.0f * kX == 0.90179443359375f);  // the closed forms themselves
  CHECK(700.0f * kX == 2.10418701171875f);
  check_sums(std::nullopt, [](int k) { return k == 300 ? 0.90179443359375f : 2.10418701171875f; });
}

TEST_CASE("the fp32 sum holds on the host and nvme offload tiers (stages 2/3: the shard's accumulator)") {
  const int k = 300;
  for (const OffloadDevice tier : {OffloadDevice::cpu, OffloadDevice::nvme}) {
    for (int stage = 1; stage <= 3; ++stage) {
      CAPTURE(stage);
      CAPTURE(static_cast<int>(tier));
      EngineConfig c = accumulation_config(stage, k, std::nullopt, tier);
      // Each engine makes its own swap folder under nvme_path (offload/swap_folder.h).
      const std::filesystem::path dir = std::filesystem::temp_directory_path() / "zs-test-grad-accumulation";
      std::filesystem::create_directories(dir);
      if (tier == OffloadDevice::nvme) c.offload.optimizer.nvme_path = dir.string();
      float master = 0;
      const StepResult r = accumulate(c, k, master);
      CHECK(static_cast<float>(r.grad_norm * k) == 0.90179443359375f);
      CHECK(master == doctest::Approx(-kX).epsilon(1e-6));
    }
  }
}

TEST_CASE("data_types.grad_accum_dtype bf16 opts into the bf16 sum, which sticks at 1.0") {
  check_sums(DType::bf16, [](int) { return 1.0f; });
}

TEST_CASE("the fp32 accumulator is in the ledger, equal to the estimate, for odd unit sizes") {
  const int rank = world().rank();
  for (const std::int64_t numel : {0, 1, 7, 57, 10001}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (const bool opt_in : {false, true}) {
        CAPTURE(numel);
        CAPTURE(stage);
        CAPTURE(opt_in);
        const EngineConfig c = accumulation_config(stage, 2, opt_in ? std::optional(DType::bf16) : std::nullopt);
        Engine e(c, world());
        const ParamId p = e.add_parameter(e.add_unit("u"), "p", {numel});
        e.finalize();
        const UnitInfo& info = e.layout().unit(0);
        const std::uint64_t full = info.padded, shard = info.shard;
        const MemoryLedger& l = e.ledger();
        if (opt_in) {
          // Today's layout: one bf16 gradient buffer, no accumulator.
          CHECK(l.current(MemCategory::grad_accumulator) == 0);
          CHECK(l.current(MemCategory::gradients) == 2 * (stage < 2 ? full : shard));
        } else {
          // Stages 0/1: the loop's bf16 buffer and the fp32 accumulator, both
          // full; 2/3: the fp32 shard only (the bf16 buffers are leased).
          CHECK(l.current(MemCategory::grad_accumulator) == 4 * (stage < 2 ? full : shard));
          CHECK(l.current(MemCategory::gradients) == (stage < 2 ? 2 * full : 0));
        }
        const MemoryEstimate est = estimate_memory(e.layout(), c, rank);
        for (int cat = 0; cat < static_cast<int>(MemCategory::count); ++cat) {
          CAPTURE(cat);
          CHECK(est.after_finalize.current(static_cast<MemCategory>(cat)) == l.current(static_cast<MemCategory>(cat)));
          CHECK(est.after_finalize.padding(static_cast<MemCategory>(cat)) == l.padding(static_cast<MemCategory>(cat)));
        }
        CHECK(est.after_finalize.model_state_bytes() == l.model_state_bytes());
        CHECK(e.layout().param(p).numel == static_cast<std::size_t>(numel));
      }
    }
  }
}

TEST_CASE("grad_accum_dtype other than fp32 or the compute dtype is refused, naming the key") {
  EngineConfig c = accumulation_config(2, 1, DType::f16);  // bf16 compute, fp16 sum
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("data_types.grad_accum_dtype"), ConfigError);
  CHECK_THROWS_WITH_AS(Engine(c, world()), doctest::Contains("data_types.grad_accum_dtype"), ConfigError);
  c.compute_dtype = DType::f32;
  c.grad_accum_dtype = DType::bf16;  // fp32 training
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("data_types.grad_accum_dtype"), ConfigError);
}
