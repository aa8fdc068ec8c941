// The GPT of gpt_model.h: declaration, initialisation, forward and backward.
#include "examples/gpt/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "parallel/gelu.h"
#include "parallel/partition.h"

namespace zeroshard::examples {

namespace {

void check_shape(const GptShape& s, int tp) {
  auto fail = [&](const std::string& what) {
    throw ConfigError(fmt::format("gpt: {} (layers {}, heads {}, dim {}, context {}, vocab {}, tp {})", what,
                                  s.layers, s.heads, s.dim, s.context, s.vocab, tp));
  };
  if (s.layers < 1 || s.heads < 1 || s.dim < 1 || s.context < 1 || s.vocab < 1) fail("every size must be >= 1");
  if (s.dim % s.heads != 0) fail(fmt::format("heads {} must divide dim {}", s.heads, s.dim));
  if (s.heads % tp != 0) fail(fmt::format("tensor-parallel size {} must divide heads {}", tp, s.heads));
  if ((4 * s.dim) % tp != 0) fail(fmt::format("tensor-parallel size {} must divide 4 x dim = {}", tp, 4 * s.dim));
  if (s.vocab % tp != 0) fail(fmt::format("tensor-parallel size {} must divide vocab {}", tp, s.vocab));
}

std::size_t z(int v) { return static_cast<std::size_t>(v); }

// Adds n fp32 values into engine storage of dtype t.
void add_into(void* dst, DType t, const float* src, std::size_t n) {
  if (t == DType::f32) {
    float* d = static_cast<float*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] += src[i];
    return;
  }
  std::vector<float> tmp(n);
  kernels::cast(tmp.data(), DType::f32, dst, t, n);
  for (std::size_t i = 0; i < n; ++i) tmp[i] += src[i];
  kernels::cast(dst, t, tmp.data(), DType::f32, n);
}

}  // namespace

// One forward's activations of a block (tokens T = batch x seq).
struct Gpt::Block {
  std::vector<float> x, h1, mean1, rstd1, x2, h2, mean2, rstd2, f, g;
  parallel::AttentionSaved attn;
};

Gpt::Gpt(Engine& engine, const Mesh& mesh, GptShape shape)
    : engine_(engine),
      mesh_(mesh),
      shape_((check_shape(shape, mesh.tp_size()), shape)),
      wte_layer_(mesh.tp_group(), z(shape.vocab), z(shape.dim)),
      head_(mesh.tp_group(), z(shape.dim), z(shape.vocab), /*bias=*/false),
      loss_(mesh.tp_group(), z(shape.vocab)),
      norm_(z(shape.dim)),
      attn_(mesh.tp_group(), z(shape.dim), z(shape.heads)),
      fc_(mesh.tp_group(), z(shape.dim), 4 * z(shape.dim)),
      mlp_proj_(mesh.tp_group(), 4 * z(shape.dim), z(shape.dim)) {
  no_decay_ = engine.add_param_group("no_decay", {.weight_decay = 0.0f});
  const std::int64_t D = shape.dim, F = 4 * D, V = shape.vocab;
  const auto rep = TensorParallel::replicated();
  const parallel::Slice all{};
  embed_unit_ = engine.add_unit("embed");
  wte_ = declare(embed_unit_, "wte", {V, D}, TensorParallel::split(0), wte_layer_.vocab_slice(), false);
  wpe_ = declare(embed_unit_, "wpe", {shape.context, D}, rep, all, false);
  const std::size_t hd = z(shape.dim / shape.heads);
  const parallel::Slice heads = attn_.head_slice();
  const parallel::Slice qkv_rows{3 * hd * heads.begin, 3 * hd * heads.size};
  const parallel::Slice ctx_cols{hd * heads.begin, hd * heads.size};
  for (int i = 0; i < shape.layers; ++i) {
    const std::string p = fmt::format("h.{}.", i);
    const UnitId u = engine.add_unit(fmt::format("h.{}", i));
    block_units_.push_back(u);
    Ids ids{};
    ids.ln1_w = declare(u, p + "ln_1.weight", {D}, rep, all, false);
    ids.ln1_b = declare(u, p + "ln_1.bias", {D}, rep, all, false);
    ids.qkv_w = declare(u, p + "attn.c_attn.weight", {3 * D, D}, TensorParallel::split(0), qkv_rows, true);
    ids.qkv_b = declare(u, p + "attn.c_attn.bias", {3 * D}, TensorParallel::split(0), qkv_rows, false);
    ids.proj_w = declare(u, p + "attn.c_proj.weight", {D, D}, TensorParallel::split(1), ctx_cols, true);
    ids.proj_b = declare(u, p + "attn.c_proj.bias", {D}, rep, all, false);
    ids.ln2_w = declare(u, p + "ln_2.weight", {D}, rep, all, false);
    ids.ln2_b = declare(u, p + "ln_2.bias", {D}, rep, all, false);
    ids.fc_w = declare(u, p + "mlp.c_fc.weight", {F, D}, TensorParallel::split(0), fc_.out_slice(), true);
    ids.fc_b = declare(u, p + "mlp.c_fc.bias", {F}, TensorParallel::split(0), fc_.out_slice(), false);
    ids.mproj_w = declare(u, p + "mlp.c_proj.weight", {D, F}, TensorParallel::split(1), mlp_proj_.in_slice(), true);
    ids.mproj_b = declare(u, p + "mlp.c_proj.bias", {D}, rep, all, false);
    ids_.push_back(ids);
  }
  final_unit_ = engine.add_unit("ln_f");
  lnf_w_ = declare(final_unit_, "ln_f.weight", {D}, rep, all, false);
  lnf_b_ = declare(final_unit_, "ln_f.bias", {D}, rep, all, false);
}

