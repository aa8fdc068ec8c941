// TransformerShape: see runtime/cluster_plan/transformer_shape.h.
#include "runtime/cluster_plan/transformer_shape.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

// [Note: transformer counts]
// Per block, with h = hidden, f = ffn, g = kv_heads x head dim (h without
// grouped-query attention):
//   gpt:   ln_1 (2h), c_attn [h + 2g, h] + bias, c_proj [h, h] + bias,
//          ln_2 (2h), c_fc [f, h] + bias, mlp c_proj [h, f] + bias;
//          outside the blocks wte [V, h], wpe [positions, h], ln_f (2h),
//          and an lm_head [V, h] unless tied;
//   llama: attention_norm (h), wq [h, h], wk and wv [g, h], wo [h, h],
//          ffn_norm (h), w1 and w3 [f, h], w2 [h, f]; outside
//          tok_embeddings [V, h], norm (h), output [V, h] unless tied.
// The matmul weights of a block are (2h + 2g) h + 2 f h for gpt and
// (2h + 2g) h + 3 f h for llama (12 h^2 for gpt with f = 4h, g = h), and
// the output head adds V h whether tied or not (the logits are computed).
// Training runs each weight three times (forward, and the two products of
// the backward): 6 FLOPs per weight and token. The attention core is
// Q K^T and its product with V: 2 x 2 s h FLOPs per token and layer
// forward, 12 L s h for training.

namespace {

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// One matrix product of a layer, in the order the forward runs them: its
// input and output widths.
struct LayerProduct {
  double in, out;
};

// gpt: c_attn, c_proj, c_fc, mlp c_proj; llama: wq, wk, wv, wo, w1, w3,
// w2 (torchtitan's Llama computes w2(silu(w1(x)) * w3(x))).
std::vector<LayerProduct> layer_products(const TransformerShape& t) {
  const auto h = static_cast<double>(t.hidden), f = static_cast<double>(t.ffn),
             g = static_cast<double>(t.kv_heads) * (h / static_cast<double>(t.heads));
  if (t.kind == TransformerKind::gpt) return {{h, h + 2 * g}, {h, h}, {h, f}, {f, h}};
  return {{h, h}, {h, g}, {h, g}, {h, h}, {h, f}, {h, f}, {f, h}};
}

// Per-operator checkpointing keeps the outputs of the products whose
// running count is odd; the count runs on over the steps, so a layer with
// an odd number of products keeps the other set on the next step. Returns
// value(p) summed over the products kept {on the step that keeps the
// first product, on the next}.
template <class Value>
std::pair<double, double> op_kept_sums(const std::vector<LayerProduct>& products, Value value) {
  double odd = 0, even = 0;
  for (std::size_t i = 0; i < products.size(); ++i) (i % 2 == 0 ? odd : even) += value(products[i]);
  return products.size() % 2 ? std::make_pair(odd, even) : std::make_pair(odd, odd);
}

}  // namespace

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::op: return "op";
    case Recompute::full: return "full";
  }
  return "?";
}

TransformerShape TransformerShape::resolved() const {
  TransformerShape t = *this;
  if (t.kv_heads == 0) t.kv_heads = t.heads;
  if (t.ffn == 0 && t.kind == TransformerKind::gpt) t.ffn = 4 * t.hidden;
  if (t.kind == TransformerKind::gpt && t.positions == 0) t.positions = t.seq;
  if (t.kind == TransformerKind::llama) t.positions = 0;
  if (t.tied < 0) t.tied = t.kind == TransformerKind::gpt ? 1 : 0;
  return t;
}

