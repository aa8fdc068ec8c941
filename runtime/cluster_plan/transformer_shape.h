// A decoder-only transformer described by its shape, without its values:
// what the cluster planner (issue "plan a run you cannot afford to try")
// counts parameters, FLOPs and activation memory of, and lays out as the
// per-rank ModelDescription an Engine on a dp x tp x pp mesh would hold
// (runtime/plan/model_description.h), so that the byte-exact memory
// estimator gives its model states.
//
// Two families, as published:
//   - "gpt" (GPT-2 / GPT-3 / Megatron-LM's GPT): learned positions, biases,
//     LayerNorm (weight and bias), a GELU MLP of ffn = 4 hidden by
//     default, input and output embeddings tied by default;
//   - "llama" (Llama 2 / 3): rotary positions (no parameters), no biases,
//     RMSNorm (weight only), a SwiGLU MLP (gate, up, down), grouped-query
//     attention (kv_heads), an untied output head by default.
// The formulas: [Note: transformer counts] in transformer_shape.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/plan/model_description.h"

namespace zeroshard {

/// The model family (see the file comment).
enum class TransformerKind { gpt, llama };

/// Activation checkpointing as Korthikanti et al. 2022 name it: none
/// (every activation kept), selective (the attention's softmax and
/// dropout recomputed), full (each layer's input kept, the layer
/// recomputed in the backward pass); and op, torchtitan's per-operator
/// selective checkpointing (activation_checkpoint mode "selective",
/// option "op": the fused attention's output and every other matrix
/// product's output kept, the rest recomputed; [Note: activation memory]).
enum class Recompute { none, selective, op, full };

/// "none", "selective", "op" or "full".
const char* recompute_name(Recompute r);

/// A decoder-only transformer's shape. Plain value; validate() before use.
struct TransformerShape {
  TransformerKind kind = TransformerKind::gpt;
  std::int64_t layers = 0;     ///< L, transformer blocks
  std::int64_t hidden = 0;     ///< h, model width
  std::int64_t heads = 0;      ///< a, attention heads (head dim h / a)
  std::int64_t kv_heads = 0;   ///< key/value heads (grouped-query attention); 0: heads
  std::int64_t seq = 0;        ///< s, tokens per sequence
  std::int64_t vocab = 0;      ///< V, vocabulary entries
  std::int64_t ffn = 0;        ///< MLP width; 0: 4 h for gpt (llama must give it)
  std::int64_t positions = 0;  ///< gpt's learned positions; 0: seq (llama has none)
  int tied = -1;               ///< output head tied to the input embedding: 1, 0, or -1 for the family's default

  /// ffn, kv_heads, positions and tied with the family's defaults filled.
  TransformerShape resolved() const;
  /// Throws ConfigError naming `source` and the field: a size < 1 (ffn,
  /// kv_heads and positions may be 0 for their defaults), hidden not a
  /// multiple of heads, heads not a multiple of kv_heads, llama without
  /// ffn, gpt with positions < seq.
  void validate(const std::string& source) const;

  /// Parameter elements (every weight, bias and norm), tied embeddings
  /// counted once. Source: the families' module lists ([Note: transformer
  /// counts]); GPT-2 124M gives 124,439,808, Llama-3-8B 8,030,261,248.
  std::uint64_t parameter_count() const;
  /// Elements of the weight matrices a token multiplies through: every
  /// layer's projections and the output head (embedding lookups, biases
  /// and norms excluded).
  std::uint64_t matmul_weight_count() const;
  /// Model FLOPs of training on one token, forward and backward (no
  /// recomputation): 6 x matmul_weight_count() + 12 L s h (the attention
  /// scores and their product with the values, causal mask ignored), as
  /// PaLM's MFU (Chowdhery et al. 2022, appendix B) and Megatron-LM's
  /// 72 B s L h^2 (1 + s / 6h + V / 12 h L) per batch (Narayanan et al.
  /// 2021, equation 3) count them.
  double model_flops_per_token() const;
  /// FLOPs the hardware runs per token with recomputation `r`: the model
  /// FLOPs plus one more forward of every layer under full recompute
  /// (2 x the layers' matmul weights + 4 L s h), of the attention core
  /// under selective (4 L s h), of the matrix products whose outputs op
  /// does not keep (2 x their weights, the mean of the two alternating
  /// sets where a layer has an odd number of products).
  double hardware_flops_per_token(Recompute r) const;

  /// Bytes of activations one transformer layer keeps for the backward
  /// pass, per micro-batch of `micro_batch` sequences, 16-bit activations,
  /// on one of `tp` tensor-parallel ranks with sequence parallelism
  /// (`sequence_parallel`) or without, with recomputation `r` and with or
  /// without a fused (flash) attention that keeps no s x s scores.
  /// Korthikanti et al. 2022, section 4 ([Note: activation memory]).
  double layer_activation_bytes(std::int64_t micro_batch, int tp, bool sequence_parallel, Recompute r,
                                bool flash_attention) const;
  /// Logits of one micro-batch on one of `tp` ranks: s x b x V / tp (the
  /// vocabulary split over tp); the loss's bytes are this times
  /// PlanConstants::loss_bytes_per_logit.
  double logits(std::int64_t micro_batch, int tp) const;

  /// The parameters one rank of a tp x pp mesh holds, as the units an
  /// Engine on pipeline stage `pp_rank` of `pp` and tp rank 0 declares:
  /// the embedding(s) on the first stage (and position table for gpt),
  /// layers [pp_rank L / pp, (pp_rank + 1) L / pp) one unit each, the
  /// final norm and the untied head on the last stage; matrices split over
  /// tp as Megatron-LM's layers split them (column-parallel: qkv, fc / gate
  /// and up, the vocabulary of the embedding and head; row-parallel: the
  /// attention output and the MLP's down projection; norms and the
  /// row-parallel biases replicated). Throws ConfigError when tp does not
  /// divide heads, kv_heads, ffn and vocab, or pp does not divide layers.
  ModelDescription rank_model(int tp, int pp, int pp_rank, const std::string& source) const;

  /// Parses "key=value,key=value" (keys: kind, layers, hidden, heads,
  /// kv_heads, seq, vocab, ffn, positions, tied), e.g.
  /// "kind=llama,layers=32,hidden=4096,heads=32,kv_heads=8,seq=8192,
  /// vocab=128256,ffn=14336". Throws ConfigError naming `source` and the
  /// key: unknown key, a value that is not a positive integer (tied: 0 or
  /// 1; kind: gpt or llama), a key given twice, missing layers / hidden /
  /// heads / seq / vocab, and what validate() throws.
  static TransformerShape parse(std::string_view text, const std::string& source);
  /// The same keys as a JSON object (numbers; "kind" a string, "tied" a
  /// boolean). Throws ConfigError as parse, and for JSON that does not
  /// parse (with its position).
  static TransformerShape from_json(std::string_view json, const std::string& source);
};

}  // namespace zeroshard
