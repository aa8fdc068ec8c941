// The GPT of gpt_model.h: declaration, initialisation, forward and backward.
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/gpt_micro_batch.h"

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

void check_pipeline_stages(const GptShape& s, int pp) {
  if (s.layers < pp) {
    throw ConfigError(fmt::format("gpt: {} pipeline stages need at least as many layers (layers {})", pp, s.layers));
  }
}

std::size_t z(int v) { return static_cast<std::size_t>(v); }

}  // namespace

Gpt::~Gpt() = default;

Gpt::Gpt(Engine& engine, const Mesh& mesh, GptShape shape)
    : engine_(engine),
      mesh_(mesh),
      shape_((check_shape(shape, mesh.tp_size()), check_pipeline_stages(shape, mesh.pp_size()), shape)),
      layer_begin_(mesh.pp_rank() * shape.layers / mesh.pp_size()),
      layer_end_((mesh.pp_rank() + 1) * shape.layers / mesh.pp_size()),
      wte_layer_(engine.tp_communicator(), z(shape.vocab), z(shape.dim)),
      head_(engine.tp_communicator(), z(shape.dim), z(shape.vocab), /*bias=*/false),
      loss_(engine.tp_communicator(), z(shape.vocab)),
      norm_(z(shape.dim)),
      attn_(engine.tp_communicator(), z(shape.dim), z(shape.heads)),
      fc_(engine.tp_communicator(), z(shape.dim), 4 * z(shape.dim)),
      mlp_proj_(engine.tp_communicator(), 4 * z(shape.dim), z(shape.dim)) {
  // Checked on resume: another --heads at the same width has the same
  // shapes but another attention layout ([Note: mesh checkpoint commit]).
  engine.set_model_config({{"model", "gpt"}, {"layers", shape.layers}, {"heads", shape.heads}, {"dim", shape.dim},
                           {"context", shape.context}, {"vocab", shape.vocab}});
  no_decay_ = engine.add_param_group("no_decay", {.weight_decay = 0.0f});
  const std::int64_t D = shape.dim, F = 4 * D, V = shape.vocab;
  const auto rep = TensorParallel::replicated();
  const parallel::Slice all{};
  const bool pipeline = mesh.pp_size() > 1;
  if (first_pipeline_stage()) {
    // [Note: GPT pipeline stages]: the tied wte alone in its unit with pp > 1.
    embed_units_.push_back(engine.add_unit(pipeline ? "wte" : "embed"));
    if (pipeline) embed_units_.push_back(engine.add_unit("wpe"));
    wte_ = declare(embed_units_.front(), "wte", {V, D}, TensorParallel::split(0), wte_layer_.vocab_slice(), false);
    wpe_ = declare(embed_units_.back(), "wpe", {shape.context, D}, rep, all, false);
  }
  const std::size_t hd = z(shape.dim / shape.heads);
  const parallel::Slice heads = attn_.head_slice();
  const parallel::Slice qkv_rows{3 * hd * heads.begin, 3 * hd * heads.size};
  const parallel::Slice ctx_cols{hd * heads.begin, hd * heads.size};
  for (int i = layer_begin_; i < layer_end_; ++i) {
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
  if (last_pipeline_stage()) {
    final_units_.push_back(engine.add_unit("ln_f"));
    lnf_w_ = declare(final_units_.front(), "ln_f.weight", {D}, rep, all, false);
    lnf_b_ = declare(final_units_.front(), "ln_f.bias", {D}, rep, all, false);
    if (pipeline) {
      final_units_.push_back(engine.add_unit("lm_head"));
      wte_ = declare(final_units_.back(), "wte", {V, D}, TensorParallel::split(0), wte_layer_.vocab_slice(), false);
    }
  }
  if (pipeline && (first_pipeline_stage() || last_pipeline_stage())) engine.tie_parameter(wte_, mesh.embedding_group());
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
  const std::uint64_t D = z(shape_.dim), L = z(shape_.layers);
  const std::uint64_t block = 4 * D + (3 * D * D + 3 * D) + (D * D + D) + (4 * D * D + 4 * D) + (4 * D * D + D);
  return z(shape_.vocab) * D + z(shape_.context) * D + L * block + 2 * D;
}

void Gpt::initialize(std::uint64_t seed) {
  const double proj_std = 0.02 / std::sqrt(2.0 * shape_.layers);
  // A unit's parameters are set together: one write of its swap files.
  std::vector<ParamId> ids;
  std::vector<std::vector<float>> values;
  UnitId unit = -1;  // of ids
  auto flush = [&] {
    std::vector<std::span<const float>> spans(values.begin(), values.end());
    engine_.set_parameters(ids, spans);
    ids.clear(), values.clear();
  };
  for (const Param& p : params_) {
    if (!ids.empty() && unit != p.unit) flush();
    unit = p.unit;
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
    ids.push_back(p.id);
    values.push_back(std::move(mine));
  }
  flush();
}

std::vector<float> Gpt::full_parameter(const std::string& name) {
  const Param& p = find(name);
  std::vector<float> mine = engine_.gather_parameter(p.id);
  if (p.tp.is_replicated() || mesh_.tp_size() == 1) return mine;
  const int tp = mesh_.tp_size();
  std::vector<float> all(mine.size() * z(tp));
  engine_.tp_communicator().all_gather(mine.data(), all.data(), mine.size(), DType::f32);
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

std::size_t Gpt::activation_count(int batch, int seq) const { return z(batch) * z(seq) * z(shape_.dim); }

void Gpt::track_saved(std::ptrdiff_t bytes) {
  saved_bytes_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(saved_bytes_) + bytes);
  peak_saved_bytes_ = std::max(peak_saved_bytes_, saved_bytes_);
}

namespace {

// Parameter values in fp32 (the engine's own memory, or a widened copy for
// 16-bit storage) and fp32 gradient buffers, flushed into the engine's
// gradients unit by unit.
class ParamAccess {
 public:
  /// `spare`: the Gpt's buffers kept between passes (Gpt::spare_).
  ParamAccess(Engine& engine, std::vector<std::vector<float>>& spare)
      : engine_(engine), spare_(spare), wide_(engine.layout().params().size()),
        grads_(engine.layout().params().size()) {}
  ~ParamAccess() {
    for (auto& w : wide_) give(w);
    for (auto& g : grads_) give(g);
  }
  ParamAccess(const ParamAccess&) = delete;
  ParamAccess& operator=(const ParamAccess&) = delete;

  std::span<const float> P(ParamId id) {
    const DType dt = engine_.compute_dtype();
    if (dt == DType::f32) return engine_.param(id);
    auto& w = wide_[z(id)];
    if (w.empty()) w = take(engine_.layout().param(id).numel);
    kernels::cast(w.data(), DType::f32, engine_.param_data(id, dt), dt, w.size());
    return w;
  }
  // A zeroed gradient buffer for id.
  std::span<float> G(ParamId id) {
    auto& g = grads_[z(id)];
    if (g.empty()) g = take(engine_.layout().param(id).numel);
    std::fill(g.begin(), g.end(), 0.0f);
    return g;
  }
  // Adds unit u's buffers into the engine's gradients, reduces them and
  // reshards u; its buffers go back to the spares.
  void finish_unit(UnitId u) {
    const DType dt = engine_.compute_dtype();
    for (ParamId id : engine_.layout().unit(u).params) {
      auto& g = grads_[z(id)];
      if (g.empty()) continue;
      // In fp32, rounded once to the engine's dtype (SIMD, no temporary).
      kernels::accumulate_cast(engine_.grad_data(id, dt), dt, g.data(), DType::f32, g.size());
      give(g);
    }
    engine_.reduce_gradients(u);
    reshard(u);
  }
  // Reshards unit u and gives back its widened copies: a pass holds at
  // most the units it has unsharded, never the whole model in fp32.
  void reshard(UnitId u) {
    engine_.reshard(u);
    for (ParamId id : engine_.layout().unit(u).params) give(wide_[z(id)]);
  }

 private:
  // A buffer of n elements (contents unspecified): a spare of the
  // smallest capacity that holds n, else a new one. Reusing them keeps the
  // allocator from returning ~100 MB buffers to the kernel and faulting
  // them in, zeroed, again for the next unit (a third of a step's time at
  // width 1600).
  std::vector<float> take(std::size_t n) {
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->capacity() >= n && (best == spare_.end() || it->capacity() < best->capacity())) best = it;
    }
    std::vector<float> v;
    if (best != spare_.end()) {
      v = std::move(*best);
      spare_.erase(best);
    }
    v.resize(n);
    return v;
  }
  void give(std::vector<float>& v) {
    if (v.capacity() > 0 && spare_.size() < kMaxSpares) spare_.push_back(std::move(v));
    v = std::vector<float>();
  }
  static constexpr std::size_t kMaxSpares = 32;  // more than one unit's widened copies and gradients

  Engine& engine_;
  std::vector<std::vector<float>>& spare_;
  std::vector<std::vector<float>> wide_, grads_;
};

}  // namespace