void TransformerShape::validate(const std::string& source) const {
  const auto need = [&](std::int64_t v, const char* key, bool zero_ok) {
    if (v < 0 || (v == 0 && !zero_ok) || v > (std::int64_t{1} << 40)) {
      throw ConfigError(fmt::format("{}: transformer {} must be {}, got {}", source, key,
                                    zero_ok ? "0 (the default) or a positive integer" : "a positive integer", v));
    }
  };
  need(layers, "layers", false);
  need(hidden, "hidden", false);
  need(heads, "heads", false);
  need(seq, "seq", false);
  need(vocab, "vocab", false);
  need(kv_heads, "kv_heads", true);
  need(ffn, "ffn", true);
  need(positions, "positions", true);
  if (hidden % heads != 0) {
    throw ConfigError(fmt::format("{}: transformer hidden {} is not a multiple of heads {}", source, hidden, heads));
  }
  const TransformerShape t = resolved();
  if (t.kv_heads > t.heads || t.heads % t.kv_heads != 0) {
    throw ConfigError(fmt::format("{}: transformer heads {} is not a multiple of kv_heads {}", source, heads, t.kv_heads));
  }
  if (t.kind == TransformerKind::llama && ffn == 0) {
    throw ConfigError(fmt::format("{}: transformer ffn is required for kind llama (e.g. 14336 for Llama-3-8B)", source));
  }
  if (t.kind == TransformerKind::gpt && t.positions < t.seq) {
    throw ConfigError(fmt::format("{}: transformer positions {} is fewer than seq {}", source, t.positions, t.seq));
  }
}

std::uint64_t TransformerShape::parameter_count() const {
  const TransformerShape t = resolved();
  const std::uint64_t h = u(t.hidden), f = u(t.ffn), g = u(t.kv_heads) * (h / u(t.heads)), V = u(t.vocab);
  const std::uint64_t head = t.tied == 1 ? 0 : V * h;
  if (t.kind == TransformerKind::gpt) {
    const std::uint64_t block = 4 * h + (h + 2 * g) * h + (h + 2 * g) + h * h + h + f * h + f + h * f + h;
    return V * h + u(t.positions) * h + u(t.layers) * block + 2 * h + head;
  }
  const std::uint64_t block = 2 * h + 2 * h * h + 2 * g * h + 3 * f * h;
  return V * h + u(t.layers) * block + h + head;
}

std::uint64_t TransformerShape::matmul_weight_count() const {
  const TransformerShape t = resolved();
  const std::uint64_t h = u(t.hidden), f = u(t.ffn), g = u(t.kv_heads) * (h / u(t.heads));
  const std::uint64_t mlp = (t.kind == TransformerKind::gpt ? 2 : 3) * f * h;
  return u(t.layers) * ((2 * h + 2 * g) * h + mlp) + u(t.vocab) * h;
}

double TransformerShape::model_flops_per_token() const {
  const auto L = static_cast<double>(layers), s = static_cast<double>(seq), h = static_cast<double>(hidden);
  return 6.0 * static_cast<double>(matmul_weight_count()) + 12.0 * L * s * h;
}

double TransformerShape::hardware_flops_per_token(Recompute r) const {
  const auto L = static_cast<double>(layers), s = static_cast<double>(seq), h = static_cast<double>(hidden);
  const double layer_weights = static_cast<double>(matmul_weight_count() - u(vocab) * u(hidden));
  switch (r) {
    case Recompute::none: return model_flops_per_token();
    case Recompute::selective: return model_flops_per_token() + 4.0 * L * s * h;
    case Recompute::op: {
      // Recomputed: the products not kept, the mean over the two steps.
      const std::vector<LayerProduct> products = layer_products(resolved());
      double all = 0;
      for (const LayerProduct& p : products) all += p.in * p.out;
      const auto [first, next] = op_kept_sums(products, [](const LayerProduct& p) { return p.in * p.out; });
      return model_flops_per_token() + 2.0 * L * (all - (first + next) / 2);
    }
    case Recompute::full: return model_flops_per_token() + 2.0 * layer_weights + 4.0 * L * s * h;
  }
  return model_flops_per_token();
}

