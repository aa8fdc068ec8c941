// TransformerShape (runtime/cluster_plan/transformer_shape.h) against
// closed forms and published counts: the parameters of GPT-2 124M and
// 1558M (Hugging Face's gpt2, gpt2-xl), Llama-2-7B and Llama-3-8B; the
// FLOPs per token against Megatron-LM's formula (Narayanan et al. 2021,
// equation 3, with and without recomputation); the activation bytes of a
// layer against Korthikanti et al. 2022's expressions for GPT at tp 1 and
// 8, with and without sequence parallelism and recomputation, and our
// extension to Llama; the per-rank model on tp x pp meshes; bad
// descriptions named by key.
#include <cmath>
#include <string>

#include <doctest/doctest.h>

#include "core/error.h"
#include "runtime/cluster_plan/transformer_shape.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const char* kGpt2 = "layers=12,hidden=768,heads=12,seq=1024,vocab=50257";
const char* kGpt3 = "layers=96,hidden=12288,heads=96,seq=2048,vocab=51200";
const char* kLlama3_8b = "kind=llama,layers=32,hidden=4096,heads=32,kv_heads=8,seq=8192,vocab=128256,ffn=14336";

TransformerShape shape(const char* text) { return TransformerShape::parse(text, "test"); }

bool near(double got, double want) { return std::fabs(got - want) <= 1e-12 * std::fabs(want); }

}  // namespace

