#include "tools/plan/transformer_model.h"

#include <cmath>

#include <fmt/format.h>

#include "core/durable_file.h"
#include "runtime/cluster_plan/mesh_plan.h"

namespace zeroshard::tools {

TransformerShape read_transformer(const std::string& spec) {
  return spec.find('=') == std::string::npos ? TransformerShape::from_json(read_text_file(spec), spec)
                                             : TransformerShape::parse(spec, "--transformer");
}

TransformerModel transformer_model(const std::string& spec, bool activation_checkpointing) {
  TransformerModel t;
  t.shape = read_transformer(spec).resolved();
  t.model = t.shape.rank_model(1, 1, 0, "--transformer");
  t.activation_checkpointing = activation_checkpointing;
  const double full = t.shape.layer_activation_bytes(1, 1, false, Recompute::none, false);
  const double layers = static_cast<double>(t.shape.layers);
  const double kept = activation_checkpointing
                          ? layers * t.shape.layer_activation_bytes(1, 1, false, Recompute::full, false) + full
                          : layers * full;
  const double logits = t.shape.logits(1, 1) * PlanConstants{}.loss_bytes_per_logit;
  t.activation_bytes_per_sample = static_cast<std::uint64_t>(std::llround(kept + logits));
  return t;
}

std::string TransformerModel::describe() const {
  return fmt::format(
      "activations per sample from --transformer: {} bytes ({} layers, seq {}, hidden {}, 16-bit; {}; "
      "Korthikanti et al. 2022)",
      activation_bytes_per_sample, shape.layers, shape.seq, shape.hidden,
      activation_checkpointing ? "activation checkpointing: each layer's input and one recomputed layer"
                               : "every layer's activations");
}

}  // namespace zeroshard::tools