// [Note: activation memory]
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", section 4) count what one GPT layer keeps for the
// backward pass, in bytes, for s tokens, b sequences, h wide, a heads,
// 16-bit activations and 1-byte dropout masks: 34 s b h + 5 a s^2 b. Of
// the 34: the attention keeps its input (2), Q and K (4), V (2), the
// output projection's input (2) and a dropout mask (1); the MLP its input
// (2), the GELU's input and output (8 + 8 with f = 4h) and a dropout mask
// (1); the two LayerNorms their inputs (4); the 5 a s^2 b is the softmax
// output (2), its dropout mask (1) and output (2). Tensor parallelism
// over t ranks splits everything but the inputs, masks and norms (10 of
// the 34) and the scores: 10 + 24 / t + 5 a s / (h t); sequence
// parallelism splits those too: (34 + 5 a s / h) / t. Selective recompute
// drops the scores term; full recompute keeps only the layer's input,
// 2 s b h (/ t with sequence parallelism).
// Generalized here (our derivation, the same terms): grouped-query
// attention keeps K and V at g / h of the width (Q, K, V, projection
// input: 4 + 4 g / h split), the MLP's split part is 4 f / h for GELU and
// 8 f / h for SwiGLU (gate, up, SiLU output, product); llama has no
// dropout (no masks; the scores term keeps the softmax output only, 2). A
// fused (flash) attention keeps no scores, only the fp32 log-sum-exp per
// head and token (4 a s b, split over t).
// Per-operator checkpointing (Recompute::op, torchtitan's "selective" mode
// with option "op", torchtitan/models/llama/parallelize_llama.py at the
// commits of its 2024 benchmarks): the layer's input is kept (2 s b h, / t
// with sequence parallelism), and in the layer only the outputs of the
// fused attention and of every other matrix product (a count that runs on
// across layers' calls: the 1st, 3rd, ... product, torch.mm in its save
// list) are kept; the norms, activations and the other products are
// recomputed. For llama the products are wq, wk, wv, wo, w1, w3, w2: 7, so
// the kept set alternates between steps ({wq, wv, w1, w2}: 2h + g + f,
// and {wk, wo, w3}: g + h + f); the larger is the peak. gpt keeps c_attn
// and c_fc (h + 2g + f) every step. All kept outputs are split over t.

double TransformerShape::layer_activation_bytes(std::int64_t micro_batch, int tp, bool sequence_parallel,
                                                Recompute r, bool flash_attention) const {
  const TransformerShape t = resolved();
  const auto s = static_cast<double>(t.seq), b = static_cast<double>(micro_batch), h = static_cast<double>(t.hidden),
             a = static_cast<double>(t.heads), f = static_cast<double>(t.ffn), T = static_cast<double>(tp);
  const double g = static_cast<double>(t.kv_heads) * (h / a);
  const double sbh = s * b * h;
  if (r == Recompute::full) return 2.0 * sbh / (sequence_parallel ? T : 1.0);
  if (r == Recompute::op) {
    // The layer's input (2 bytes a value, split with sequence parallelism),
    // the attention's output and the kept products' outputs (split), the
    // larger of the two alternating sets; the fused attention's log-sum-exp.
    const auto [first, next] = op_kept_sums(layer_products(t), [](const LayerProduct& p) { return p.out; });
    const double kept = 2.0 * s * b * (h + std::max(first, next)) / T;
    return 2.0 * sbh / (sequence_parallel ? T : 1.0) + kept + (flash_attention ? 4.0 * a * s * b / T : 0.0);
  }
  const bool gpt = t.kind == TransformerKind::gpt;
  const double replicated = gpt ? 10.0 : 8.0;
  const double split = 4.0 + 4.0 * g / h + (gpt ? 4.0 : 8.0) * f / h;
  double scores = 0;  // bytes
  if (flash_attention) {
    scores = 4.0 * a * s * b / T;
  } else if (r == Recompute::none) {
    scores = (gpt ? 5.0 : 2.0) * a * s * s * b / T;
  }
  return sbh * ((sequence_parallel ? replicated / T : replicated) + split / T) + scores;
}