void Gpt::forward(MicroBatch& mb, const float* input, float* output, bool backward_follows) {
  const std::size_t D = z(shape_.dim), T = z(mb.batch) * z(mb.seq), Vl = head_.local_out();
  ParamAccess pa(engine_, spare_);
  std::vector<float> x(T * D);
  if (first_pipeline_stage()) {
    for (UnitId u : embed_units_) engine_.unshard(u);
    wte_layer_.forward(mb.in, pa.P(wte_), x);
    auto wpe = pa.P(wpe_);
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t s = t % z(mb.seq);
      for (std::size_t d = 0; d < D; ++d) x[t * D + d] += wpe[s * D + d];
    }
    // At pp = 1 the head uses wte: the embeddings stay unsharded.
    if (!last_pipeline_stage()) {
      for (UnitId u : embed_units_) pa.reshard(u);
    }
  } else {
    std::copy_n(input, T * D, x.begin());
  }
  mb.blocks.resize(block_units_.size());
  std::vector<float>& tmp = scratch_.tmp;  // written whole by each block before it is read
  tmp.resize(T * D);
  for (std::size_t i = 0; i < block_units_.size(); ++i) {
    Block& k = mb.blocks[i];
    k = take_block();
    engine_.unshard(block_units_[i]);
    const auto span = engine_.trace("forward", engine_.layout().unit(block_units_[i]).name);
    k.x = x;
    block_forward(i, mb.batch, mb.seq, k, x, tmp);
    if (!backward_follows) {
      give_block(k);  // a forward-only pass keeps nothing
    } else if (checkpointing_) {
      // Keep the input only; the backward recomputes the rest from it.
      const ActivationHandle h = engine_.activations().save(k.x);
      give_block(k);
      k.checkpoint = h;
      k.checkpoint_bytes = engine_.activations().held_bytes(h);
    }
    pa.reshard(block_units_[i]);
  }
  if (last_pipeline_stage()) {
    for (UnitId u : final_units_) engine_.unshard(u);
    const auto head_span = engine_.trace("head_and_loss", "final");
    mb.hf.resize(T * D), mb.meanf.resize(T), mb.rstdf.resize(T), mb.logits.resize(T * Vl);
    norm_.forward(x, T, pa.P(lnf_w_), pa.P(lnf_b_), mb.hf, mb.meanf, mb.rstdf);
    head_.forward(mb.hf, T, pa.P(wte_), {}, mb.logits);
    mb.ce = loss_.forward(mb.logits, mb.target);
    mb.loss = mb.ce.loss;
    mb.x = std::move(x);
    if (!backward_follows) {
      for (UnitId u : final_units_) pa.reshard(u);
      if (first_pipeline_stage()) {
        for (UnitId u : embed_units_) pa.reshard(u);
      }
    }
  } else {
    std::copy_n(x.data(), T * D, output);
  }
  if (backward_follows) {
    mb.saved_bytes = mb.bytes();
    track_saved(static_cast<std::ptrdiff_t>(mb.saved_bytes));
  }
}

