// check_same_model; see [Note: model fingerprint] in runtime/engine/model_fingerprint.h.
#include "runtime/engine/model_fingerprint.h"

#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/collective_error.h"

namespace zeroshard {

namespace {

using Word = std::uint64_t;

// FNV-1a, 64 bits, over bytes (stable across runs and machines).
struct Hash {
  Word h = 0xcbf29ce484222325ULL;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  }
  void str(const std::string& s) {
    word(s.size());
    bytes(s.data(), s.size());
  }
  void word(Word w) { bytes(&w, sizeof w); }
};

Word bits(double v) { return std::bit_cast<Word>(v); }

// One summary field: its name in messages and how to print a value.
struct Field {
  const char* name;
  std::function<std::string(Word)> show;
};

std::string show_int(Word w) { return fmt::format("{}", static_cast<std::int64_t>(w)); }
std::string show_hash(Word w) { return fmt::format("hash {:016x}", w); }
std::string show_double(Word w) { return fmt::format("{:g}", std::bit_cast<double>(w)); }
std::string show_dtype(Word w) { return std::string(dtype_name(static_cast<DType>(w))); }
std::string show_device(Word w) { return offload_device_name(static_cast<OffloadDevice>(w)); }
std::string show_bool(Word w) { return w != 0 ? "true" : "false"; }

// All-gathers `count` words per rank (as raw 2-byte elements: no arithmetic).
std::vector<Word> gather_words(Communicator& comm, const Word* mine, std::size_t count) {
  std::vector<Word> all(count * static_cast<std::size_t>(comm.world_size()));
  comm.all_gather(mine, all.data(), count * sizeof(Word) / 2, DType::f16);
  return all;
}

// `text` on root, on every rank (length first, then the bytes).
std::string broadcast_text(Communicator& comm, const std::string& text, int root) {
  double len = static_cast<double>(text.size());
  comm.broadcast(&len, 1, DType::f64, root);
  std::vector<char> buf((static_cast<std::size_t>(len) + 1) / 2 * 2, ' ');
  if (comm.rank() == root) std::memcpy(buf.data(), text.data(), text.size());
  comm.broadcast(buf.data(), buf.size() / 2, DType::f16, root);
  return std::string(buf.data(), static_cast<std::size_t>(len));
}

// "3 on ranks 0, 2; 4 on rank 1": the ranks grouped by value, in order of
// first appearance.
std::string by_value(const std::vector<Word>& all, std::size_t stride, std::size_t index, int world,
                     const std::function<std::string(Word)>& show) {
  std::vector<Word> values;
  std::vector<std::vector<int>> ranks;
  for (int q = 0; q < world; ++q) {
    const Word v = all[static_cast<std::size_t>(q) * stride + index];
    std::size_t k = 0;
    while (k < values.size() && values[k] != v) ++k;
    if (k == values.size()) {
      values.push_back(v);
      ranks.emplace_back();
    }
    ranks[k].push_back(q);
  }
  std::vector<std::string> parts;
  for (std::size_t k = 0; k < values.size(); ++k) {
    parts.push_back(fmt::format("{} on rank{} {}", show(values[k]), ranks[k].size() > 1 ? "s" : "",
                                fmt::join(ranks[k], ", ")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Unit u on this rank, for messages (at most about 300 characters).
std::string describe_unit(const FlatLayout& layout, std::size_t u, Word numel) {
  const UnitInfo& info = layout.units()[u];
  std::string params;
  for (ParamId id : info.params) {
    const ParamInfo& p = layout.param(id);
    if (!params.empty()) params += ", ";
    params += p.name + " " + shape_text(p.shape);
    if (params.size() > 240) {
      params += ", ...";
      break;
    }
  }
  return fmt::format("\"{}\" ({} elements: {})", info.name, numel, params.empty() ? "no parameters" : params);
}

}  // namespace

void check_same_model(Communicator& comm, const EngineConfig& c, const FlatLayout& layout, std::size_t groups) {
  const int world = comm.world_size();
  const std::size_t nunits = layout.units().size();
  // Per unit: element count and a hash of its name, parameter names and shapes.
  std::vector<Word> unit_words(2 * nunits);
  Hash names;
  Word elements = 0;
  for (std::size_t u = 0; u < nunits; ++u) {
    const UnitInfo& info = layout.units()[u];
    Hash h;
    h.str(info.name);
    Word n = 0;
    for (ParamId id : info.params) {
      const ParamInfo& p = layout.param(id);
      h.str(p.name);
      h.word(p.shape.size());
      for (std::int64_t d : p.shape) h.word(static_cast<Word>(d));
      h.word(static_cast<Word>(p.group));
      n += p.numel;
    }
    unit_words[2 * u] = n;
    unit_words[2 * u + 1] = h.h;
    names.word(h.h);
    elements += n;
  }
  const OptimizerHyper& o = c.optimizer;
  Hash hyper;
  for (Word w : {bits(o.lr), bits(o.beta1), bits(o.beta2), bits(o.eps), bits(o.weight_decay), bits(o.momentum),
                 bits(o.dampening), Word{o.nesterov}, bits(o.lr_decay), bits(o.initial_accumulator_value)}) {
    hyper.word(w);
  }
  Hash stage3;
  for (std::int64_t v : {c.zero.prefetch_bucket_size, c.zero.max_live_parameters, c.zero.max_reuse_distance,
                         c.zero.param_persistence_threshold, c.zero.model_persistence_threshold}) {
    stage3.word(static_cast<Word>(v));
  }
  const std::array<std::pair<Field, Word>, kFingerprintFields> summary = {{
      {{"zero_optimization.stage", show_int}, static_cast<Word>(c.zero.stage)},
      {{"compute dtype (bf16.enabled / fp16.enabled)", show_dtype}, static_cast<Word>(c.compute_dtype)},
      {{"optimizer.type", [](Word w) { return std::string(optimizer_name(static_cast<OptimizerKind>(w))); }},
       static_cast<Word>(o.kind)},
      {{"optimizer.params (lr, betas, eps, weight_decay, momentum, dampening, nesterov, lr_decay, "
        "initial_accumulator_value)", show_hash}, hyper.h},
      {{"gradient_accumulation_steps", show_int}, static_cast<Word>(c.gradient_accumulation_steps)},
      {{"gradient_clipping", show_double}, bits(c.gradient_clipping)},
      {{"communication_data_type", [](Word w) { return w == 0 ? std::string("unset") : show_dtype(w - 1); }},
       c.communication_data_type ? static_cast<Word>(*c.communication_data_type) + 1 : 0},
      {{"data_types.grad_accum_dtype (the gradient accumulator's dtype)", show_dtype},
       static_cast<Word>(c.accumulation_dtype())},
      {{"zero_optimization.overlap_comm", show_bool}, Word{c.zero.overlap()}},
      {{"zero_optimization.reduce_bucket_size", show_int}, static_cast<Word>(c.zero.reduce_bucket_size)},
      {{"zero_optimization.allgather_bucket_size", show_int}, static_cast<Word>(c.zero.allgather_bucket_size)},
      {{"zero_optimization.sub_group_size", show_int}, static_cast<Word>(c.offload.sub_group_size)},
      {{"zero_optimization.stage3_* (prefetch_bucket_size, max_live_parameters, max_reuse_distance, "
        "param_persistence_threshold, model_persistence_threshold)",
        show_hash},
       stage3.h},
      {{"zero_optimization.offload_optimizer.device", show_device}, static_cast<Word>(c.offload.optimizer.device)},
      {{"zero_optimization.offload_param.device", show_device}, static_cast<Word>(c.offload.param.device)},
      {{"zero_optimization.offload_param.max_in_cpu", show_int}, static_cast<Word>(c.offload.param.max_in_cpu)},
      {{"zero_optimization.offload_param.buffer_size", show_int}, static_cast<Word>(c.offload.param.buffer_size)},
      {{"wall_clock_breakdown or zeroshard.trace.enabled (the per-step gathers)", show_bool},
       Word{c.observe.records()}},
      {{"zeroshard.collective_check", show_bool}, Word{c.observe.collective_check}},
      {{"zeroshard.collective_timeout_s", show_double}, bits(c.observe.collective_timeout_s)},
      {{"zero_optimization.stage3_gather_16bit_weights_on_model_save", show_bool},
       Word{c.zero.gather_16bit_weights_on_model_save}},
      {{"parameter groups", show_int}, static_cast<Word>(groups)},
      {{"units (add_unit calls)", show_int}, static_cast<Word>(nunits)},
      {{"parameters (add_parameter calls)", show_int}, static_cast<Word>(layout.params().size())},
      {{"parameter elements in all units", show_int}, elements},
      {{"unit and parameter names, shapes and groups", show_hash}, names.h},
  }};
  std::array<Word, kFingerprintFields> mine{};
  for (std::size_t i = 0; i < kFingerprintFields; ++i) mine[i] = summary[i].second;
  const std::vector<Word> all = gather_words(comm, mine.data(), kFingerprintFields);

  std::size_t first = kFingerprintFields;
  for (std::size_t i = 0; i < kFingerprintFields && first == kFingerprintFields; ++i) {
    for (int q = 1; q < world; ++q) {
      if (all[static_cast<std::size_t>(q) * kFingerprintFields + i] != all[i]) first = i;
    }
  }
  if (first == kFingerprintFields) return;
  const std::string intro = "ranks were built with different models or configurations (every rank must declare the "
                            "same units and parameters in the same order, with the same ds_config)";
  const bool unit_detail = first >= kFingerprintFields - 2;  // element counts or names, same unit count
  if (!unit_detail) {
    throw AgreedConfigError(fmt::format("{}: {}: {}", intro, summary[first].first.name,
                                        by_value(all, kFingerprintFields, first, world, summary[first].first.show)),
                            comm.rank());
  }
  // The unit and parameter counts agree: compare unit by unit.
  const std::vector<Word> units = gather_words(comm, unit_words.data(), unit_words.size());
  const std::size_t stride = unit_words.size();
  for (std::size_t u = 0; u < nunits; ++u) {
    int other = -1;
    for (int q = 1; q < world && other < 0; ++q) {
      const std::size_t at = static_cast<std::size_t>(q) * stride + 2 * u;
      if (units[at] != units[2 * u] || units[at + 1] != units[2 * u + 1]) other = q;
    }
    if (other < 0) continue;
    const std::string here = describe_unit(layout, u, unit_words[2 * u]);
    const std::string d0 = broadcast_text(comm, here, 0);
    const std::string dq = broadcast_text(comm, here, other);
    std::vector<int> with0, withq;
    for (int q = 0; q < world; ++q) {
      const std::size_t at = static_cast<std::size_t>(q) * stride + 2 * u;
      const std::size_t atq = static_cast<std::size_t>(other) * stride + 2 * u;
      if (units[at] == units[2 * u] && units[at + 1] == units[2 * u + 1]) with0.push_back(q);
      if (units[at] == units[atq] && units[at + 1] == units[atq + 1]) withq.push_back(q);
    }
    throw AgreedConfigError(fmt::format("{}: unit {}: {} on rank{} {}; {} on rank{} {}", intro, u, d0,
                                        with0.size() > 1 ? "s" : "", fmt::join(with0, ", "), dq,
                                        withq.size() > 1 ? "s" : "", fmt::join(withq, ", ")),
                            comm.rank());
  }
  // Same units but a different parameter order across units: name the field.
  throw AgreedConfigError(fmt::format("{}: {}: {}", intro, summary[first].first.name,
                                      by_value(all, kFingerprintFields, first, world, summary[first].first.show)),
                          comm.rank());
}

}  // namespace zeroshard
