// zs_plan's report (tools/plan/plan_report.h) and the published formulas
// it prints (runtime/plan/zero_formulas.h): the ZeRO paper's stage ratios hold
// exactly for the estimate when Psi is divisible by N, DeepSpeed's
// estimators give their documented figures, and the report of a small model
// shows its ledger figures, padding and formulas.
#include <cstdint>
#include <string>

#include <doctest/doctest.h>

#include "tools/plan/plan_report.h"
#include "tools/plan/transformer_model.h"
#include "core/error.h"
#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/zero_formulas.h"

using namespace zeroshard;

namespace {

EngineConfig config(int stage, DType dt) {
  EngineConfig c;
  c.zero.stage = stage;
  c.compute_dtype = dt;
  c.optimizer.kind = OptimizerKind::adam;
  return c;
}

// The line of `text` that contains `label` ("" if none).
std::string line_with(const std::string& text, const std::string& label) {
  const std::size_t at = text.find(label);
  if (at == std::string::npos) return "";
  const std::size_t begin = text.rfind('\n', at) + 1, end = text.find('\n', at);
  return text.substr(begin, end - begin);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST_CASE("the estimate equals the ZeRO paper's formulas when Psi is divisible by N") {
  // Units of 16 x 840 elements: divisible by 16 N for every N in 1-8, so no padding.
  const ModelDescription m = ModelDescription::generated(6 * 16 * 840, 6);
  const std::uint64_t psi = m.parameter_count();
  for (int n = 1; n <= 8; ++n) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      const bool mixed = dt != DType::f32;
      std::uint64_t by_stage[4] = {};
      for (int stage = 0; stage <= 3; ++stage) {
        CAPTURE(n);
        CAPTURE(stage);
        CAPTURE(dtype_name(dt));
        // The paper's 16-bit gradients: grad_accum_dtype the compute dtype.
        EngineConfig paper_config = config(stage, dt);
        paper_config.grad_accum_dtype = dt;
        const MemoryEstimate e = estimate_memory(m, paper_config, n, n - 1);
        const ZeroPaperBytes paper = zero_paper_bytes(stage, n, mixed ? 2.0 : 4.0, mixed ? 12.0 : 8.0);
        CHECK(e.after_finalize.model_state_padding() == 0);
        // bytes x N = (per-parameter bytes x N) x Psi, in integers.
        const auto per_n = static_cast<std::uint64_t>(paper.total() * n + 0.5);
        CHECK(e.after_finalize.model_state_bytes() * static_cast<std::uint64_t>(n) == per_n * psi);
        by_stage[stage] = e.after_finalize.model_state_bytes();
        // The default fp32 accumulator adds 4 Psi at stages 0/1 (beside the
        // 16-bit buffer) and 2 Psi / N at stages 2/3 (a 4-byte shard for a 2-byte one).
        const MemoryEstimate d = estimate_memory(m, config(stage, dt), n, n - 1);
        const std::uint64_t extra = !mixed ? 0 : stage < 2 ? 4 * psi * static_cast<std::uint64_t>(n) : 2 * psi;
        CHECK(d.after_finalize.model_state_bytes() * static_cast<std::uint64_t>(n) == per_n * psi + extra);
      }
      // The paper's ratios: stage 0 is (2+2+K) / (2+2+K/N) times stage 1, and so on.
      const std::uint64_t k = mixed ? 12 : 8, e = mixed ? 2 : 4, nn = static_cast<std::uint64_t>(n);
      CHECK(by_stage[0] * (e * 2 * nn + k) == by_stage[1] * (e * 2 + k) * nn);
      CHECK(by_stage[1] * (e * nn + e + k) == by_stage[2] * (e * 2 * nn + k));
      CHECK(by_stage[2] * (2 * e + k) == by_stage[3] * (e * nn + e + k));
    }
  }
}