Gpt::Block Gpt::take_block() {
  if (spare_blocks_.empty()) return Block{};
  Block k = std::move(spare_blocks_.back());
  spare_blocks_.pop_back();
  return k;
}

void Gpt::give_block(Block& k) {
  ZS_CHECK(!k.checkpoint.valid(), "gpt: a block's buffers given back with its checkpoint held");
  // A pass holds at most every block of this stage at once, so do the spares.
  if (spare_blocks_.size() < block_units_.size()) spare_blocks_.push_back(std::move(k));
  k = Block{};
}

void Gpt::block_forward(std::size_t i, int batch, int seq, Block& k, std::vector<float>& out,
                        std::vector<float>& tmp) {
  const std::size_t D = z(shape_.dim), T = z(batch) * z(seq), Fl = fc_.local_out();
  ParamAccess pa(engine_, spare_);
  const Ids& id = ids_[i];
  k.h1.resize(T * D), k.mean1.resize(T), k.rstd1.resize(T);
  norm_.forward(k.x, T, pa.P(id.ln1_w), pa.P(id.ln1_b), k.h1, k.mean1, k.rstd1);
  attn_.forward(k.h1, z(batch), z(seq), {pa.P(id.qkv_w), pa.P(id.qkv_b), pa.P(id.proj_w), pa.P(id.proj_b)}, tmp,
                k.attn);
  k.x2.resize(T * D);
  for (std::size_t j = 0; j < T * D; ++j) k.x2[j] = k.x[j] + tmp[j];
  k.h2.resize(T * D), k.mean2.resize(T), k.rstd2.resize(T);
  norm_.forward(k.x2, T, pa.P(id.ln2_w), pa.P(id.ln2_b), k.h2, k.mean2, k.rstd2);
  k.f.resize(T * Fl), k.g.resize(T * Fl);
  fc_.forward(k.h2, T, pa.P(id.fc_w), pa.P(id.fc_b), k.f);
  parallel::gelu_forward(k.f, k.g, k.f);  // k.f becomes gelu'(fc output): backward's only use of it
  mlp_proj_.forward(k.g, T, pa.P(id.mproj_w), pa.P(id.mproj_b), tmp);
  for (std::size_t j = 0; j < T * D; ++j) out[j] = k.x2[j] + tmp[j];
}