TEST_CASE("parameter counts of published models") {
  CHECK(shape(kGpt2).parameter_count() == 124'439'808);
  CHECK(shape("layers=48,hidden=1600,heads=25,seq=1024,vocab=50257").parameter_count() == 1'557'611'200);
  CHECK(shape("kind=llama,layers=32,hidden=4096,heads=32,seq=4096,vocab=32000,ffn=11008").parameter_count() ==
        6'738'415'616);
  CHECK(shape(kLlama3_8b).parameter_count() == 8'030'261'248);
  // Untying GPT-2 adds the head, V h.
  CHECK(shape("layers=12,hidden=768,heads=12,seq=1024,vocab=50257,tied=0").parameter_count() ==
        124'439'808 + 50257ull * 768);
}

TEST_CASE("FLOPs per token: Megatron-LM's formula, with and without full recomputation") {
  const TransformerShape t = shape(kGpt3);
  const double L = 96, h = 12288, s = 2048, V = 51200;
  // Per batch of B sequences: 72 B s L h^2 (1 + s / 6h + V / 12 h L); per token divide by B s.
  CHECK(near(t.model_flops_per_token(), 72 * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))));
  CHECK(near(t.hardware_flops_per_token(Recompute::none), t.model_flops_per_token()));
  CHECK(near(t.hardware_flops_per_token(Recompute::full), 96 * L * h * h * (1 + s / (6 * h) + V / (16 * h * L))));
  CHECK(near(t.hardware_flops_per_token(Recompute::selective), t.model_flops_per_token() + 4 * L * s * h));
  // 6N + 12 L s h with N the matmul weights (PaLM's MFU numerator).
  const TransformerShape l = shape(kLlama3_8b);
  const double w = 32.0 * ((2 * 4096 + 2 * 1024) * 4096.0 + 3 * 14336.0 * 4096) + 128256.0 * 4096;
  CHECK(l.matmul_weight_count() == static_cast<std::uint64_t>(w));
  CHECK(near(l.model_flops_per_token(), 6 * w + 12 * 32.0 * 8192 * 4096));
}

TEST_CASE("activation bytes of a layer: Korthikanti et al. 2022 for GPT") {
  const TransformerShape t = shape(kGpt3);
  const double s = 2048, h = 12288, a = 96, b = 1, sbh = s * b * h;
  for (int tp : {1, 8}) {
    CAPTURE(tp);
    const double T = tp;
    // Table 2 of the paper: no parallelism beyond tensor, with sequence parallelism, selective, full.
    CHECK(near(t.layer_activation_bytes(1, tp, false, Recompute::none, false),
               sbh * (10 + 24 / T + 5 * a * s / (h * T))));
    CHECK(near(t.layer_activation_bytes(1, tp, true, Recompute::none, false), sbh * (34 / T + 5 * a * s / (h * T))));
    CHECK(near(t.layer_activation_bytes(1, tp, true, Recompute::selective, false), sbh * 34 / T));
    CHECK(near(t.layer_activation_bytes(1, tp, false, Recompute::selective, false), sbh * (10 + 24 / T)));
    CHECK(near(t.layer_activation_bytes(1, tp, true, Recompute::full, false), 2 * sbh / T));
    CHECK(near(t.layer_activation_bytes(1, tp, false, Recompute::full, false), 2 * sbh));
    // A fused attention keeps the fp32 log-sum-exp instead of the scores.
    CHECK(near(t.layer_activation_bytes(1, tp, true, Recompute::none, true), sbh * 34 / T + 4 * a * s * b / T));
  }
  // Linear in the micro-batch.
  CHECK(near(t.layer_activation_bytes(4, 2, true, Recompute::none, false),
             4 * t.layer_activation_bytes(1, 2, true, Recompute::none, false)));
  CHECK(near(t.logits(2, 8), 2048.0 * 2 * 51200 / 8));
}

TEST_CASE("activation bytes of a Llama layer: grouped-query attention, SwiGLU, no dropout") {
  const TransformerShape t = shape(kLlama3_8b);
  const double s = 8192, h = 4096, a = 32, sbh = s * h;
  // replicated 8 (the two inputs, the two norms), split 4 + 4 g / h + 8 f / h = 4 + 1 + 28.
  CHECK(near(t.layer_activation_bytes(1, 1, false, Recompute::none, false), 41 * sbh + 2 * a * s * s));
  CHECK(near(t.layer_activation_bytes(1, 4, false, Recompute::none, false), (8 + 33.0 / 4) * sbh + 2 * a * s * s / 4));
  CHECK(near(t.layer_activation_bytes(1, 4, true, Recompute::none, true), 41.0 / 4 * sbh + 4 * a * s / 4));
}

TEST_CASE("per-operator checkpointing (torchtitan's op policy): every other product's output kept") {
  // Llama: wq h, wk g, wv g, wo h, w1 f, w3 f, w2 h; 7 products, so the
  // kept set alternates: {wq, wv, w1, w2} = 2h + g + f, {wk, wo, w3} = g + h + f.
  const TransformerShape l = shape(kLlama3_8b);
  const double s = 8192, h = 4096, g = 1024, f = 14336, a = 32, L = 32;
  for (int tp : {1, 4}) {
    CAPTURE(tp);
    const double T = tp;
    // The input, then the attention's output and the larger kept set, 2 bytes a value; the log-sum-exp.
    CHECK(near(l.layer_activation_bytes(2, tp, false, Recompute::op, true),
               2 * s * 2 * h + 2 * s * 2 * (h + 2 * h + g + f) / T + 4 * a * s * 2 / T));
    CHECK(near(l.layer_activation_bytes(2, tp, true, Recompute::op, false), 2 * s * 2 * (h + h + 2 * h + g + f) / T));
  }
  // 8B, micro-batch 1: (4h + g + f) x 2 bytes = 63,488 bytes a token and layer, 38% of selective's 41 h x 2.
  CHECK(near(l.layer_activation_bytes(1, 1, false, Recompute::op, false), 63488 * s));
  // FLOPs: the products not kept run again; over two steps every product once.
  const double all = h * h + 2 * h * g + h * h + 3 * h * f;
  CHECK(near(l.hardware_flops_per_token(Recompute::op), l.model_flops_per_token() + 2 * L * all / 2));
  // GPT: c_attn, c_proj, c_fc, c_proj: 4 products, c_attn (3h) and c_fc (4h) kept every step.
  const TransformerShape t = shape(kGpt3);
  const double gs = 2048, gh = 12288, ga = 96;
  CHECK(near(t.layer_activation_bytes(1, 1, false, Recompute::op, true),
             2 * gs * gh + 2 * gs * (gh + 3 * gh + 4 * gh) + 4 * ga * gs));
  CHECK(near(t.hardware_flops_per_token(Recompute::op), t.model_flops_per_token() + 2 * 96 * (gh * gh + 4 * gh * gh)));
}

TEST_CASE("the model one rank holds on a tp x pp mesh") {
  const TransformerShape gpt2 = shape(kGpt2);
  // One rank holds everything, the head tied to wte.
  CHECK(gpt2.rank_model(1, 1, 0, "test").parameter_count() == gpt2.parameter_count());
  CHECK(gpt2.rank_model(1, 1, 0, "test").units.size() == 14);  // embed, 12 blocks, ln_f
  // Pipeline stages: layers split evenly; the last stage holds a copy of the tied head.
  std::uint64_t total = 0;
  for (int r = 0; r < 3; ++r) total += gpt2.rank_model(1, 3, r, "test").parameter_count();
  CHECK(total == gpt2.parameter_count() + 50257ull * 768);
  CHECK(gpt2.rank_model(1, 3, 1, "test").units.size() == 4);
  // tp = 2: column-parallel weights and biases, the vocabulary and row-parallel weights halved.
  const double h = 768, f = 3072;
  const auto block = static_cast<std::uint64_t>(4 * h + (3 * h * h + 3 * h) / 2 + h * h / 2 + h + (f * h + f) / 2 +
                                                h * f / 2 + h);
  // 50257 does not split over 2: a padded vocabulary does (50304, Megatron-LM's padding to 128 x tp).
  const TransformerShape padded = shape("layers=12,hidden=768,heads=12,seq=1024,vocab=50304");
  CHECK(padded.rank_model(2, 1, 0, "test").parameter_count() == 50304ull / 2 * 768 + 1024 * 768 + 12 * block + 2 * 768);
  const ModelDescription one_layer = padded.rank_model(2, 12, 5, "test");
  REQUIRE(one_layer.units.size() == 1);
  CHECK(one_layer.parameter_count() == block);
  CHECK(one_layer.units[0].name == "h.5");
  // Llama: no biases; the untied head on the last stage.
  const TransformerShape l = shape(kLlama3_8b);
  std::uint64_t llama = 0;
  for (int r = 0; r < 4; ++r) llama += l.rank_model(1, 4, r, "test").parameter_count();
  CHECK(llama == l.parameter_count());
  CHECK(l.rank_model(8, 1, 0, "test").units.front().params.front().shape == std::vector<std::int64_t>{128256 / 8, 4096});
  // What does not divide is named.
  CHECK(error_message<ConfigError>([&] { gpt2.rank_model(5, 1, 0, "gpt2"); }).find("heads 12 is not a multiple of "
                                                                            "tensor-parallel size 5") != std::string::npos);
  CHECK(error_message<ConfigError>([&] { gpt2.rank_model(2, 1, 0, "gpt2"); }).find("vocab 50257") != std::string::npos);
  CHECK(error_message<ConfigError>([&] { l.rank_model(16, 1, 0, "l"); }).find("kv_heads 8") != std::string::npos);
  CHECK(error_message<ConfigError>([&] { gpt2.rank_model(1, 5, 0, "gpt2"); }).find("layers 12") != std::string::npos);
  CHECK(error_message<ConfigError>([&] { gpt2.rank_model(1, 2, 2, "gpt2"); }).find("stage 2") != std::string::npos);
}

TEST_CASE("bad descriptions are named by key") {
  const auto error = [](const std::string& text) { return error_message<ConfigError>([&] { shape(text.c_str()); }); };
  CHECK(error("layers=12,hidden=768,heads=12,seq=1024").find("\"vocab\" is missing") != std::string::npos);
  CHECK(error(std::string(kGpt2) + ",layer=3").find("unknown transformer key \"layer\"") != std::string::npos);
  CHECK(error(std::string(kGpt2) + ",layers=3").find("\"layers\" given twice") != std::string::npos);
  CHECK(error("layers=1x,hidden=768,heads=12,seq=1024,vocab=5").find("layers must be a non-negative integer") !=
        std::string::npos);
  CHECK(error("layers=0,hidden=768,heads=12,seq=1024,vocab=5").find("layers must be a positive integer") !=
        std::string::npos);
  CHECK(error("layers=2,hidden=770,heads=12,seq=1024,vocab=5").find("hidden 770 is not a multiple of heads 12") !=
        std::string::npos);
  CHECK(error("layers=2,hidden=768,heads=12,kv_heads=5,seq=1024,vocab=5").find("kv_heads 5") != std::string::npos);
  CHECK(error("kind=llama,layers=2,hidden=768,heads=12,seq=1024,vocab=5").find("ffn is required") !=
        std::string::npos);
  CHECK(error("kind=bert,layers=2,hidden=768,heads=12,seq=1024,vocab=5").find("gpt or llama") != std::string::npos);
  CHECK(error("layers=2,hidden=768,heads=12,seq=1024,vocab=5,positions=512").find("positions 512") !=
        std::string::npos);
  CHECK(error("layers 2,hidden=768").find("\"layers 2\" is not key=value") != std::string::npos);
  CHECK(error("layers=2,hidden=768,heads=12,seq=1024,vocab=5,tied=2").find("tied must be 0 or 1") !=
        std::string::npos);
}

TEST_CASE("the JSON form") {
  const TransformerShape t = TransformerShape::from_json(
      R"({"kind": "llama", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "seq": 8192,
          "vocab": 128256, "ffn": 14336, "tied": false})",
      "llama.json");
  CHECK(t.parameter_count() == 8'030'261'248);
  CHECK(error_message<ConfigError>([] { TransformerShape::from_json(R"({"layers": "32"})", "m.json"); })
            .find("m.json: transformer \"layers\" must be an integer") != std::string::npos);
  CHECK(error_message<ConfigError>([] { TransformerShape::from_json(R"({"layers": 2, "layers": 3})", "m.json"); })
            .find("m.json") != std::string::npos);
  CHECK(error_message<ConfigError>([] { TransformerShape::from_json("[1]", "m.json"); }).find("JSON object") !=
        std::string::npos);
}