ParamId Gpt::declare(UnitId unit, const std::string& name, std::vector<std::int64_t> full_shape, TensorParallel tp,
                     parallel::Slice slice, bool decay) {
  std::vector<std::int64_t> local = full_shape;
  if (!tp.is_replicated()) {
    local[z(tp.split_dim)] = static_cast<std::int64_t>(slice.size);
  } else {
    slice = parallel::Slice{0, static_cast<std::size_t>(full_shape.empty() ? 1 : full_shape[0])};
  }
  const ParamId id = engine_.add_parameter(unit, name, local, decay ? 0 : no_decay_, tp);
  params_.push_back(Param{name, id, std::move(full_shape), tp, unit, slice});
  return id;
}

const Gpt::Param& Gpt::find(const std::string& name) const {
  for (const Param& p : params_) {
    if (p.name == name) return p;
  }
  throw InvariantError(fmt::format("gpt: no parameter named \"{}\"", name));
}

std::vector<std::string> Gpt::parameter_names() const {
  std::vector<std::string> out;
  for (const Param& p : params_) out.push_back(p.name);
  return out;
}

std::vector<std::int64_t> Gpt::full_shape(const std::string& name) const { return find(name).full_shape; }

std::uint64_t Gpt::full_parameter_count() const {
  std::uint64_t n = 0;
  for (const Param& p : params_) {
    std::uint64_t k = 1;
    for (auto d : p.full_shape) k *= static_cast<std::uint64_t>(d);
    n += k;
  }
  return n;
}

void Gpt::initialize(std::uint64_t seed) {
  const double proj_std = 0.02 / std::sqrt(2.0 * shape_.layers);
  for (const Param& p : params_) {
    std::size_t rows = z(static_cast<int>(p.full_shape[0]));
    std::size_t cols = p.full_shape.size() > 1 ? z(static_cast<int>(p.full_shape[1])) : 1;
    std::vector<float> full(rows * cols, 0.0f);
    const bool is_norm = p.name.find("ln_") != std::string::npos;
    const bool is_bias = p.name.ends_with(".bias");
    if (is_norm && !is_bias) {
      std::fill(full.begin(), full.end(), 1.0f);
    } else if (!is_bias) {
      std::mt19937_64 gen(seed ^ std::hash<std::string>{}(p.name));
      std::normal_distribution<double> dist(0.0, p.name.ends_with("c_proj.weight") ? proj_std : 0.02);
      for (float& v : full) v = static_cast<float>(dist(gen));
    }
    std::vector<float> mine;
    if (p.tp.is_replicated()) {
      mine = std::move(full);
    } else if (p.tp.split_dim == 0) {
      mine = parallel::take_rows(full, rows, cols, p.slice);
    } else {
      mine = parallel::take_cols(full, rows, cols, p.slice);
    }
    engine_.set_parameter(p.id, mine);
  }
}

std::vector<float> Gpt::full_parameter(const std::string& name) {
  const Param& p = find(name);
  std::vector<float> mine = engine_.gather_parameter(p.id);
  if (p.tp.is_replicated() || mesh_.tp_size() == 1) return mine;
  const int tp = mesh_.tp_size();
  std::vector<float> all(mine.size() * z(tp));
  mesh_.tp_group().all_gather(mine.data(), all.data(), mine.size(), DType::f32);
  if (p.tp.split_dim == 0) return all;  // row slices in tp order
  // Columns: rank t's [rows, c] block goes to columns [t c, (t + 1) c).
  const std::size_t rows = z(static_cast<int>(p.full_shape[0]));
  const std::size_t c = mine.size() / rows, cols = c * z(tp);
  std::vector<float> full(all.size());
  for (int t = 0; t < tp; ++t) {
    for (std::size_t r = 0; r < rows; ++r) {
      std::copy_n(all.data() + z(t) * mine.size() + r * c, c, full.data() + r * cols + z(t) * c);
    }
  }
  return full;
}