void Gpt::backward(MicroBatch& mb, const float* grad_output, float* grad_input) {
  const std::size_t D = z(shape_.dim), T = z(mb.batch) * z(mb.seq), Fl = fc_.local_out();
  ParamAccess pa(engine_, spare_);
  // The pass's buffers, kept between passes (each is written whole before
  // it is read, so reused contents do not matter).
  std::vector<float>& dh = scratch_.dh;
  std::vector<float>& dx = scratch_.dx;
  std::vector<float>& dg = scratch_.dg;
  std::vector<float>& dpre = scratch_.dpre;
  std::vector<float>& out = scratch_.out;
  dh.resize(T * D), dx.resize(T * D), dpre.resize(T * D);
  std::span<float> g_wte;
  if (last_pipeline_stage()) {
    auto head_span = engine_.trace("head_and_loss", "final");
    loss_.backward(mb.logits, mb.target, mb.ce, static_cast<float>(mb.loss_scale), mb.logits);
    g_wte = pa.G(wte_);
    head_.backward(mb.hf, mb.logits, T, pa.P(wte_), dh, g_wte, {});
    norm_.backward(mb.x, dh, T, pa.P(lnf_w_), mb.meanf, mb.rstdf, dx, pa.G(lnf_w_), pa.G(lnf_b_));
    head_span.end();
    // With pp > 1 the head's wte copy (unit lm_head) is flushed here; at
    // pp = 1 wte's buffer waits for the embedding's share.
    for (UnitId u : final_units_) pa.finish_unit(u);
  } else {
    std::copy_n(grad_output, T * D, dx.begin());
  }
  for (std::size_t i = block_units_.size(); i-- > 0;) {
    const Ids& id = ids_[i];
    Block& k = mb.blocks[i];
    engine_.unshard(block_units_[i]);
    std::size_t recomputed = 0;  // bytes of the block's activations recomputed here
    if (k.checkpoint.valid()) {
      auto recompute = engine_.trace("recompute", engine_.layout().unit(block_units_[i]).name);
      ActivationStore& store = engine_.activations();
      // The input goes straight into a spare block's buffer, which then
      // replaces k (its checkpoint released, nothing else held).
      Block spare = take_block();
      spare.x.resize(T * D);
      store.restore(k.checkpoint, spare.x);
      store.release(k.checkpoint);
      track_saved(-static_cast<std::ptrdiff_t>(k.checkpoint_bytes));
      mb.saved_bytes -= k.checkpoint_bytes;
      k = std::move(spare);
      out.resize(T * D);
      block_forward(i, mb.batch, mb.seq, k, out, dpre);
      recomputed = k.bytes();
      track_saved(static_cast<std::ptrdiff_t>(recomputed));
    }
    auto span = engine_.trace("backward", engine_.layout().unit(block_units_[i]).name);
    // x3 = x2 + mlp(ln2(x2)): dx is dL/dx3.
    dg.resize(T * Fl);  // written whole by the product (beta 0)
    mlp_proj_.backward(k.g, dx, T, pa.P(id.mproj_w), dg, pa.G(id.mproj_w), pa.G(id.mproj_b));
    parallel::gelu_backward_slope(k.f, dg, dg);
    fc_.backward(k.h2, dg, T, pa.P(id.fc_w), dh, pa.G(id.fc_w), pa.G(id.fc_b));
    norm_.backward(k.x2, dh, T, pa.P(id.ln2_w), k.mean2, k.rstd2, dpre, pa.G(id.ln2_w), pa.G(id.ln2_b));
    for (std::size_t j = 0; j < T * D; ++j) dx[j] += dpre[j];  // dL/dx2
    attn_.backward(k.h1, dx, z(mb.batch), z(mb.seq),
                   {pa.P(id.qkv_w), pa.P(id.qkv_b), pa.P(id.proj_w), pa.P(id.proj_b)}, k.attn, dh,
                   {pa.G(id.qkv_w), pa.G(id.qkv_b), pa.G(id.proj_w), pa.G(id.proj_b)});
    norm_.backward(k.x, dh, T, pa.P(id.ln1_w), k.mean1, k.rstd1, dpre, pa.G(id.ln1_w), pa.G(id.ln1_b));
    for (std::size_t j = 0; j < T * D; ++j) dx[j] += dpre[j];  // dL/dx
    span.end();
    pa.finish_unit(block_units_[i]);
    give_block(k);
    track_saved(-static_cast<std::ptrdiff_t>(recomputed));
  }
  if (first_pipeline_stage()) {
    // With pp > 1 the embeddings were resharded after the forward.
    if (!last_pipeline_stage()) {
      for (UnitId u : embed_units_) engine_.unshard(u);
    }
    if (g_wte.empty()) g_wte = pa.G(wte_);
    wte_layer_.backward(mb.in, dx, g_wte);
    auto g_wpe = pa.G(wpe_);
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t s = t % z(mb.seq);
      for (std::size_t d = 0; d < D; ++d) g_wpe[s * D + d] += dx[t * D + d];
    }
    for (UnitId u : embed_units_) pa.finish_unit(u);
  } else {
    std::copy_n(dx.data(), T * D, grad_input);
  }
  track_saved(-static_cast<std::ptrdiff_t>(mb.saved_bytes));
  mb = MicroBatch{};
}

}  // namespace zeroshard::examples
