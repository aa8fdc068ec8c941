// zs_plan's --transformer outside the cluster plan: a decoder given by its
// shape (runtime/cluster_plan/transformer_shape.h) as the model of the
// estimate and the per-rank plan, with the activations its loop keeps per
// sample computed from the same shape instead of given by hand
// (--activation-bytes-per-sample). A library part of zs_plan, so that
// tests check it.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/cluster_plan/transformer_shape.h"
#include "runtime/plan/model_description.h"

namespace zeroshard::tools {

/// A transformer as zs_plan's estimate and plan take it. Plain value.
struct TransformerModel {
  TransformerShape shape;  ///< resolved
  ModelDescription model;  ///< the units one rank of a data-parallel mesh declares (tp 1, pp 1)
  /// Bytes of activations the loop keeps for the backward per sample (one
  /// sequence of shape.seq tokens) at their peak, 16-bit activations,
  /// Korthikanti et al. 2022 (TransformerShape::layer_activation_bytes):
  /// without checkpointing, every layer's full set plus the logits and the
  /// loss's (PlanConstants::loss_bytes_per_logit a logit); with
  /// activation checkpointing (full recomputation: each layer keeps its
  /// input, 2 s h bytes), those inputs plus one layer's full set (the
  /// recomputed layer's, during its backward) plus the logits and loss.
  std::uint64_t activation_bytes_per_sample = 0;
  bool activation_checkpointing = false;
  /// One line saying how the activations were counted.
  std::string describe() const;
};

/// zs_plan's --transformer `spec`: key=value pairs (a '=' in it), else the
/// path of a JSON file of the same keys; as given (not resolved). Throws
/// ConfigError naming --transformer (or the file) and the key, as
/// TransformerShape::parse and from_json do, and IoError for a file that
/// cannot be read.
TransformerShape read_transformer(const std::string& spec);

/// Reads `spec` (read_transformer) and builds the model and its
/// activations. Throws as read_transformer.
TransformerModel transformer_model(const std::string& spec, bool activation_checkpointing);

}  // namespace zeroshard::tools