double Gpt::train_micro_batch(std::span<const std::int32_t> tokens, int batch, int seq, double loss_scale) {
  return forward_backward(tokens, batch, seq, true, loss_scale, nullptr);
}

double Gpt::evaluate(std::span<const std::int32_t> tokens, int batch, int seq) {
  return forward_backward(tokens, batch, seq, false, 1.0, nullptr);
}

double Gpt::forward_backward(std::span<const std::int32_t> tokens, int batch, int seq, bool backward,
                             double loss_scale, std::vector<float>* last_logits) {
  ZS_CHECK(seq >= 1 && seq <= shape_.context, "gpt: sequence length {} outside [1, context {}]", seq,
           shape_.context);
  ZS_CHECK(tokens.size() == z(batch) * z(seq + 1), "gpt: {} tokens for batch {} x (seq {} + 1)", tokens.size(),
           batch, seq);
  const std::size_t D = z(shape_.dim), T = z(batch) * z(seq), Fl = fc_.local_out(), Vl = head_.local_out();
  const DType dt = engine_.compute_dtype();
  std::vector<std::int32_t> in(T), target(T);
  for (std::size_t b = 0; b < z(batch); ++b) {
    for (std::size_t s = 0; s < z(seq); ++s) {
      in[b * z(seq) + s] = tokens[b * z(seq + 1) + s];
      target[b * z(seq) + s] = tokens[b * z(seq + 1) + s + 1];
    }
  }
  // Parameter values in fp32 (a widened copy for 16-bit storage) and fp32
  // gradient buffers flushed into the engine's after each unit's backward.
  std::vector<std::vector<float>> wide(params_.size());
  auto P = [&](ParamId id) -> std::span<const float> {
    const std::size_t n = engine_.layout().param(id).numel;
    if (dt == DType::f32) return engine_.param(id);
    auto& w = wide[z(id)];
    w.resize(n);
    kernels::cast(w.data(), DType::f32, engine_.param_data(id, dt), dt, n);
    return w;
  };
  std::vector<std::vector<float>> grads(params_.size());
  auto G = [&](ParamId id) -> std::span<float> {
    auto& g = grads[z(id)];
    g.assign(engine_.layout().param(id).numel, 0.0f);
    return g;
  };
  auto flush = [&](UnitId u) {
    for (const Param& p : params_) {
      if (p.unit != u) continue;
      auto& g = grads[z(p.id)];
      if (g.empty()) continue;
      add_into(engine_.grad_data(p.id, dt), dt, g.data(), g.size());
      g.clear();
    }
  };

  // ---- forward ----
  engine_.unshard(embed_unit_);
  std::vector<float> x(T * D);
  wte_layer_.forward(in, P(wte_), x);
  {
    auto wpe = P(wpe_);
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t s = t % z(seq);
      for (std::size_t d = 0; d < D; ++d) x[t * D + d] += wpe[s * D + d];
    }
  }
  std::vector<Block> saved(z(shape_.layers));
  std::vector<float> tmp(T * D);
  for (int i = 0; i < shape_.layers; ++i) {
    const Ids& id = ids_[z(i)];
    Block& k = saved[z(i)];
    engine_.unshard(block_units_[z(i)]);
    const auto span = engine_.trace("forward", engine_.layout().unit(block_units_[z(i)]).name);
    k.x = x;
    k.h1.resize(T * D), k.mean1.resize(T), k.rstd1.resize(T);
    norm_.forward(k.x, T, P(id.ln1_w), P(id.ln1_b), k.h1, k.mean1, k.rstd1);
    attn_.forward(k.h1, z(batch), z(seq), {P(id.qkv_w), P(id.qkv_b), P(id.proj_w), P(id.proj_b)}, tmp, k.attn);
    k.x2.resize(T * D);
    for (std::size_t j = 0; j < T * D; ++j) k.x2[j] = k.x[j] + tmp[j];
    k.h2.resize(T * D), k.mean2.resize(T), k.rstd2.resize(T);
    norm_.forward(k.x2, T, P(id.ln2_w), P(id.ln2_b), k.h2, k.mean2, k.rstd2);
    k.f.resize(T * Fl), k.g.resize(T * Fl);
    fc_.forward(k.h2, T, P(id.fc_w), P(id.fc_b), k.f);
    parallel::gelu_forward(k.f, k.g);
    mlp_proj_.forward(k.g, T, P(id.mproj_w), P(id.mproj_b), tmp);
    for (std::size_t j = 0; j < T * D; ++j) x[j] = k.x2[j] + tmp[j];
    engine_.reshard(block_units_[z(i)]);
  }
  engine_.unshard(final_unit_);
  auto head_span = engine_.trace("head_and_loss", "final");
  std::vector<float> hf(T * D), meanf(T), rstdf(T), logits(T * Vl);
  norm_.forward(x, T, P(lnf_w_), P(lnf_b_), hf, meanf, rstdf);
  head_.forward(hf, T, P(wte_), {}, logits);
  const parallel::CrossEntropyForward ce = loss_.forward(logits, target);
  if (last_logits != nullptr) *last_logits = logits;
  if (!backward) {
    engine_.reshard(final_unit_);
    engine_.reshard(embed_unit_);
    return ce.loss;
  }

  // ---- backward ----
  loss_.backward(logits, target, ce, static_cast<float>(loss_scale), logits);
  std::vector<float> dh(T * D), dx(T * D);
  auto g_wte = G(wte_);
  head_.backward(hf, logits, T, P(wte_), dh, g_wte, {});
  norm_.backward(x, dh, T, P(lnf_w_), meanf, rstdf, dx, G(lnf_w_), G(lnf_b_));
  head_span.end();
  flush(final_unit_);
  engine_.reduce_gradients(final_unit_);
  engine_.reshard(final_unit_);
  std::vector<float> dg, dpre(T * D);
  for (int i = shape_.layers - 1; i >= 0; --i) {
    const Ids& id = ids_[z(i)];
    Block& k = saved[z(i)];
    engine_.unshard(block_units_[z(i)]);
    auto span = engine_.trace("backward", engine_.layout().unit(block_units_[z(i)]).name);
    // x3 = x2 + mlp(ln2(x2)): dx is dL/dx3.
    dg.assign(T * Fl, 0.0f);
    mlp_proj_.backward(k.g, dx, T, P(id.mproj_w), dg, G(id.mproj_w), G(id.mproj_b));
    parallel::gelu_backward(k.f, dg, dg);
    fc_.backward(k.h2, dg, T, P(id.fc_w), dh, G(id.fc_w), G(id.fc_b));
    norm_.backward(k.x2, dh, T, P(id.ln2_w), k.mean2, k.rstd2, dpre, G(id.ln2_w), G(id.ln2_b));
    for (std::size_t j = 0; j < T * D; ++j) dx[j] += dpre[j];  // dL/dx2
    attn_.backward(k.h1, dx, z(batch), z(seq), {P(id.qkv_w), P(id.qkv_b), P(id.proj_w), P(id.proj_b)}, k.attn, dh,
                   {G(id.qkv_w), G(id.qkv_b), G(id.proj_w), G(id.proj_b)});
    norm_.backward(k.x, dh, T, P(id.ln1_w), k.mean1, k.rstd1, dpre, G(id.ln1_w), G(id.ln1_b));
    for (std::size_t j = 0; j < T * D; ++j) dx[j] += dpre[j];  // dL/dx
    span.end();
    flush(block_units_[z(i)]);
    engine_.reduce_gradients(block_units_[z(i)]);
    engine_.reshard(block_units_[z(i)]);
    k = Block{};
  }
  wte_layer_.backward(in, dx, g_wte);
  {
    auto g_wpe = G(wpe_);
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t s = t % z(seq);
      for (std::size_t d = 0; d < D; ++d) g_wpe[s * D + d] += dx[t * D + d];
    }
  }
  flush(embed_unit_);
  engine_.reduce_gradients(embed_unit_);
  engine_.reshard(embed_unit_);
  return ce.loss;
}