double TransformerShape::logits(std::int64_t micro_batch, int tp) const {
  return static_cast<double>(seq) * static_cast<double>(micro_batch) * static_cast<double>(vocab) /
         static_cast<double>(tp);
}

ModelDescription TransformerShape::rank_model(int tp, int pp, int pp_rank, const std::string& source) const {
  validate(source);
  const TransformerShape t = resolved();
  const std::int64_t T = tp, h = t.hidden, hd = t.hidden / t.heads, g = t.kv_heads * hd, f = t.ffn;
  const auto divides = [&](std::int64_t n, std::int64_t d, const char* what, const char* by) {
    if (d < 1 || n % d != 0) {
      throw ConfigError(fmt::format("{}: {} {} is not a multiple of {} {}", source, what, n, by, d));
    }
  };
  divides(t.heads, T, "heads", "tensor-parallel size");
  divides(t.kv_heads, T, "kv_heads", "tensor-parallel size");
  divides(f, T, "ffn", "tensor-parallel size");
  divides(t.vocab, T, "vocab", "tensor-parallel size");
  divides(t.layers, pp, "layers", "pipeline-parallel size");
  if (pp_rank < 0 || pp_rank >= pp) {
    throw ConfigError(fmt::format("{}: pipeline stage {} is outside [0, {})", source, pp_rank, pp));
  }
  const bool gpt = t.kind == TransformerKind::gpt, first = pp_rank == 0, last = pp_rank == pp - 1;
  const auto p = [](std::string name, std::vector<std::int64_t> shape) {
    return ParamDescription{.name = std::move(name), .shape = std::move(shape), .group = 0};
  };
  ModelDescription m;
  if (first) {
    UnitDescription e{.name = "embed", .params = {p(gpt ? "wte.weight" : "tok_embeddings.weight", {t.vocab / T, h})}};
    if (gpt) e.params.push_back(p("wpe.weight", {t.positions, h}));
    m.units.push_back(std::move(e));
  }
  const std::int64_t per = t.layers / pp;
  for (std::int64_t l = pp_rank * per; l < (pp_rank + 1) * per; ++l) {
    const std::string n = fmt::format("{}.{}", gpt ? "h" : "layers", l);
    UnitDescription unit{.name = n, .params = {}};
    auto& ps = unit.params;
    if (gpt) {
      ps = {p(n + ".ln_1.weight", {h}), p(n + ".ln_1.bias", {h}),
            p(n + ".attn.c_attn.weight", {(h + 2 * g) / T, h}), p(n + ".attn.c_attn.bias", {(h + 2 * g) / T}),
            p(n + ".attn.c_proj.weight", {h, h / T}), p(n + ".attn.c_proj.bias", {h}),
            p(n + ".ln_2.weight", {h}), p(n + ".ln_2.bias", {h}),
            p(n + ".mlp.c_fc.weight", {f / T, h}), p(n + ".mlp.c_fc.bias", {f / T}),
            p(n + ".mlp.c_proj.weight", {h, f / T}), p(n + ".mlp.c_proj.bias", {h})};
    } else {
      ps = {p(n + ".attention_norm.weight", {h}), p(n + ".attention.wq.weight", {h / T, h}),
            p(n + ".attention.wk.weight", {g / T, h}), p(n + ".attention.wv.weight", {g / T, h}),
            p(n + ".attention.wo.weight", {h, h / T}), p(n + ".ffn_norm.weight", {h}),
            p(n + ".feed_forward.w1.weight", {f / T, h}), p(n + ".feed_forward.w3.weight", {f / T, h}),
            p(n + ".feed_forward.w2.weight", {h, f / T})};
    }
    m.units.push_back(std::move(unit));
  }
  if (last) {
    UnitDescription out{.name = gpt ? "ln_f" : "norm", .params = {}};
    if (gpt) {
      out.params = {p("ln_f.weight", {h}), p("ln_f.bias", {h})};
    } else {
      out.params = {p("norm.weight", {h})};
    }
    // An untied head; a tied one is the embedding's, which the last stage
    // holds a copy of when it is not the first (Megatron-LM's tied copy).
    if (t.tied == 0 || !first) out.params.push_back(p(gpt ? "lm_head.weight" : "output.weight", {t.vocab / T, h}));
    m.units.push_back(std::move(out));
  }
  return m;
}