TEST_CASE("DeepSpeed's estimators as DeepSpeed computes them") {
  // 1e9 parameters on 8 GPUs of one node.
  const DeepSpeedEstimate z2 = deepspeed_zero2_estimate(1'000'000'000, 8, false);
  CHECK(z2.gpu == 4'000'000'000ULL + 2'000'000'000ULL);
  CHECK(z2.cpu == 48'000'000'000ULL);
  const DeepSpeedEstimate z2o = deepspeed_zero2_estimate(1'000'000'000, 8, true);
  CHECK(z2o.gpu == 2'000'000'000ULL);
  CHECK(z2o.cpu == 48'000'000'000ULL);  // max(4 x 8, 16) x 1.5
  const DeepSpeedEstimate z3 = deepspeed_zero3_estimate(1'000'000'000, 100'000'000, 8, false, false);
  CHECK(z3.gpu == 400'000'000ULL + 2'250'000'000ULL);
  CHECK(z3.cpu == 4'800'000'000ULL);  // largest layer x 4 x 8 x 1.5 (zero_init)
  const DeepSpeedEstimate z3o = deepspeed_zero3_estimate(1'000'000'000, 100'000'000, 8, true, true);
  CHECK(z3o.gpu == 400'000'000ULL);
  CHECK(z3o.cpu == 27'000'000'000ULL);  // 18 x 1.5
  const DeepSpeedEstimate z3p = deepspeed_zero3_estimate(1'000'000'000, 100'000'000, 8, true, false);
  CHECK(z3p.gpu == 400'000'000ULL + 250'000'000ULL);
  CHECK(z3p.cpu == 24'000'000'000ULL);
}

TEST_CASE("the largest rank without laying out every rank") {
  // Every rank holds the same bytes; the last rank's shards hold the tail
  // padding. The closed form agrees with asking every rank.
  for (int world : {1, 2, 3, 4, 7}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType dt : {DType::f32, DType::bf16}) {
        const ModelDescription m = ModelDescription::generated(10001, 3);
        const EngineConfig c = config(stage, dt);
        const FlatLayout layout = m.layout(world);
        const std::uint64_t first = estimate_memory(layout, c, 0).after_finalize.current_total();
        for (int r = 1; r < world; ++r) {
          CHECK(estimate_memory(layout, c, r).after_finalize.current_total() == first);
        }
        CHECK(tools::largest_rank(m, c, world) == world - 1);
      }
    }
  }
}

TEST_CASE("the report of a small model") {
  // 1000 parameters in 4 units of 250 at 2 ranks, stage 3, fp32 AdamW:
  // each unit padded to 256, shards of 128; rank 1 holds 122 + 6 padding.
  const ModelDescription m = ModelDescription::generated(1000, 4);
  EngineConfig c;
  c.zero.stage = 3;
  CHECK(tools::largest_rank(m, c, 2) == 1);  // equal shards: the highest rank, which holds the padding
  const std::string text = tools::plan_report(m, "small", c, 2, 1);
  CAPTURE(text);
  CHECK(text.find("model small: 1000 parameters in 4 units (largest unit 250 elements, 256 padded)") !=
        std::string::npos);
  CHECK(text.find("rank 1 of 2") != std::string::npos);
  // 4 x 128 elements x (4 + 4 + 8) bytes; 4 x 6 padding elements x 16 bytes.
  CHECK(ends_with(line_with(text, "zeroshard (ledger estimate, all tiers)"), " 8192 (8.00 KiB)"));
  CHECK(ends_with(line_with(text, "    of which padding"), " 384 (384 B)"));
  CHECK(ends_with(line_with(text, "ZeRO paper: 2+2+4 = 8 B/param"), " 8000 (7.81 KiB)"));
  // DeepSpeed: 4 x 250 (largest layer) + 18 x 1000 / 2 on the GPU; 250 x 4 x 2 x 1.5 on the host.
  CHECK(ends_with(line_with(text, "estimate_zero3_model_states_mem_needs GPU"), " 10000 (9.77 KiB)"));
  CHECK(ends_with(line_with(text, "estimate_zero3_model_states_mem_needs CPU"), " 3000 (2.93 KiB)"));
  CHECK(text.find("parameters             2.00 KiB          0 B          0 B         96 B") != std::string::npos);
  CHECK(text.find("the largest unit's full buffer is 1024 bytes") != std::string::npos);
  CHECK(text.find("24 padding elements in all, 384 bytes of them in this rank's arrays") != std::string::npos);
}

TEST_CASE("the report of a parameter-server job names each rank's role and its bytes") {
  // The small model at 3 ranks, one of them a server: 2 workers at stage 3
  // hold parameter and gradient shards of 128 elements per unit (8 B
  // each); the server holds both workers' stores (16 B each, AdamW).
  const ModelDescription m = ModelDescription::generated(1000, 4);
  EngineConfig c;
  c.zero.stage = 3;
  c.parameter_server.servers = 1;
  CHECK(tools::largest_rank(m, c, 3) == 2);  // the server
  std::string text = tools::plan_report(m, "small", c, 3, 2);
  CAPTURE(text);
  CHECK(text.find("ranks 0-1 train, rank 2 serve") != std::string::npos);
  CHECK(text.find("this rank is server 0, holding workers 0, 1") != std::string::npos);
  CHECK(ends_with(line_with(text, "worker (last of 2): parameters and gradients"), " 4096 (4.00 KiB)"));
  CHECK(ends_with(line_with(text, "server 0: 2 workers' fp32 shards and optimizer states"), " 16384 (16.00 KiB)"));
  CHECK(ends_with(line_with(text, "all-reduce engine at 2 ranks, same config (last rank)"), " 8192 (8.00 KiB)"));
  CHECK(text.find("rank 2 of 3") != std::string::npos);
  CHECK(text.find("optimizer states       8.00 KiB") != std::string::npos);
  CHECK(text.find("ZeRO paper") == std::string::npos);  // the formulas are for ranks that all train
  text = tools::plan_report(m, "small", c, 3, 0);
  CHECK(text.find("this rank is worker 0 of 2") != std::string::npos);
  CHECK(text.find("optimizer states            0 B") != std::string::npos);
  // More servers than workers: the last holds nothing, and says so.
  c.parameter_server.servers = 2;
  text = tools::plan_report(m, "small", c, 3, 2);
  CHECK(text.find("this rank is server 1, holding no worker: with more servers than workers (2 > 1)") !=
        std::string::npos);
  CHECK(ends_with(line_with(text, "server 1: 0 workers' fp32 shards and optimizer states"), " 0 (0 B)"));
  CHECK(text.find("between hosts") == std::string::npos);
  CHECK(tools::plan_report(m, "small", c, 3, 2, 1).find("between hosts: not modelled") != std::string::npos);
  c.parameter_server.servers = 3;
  CHECK_THROWS_WITH_AS(tools::plan_report(m, "small", c, 3, 0), doctest::Contains("leaves no worker among the job's 3 ranks"),
                       ConfigError);
}

TEST_CASE("the report shows the fp32 gradient accumulator of bf16 training") {
  // 1000 parameters in 4 units of 250 at 2 ranks, bf16 AdamW: units padded
  // to 256, shards of 128. Stage 1: the bf16 buffer (4 x 256 x 2 B) and the
  // fp32 accumulator (4 x 256 x 4 B), both full; stage 2: the accumulator's
  // shards only (4 x 128 x 4 B); with grad_accum_dtype bf16 none.
  const ModelDescription m = ModelDescription::generated(1000, 4);
  EngineConfig c;
  c.compute_dtype = DType::bf16;
  c.zero.stage = 1;
  std::string text = tools::plan_report(m, "small", c, 2, 1);
  CAPTURE(text);
  CHECK(text.find("gradients              2.00 KiB") != std::string::npos);
  CHECK(text.find("grad accumulator       4.00 KiB") != std::string::npos);
  CHECK(text.find("accumulator of mixed precision (data_types.grad_accum_dtype, DeepSpeed #1800) holds 4096 bytes "
                  "on this rank: 4 B per padded element beside the 2-byte gradient buffer") != std::string::npos);
  c.zero.stage = 2;
  text = tools::plan_report(m, "small", c, 2, 1);
  CHECK(text.find("gradients                   0 B") != std::string::npos);
  CHECK(text.find("grad accumulator       2.00 KiB") != std::string::npos);
  CHECK(text.find("holds 2048 bytes on this rank: 4 B per shard element in place of a 2-byte gradient shard") !=
        std::string::npos);
  c.grad_accum_dtype = DType::bf16;
  text = tools::plan_report(m, "small", c, 2, 1);
  CHECK(text.find("grad accumulator            0 B") != std::string::npos);
  CHECK(text.find("gradient accumulator of mixed precision") == std::string::npos);
}

TEST_CASE("--transformer: the model and its activations per sample in closed form") {
  // s = 16, h = 64, a = 4, L = 2, V = 256. Korthikanti et al. 2022: a layer
  // keeps s h (34 + 5 a s / h) = 1024 x 39 bytes, 2 s h under full
  // recomputation; the logits s V, 12 bytes each with the loss.
  const std::string spec = "kind=gpt,layers=2,hidden=64,heads=4,seq=16,vocab=256";
  const tools::TransformerModel plain = tools::transformer_model(spec, false);
  CHECK(plain.model.parameter_count() == plain.shape.parameter_count());
  CHECK(plain.model.units.size() == 4);  // embeddings, two layers, final norm
  CHECK(plain.activation_bytes_per_sample == 2 * 39936 + 16 * 256 * 12);
  const tools::TransformerModel ckpt = tools::transformer_model(spec, true);
  CHECK(ckpt.activation_bytes_per_sample == 2 * 2048 + 39936 + 16 * 256 * 12);
  CHECK(ckpt.describe().find("93184 bytes") != std::string::npos);
  CHECK_THROWS_WITH_AS(tools::transformer_model("kind=gpt,layers=2,hiden=64", false), doctest::Contains("hiden"),
                       ConfigError);
}