std::string Gpt::sample(const std::string& prompt, int n, double temperature, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  const std::size_t V = z(shape_.vocab), Vl = head_.local_out();
  for (int i = 0; i < n; ++i) {
    const std::size_t start = text.size() > z(shape_.context) ? text.size() - z(shape_.context) : 0;
    const int seq = static_cast<int>(text.size() - start);
    std::vector<std::int32_t> tokens;
    for (std::size_t j = start; j < text.size(); ++j) tokens.push_back(static_cast<unsigned char>(text[j]));
    tokens.push_back(0);  // forward_backward reads seq + 1 tokens; the last one is a target the sample never uses
    std::vector<float> logits;
    forward_backward(tokens, 1, seq, false, 1.0, &logits);
    // The last position's logits, gathered over the tensor-parallel group.
    std::vector<float> last(Vl), full(V);
    std::copy_n(logits.data() + (z(seq) - 1) * Vl, Vl, last.data());
    mesh_.tp_group().all_gather(last.data(), full.data(), Vl, DType::f32);
    const double m = *std::max_element(full.begin(), full.end());
    std::vector<double> w(V);
    for (std::size_t v = 0; v < V; ++v) w[v] = std::exp((full[v] - m) / std::max(temperature, 1e-3));
    std::discrete_distribution<int> pick(w.begin(), w.end());
    text.push_back(static_cast<char>(pick(gen)));
  }
  return text;
}

}  // namespace zeroshard::examples