namespace {

const std::set<std::string>& shape_keys() {
  static const std::set<std::string> keys = {"kind", "layers", "hidden", "heads", "kv_heads", "seq",
                                             "vocab", "ffn", "positions", "tied"};
  return keys;
}

// Sets `key` of t from its text form (every value but kind and tied a
// non-negative integer).
void set_key(TransformerShape& t, const std::string& key, const std::string& value, const std::string& source) {
  if (key == "kind") {
    if (value != "gpt" && value != "llama") {
      throw ConfigError(fmt::format("{}: transformer kind must be gpt or llama, got \"{}\"", source, value));
    }
    t.kind = value == "gpt" ? TransformerKind::gpt : TransformerKind::llama;
    return;
  }
  std::int64_t v = -1;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < 0) {
    throw ConfigError(fmt::format("{}: transformer {} must be a non-negative integer, got \"{}\"", source, key, value));
  }
  if (key == "tied") {
    if (v > 1) throw ConfigError(fmt::format("{}: transformer tied must be 0 or 1, got {}", source, v));
    t.tied = static_cast<int>(v);
    return;
  }
  std::int64_t* field = key == "layers"     ? &t.layers
                        : key == "hidden"   ? &t.hidden
                        : key == "heads"    ? &t.heads
                        : key == "kv_heads" ? &t.kv_heads
                        : key == "seq"      ? &t.seq
                        : key == "vocab"    ? &t.vocab
                        : key == "ffn"      ? &t.ffn
                                            : &t.positions;
  *field = v;
}

TransformerShape from_pairs(const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& source) {
  TransformerShape t;
  std::set<std::string> seen;
  for (const auto& [key, value] : pairs) {
    if (shape_keys().count(key) == 0) {
      throw ConfigError(fmt::format("{}: unknown transformer key \"{}\" (known: {})", source, key,
                                    fmt::join(shape_keys(), ", ")));
    }
    if (!seen.insert(key).second) throw ConfigError(fmt::format("{}: transformer key \"{}\" given twice", source, key));
    set_key(t, key, value, source);
  }
  for (const char* key : {"layers", "hidden", "heads", "seq", "vocab"}) {
    if (seen.count(key) == 0) throw ConfigError(fmt::format("{}: transformer key \"{}\" is missing", source, key));
  }
  t.validate(source);
  return t;
}

}  // namespace

TransformerShape TransformerShape::parse(std::string_view text, const std::string& source) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw ConfigError(fmt::format("{}: \"{}\" is not key=value (e.g. layers=12,hidden=768,heads=12,seq=1024,"
                                    "vocab=50257)",
                                    source, item));
    }
    pairs.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    at = comma + 1;
  }
  return from_pairs(pairs, source);
}

TransformerShape TransformerShape::from_json(std::string_view json, const std::string& source) {
  const nlohmann::json doc = parse_config_text(std::string(json), source);
  if (!doc.is_object()) throw ConfigError(fmt::format("{}: a transformer description is a JSON object", source));
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [key, value] : doc.items()) {
    if (key == "kind" && value.is_string()) {
      pairs.emplace_back(key, value.get<std::string>());
    } else if (key == "tied" && value.is_boolean()) {
      pairs.emplace_back(key, value.get<bool>() ? "1" : "0");
    } else if (key != "kind" && key != "tied" && value.is_number_integer()) {
      pairs.emplace_back(key, std::to_string(value.get<std::int64_t>()));
    } else {
      throw ConfigError(fmt::format("{}: transformer \"{}\" must be {}, got {}", source, key,
                                    key == "kind" ? "a string" : key == "tied" ? "true or false" : "an integer",
                                    brief(value)));
    }
  }
  return from_pairs(pairs, source);
}

}  // namespace zeroshard
