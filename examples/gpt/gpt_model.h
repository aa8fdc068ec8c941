// A GPT-2-style byte-level decoder (Radford et al., 2019, "Language Models
// are Unsupervised Multitask Learners") on the Engine over a device mesh:
// token and position embeddings, pre-LayerNorm blocks of causal multi-head
// self-attention and a GELU MLP, a final LayerNorm and an LM head tied to
// the token embedding. Forward and backward are written out by hand from
// the tensor-parallel blocks of parallel/ (Megatron-LM layout: attention
// split by heads, MLP column- then row-parallel, vocabulary-parallel
// embedding and cross-entropy); the Engine shards the rank's slices over
// the data-parallel group.
//
// [Note: GPT parameters]
// Per block i, with D = dim, H = heads, F = 4 D (names as GPT-2's):
//   h.i.ln_1.weight/bias [D]            replicated
//   h.i.attn.c_attn.weight [3D/tp, D]   split 0 (head-major, parallel_attention.h)
//   h.i.attn.c_attn.bias [3D/tp]        split 0
//   h.i.attn.c_proj.weight [D, D/tp]    split 1
//   h.i.attn.c_proj.bias [D]            replicated
//   h.i.ln_2.weight/bias [D]            replicated
//   h.i.mlp.c_fc.weight [F/tp, D]       split 0;  .bias [F/tp] split 0
//   h.i.mlp.c_proj.weight [D, F/tp]     split 1;  .bias [D] replicated
// plus wte [256/tp, D] (split 0, also the LM head), wpe [context, D] and
// ln_f.weight/bias (replicated). Units: "embed" (wte, wpe), "h.i" per block,
// "ln_f". Norms, biases and embeddings are in the "no_decay" group (weight
// decay 0). Initial values are those of GPT-2: N(0, 0.02), the c_proj
// weights N(0, 0.02 / sqrt(2 layers)), biases 0, norm weights 1, drawn for
// the full tensor from a seed and the parameter's name, then sliced, so
// every mesh starts from the same full model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "parallel/layer_norm.h"
#include "parallel/parallel_attention.h"
#include "parallel/vocab_parallel_cross_entropy.h"
#include "parallel/vocab_parallel_embedding.h"
#include "runtime/engine.h"

namespace zeroshard::examples {

/// Model sizes. vocab is 256 (bytes).
struct GptShape {
  int layers = 4;
  int heads = 4;
  int dim = 128;
  int context = 64;  ///< longest sequence (rows of wpe)
  int vocab = 256;
};

/// The GPT of GptShape on an Engine over `mesh`: one object per rank, all
/// ranks SPMD. Thread safety: one thread. fp32 compute (the Engine's
/// bf16 / fp16 storage is widened on the way in and rounded on the way
/// out).
class Gpt {
 public:
  /// Declares the parameters in `engine` (not finalized yet; its mesh is
  /// `mesh`). Throws ConfigError naming the sizes when heads does not divide
  /// dim, or tp does not divide heads, 4 dim or vocab.
  Gpt(Engine& engine, const Mesh& mesh, GptShape shape);

  /// After engine.finalize(): sets every parameter from the GPT-2
  /// initialisation of the full model (seeded; the same on every mesh).
  void initialize(std::uint64_t seed);

  /// One micro-batch: forward and backward over `batch` sequences of
  /// `seq` + 1 tokens (row-major [batch, seq + 1]: inputs are the first seq
  /// of each row, targets the last seq), adding the gradient of the mean
  /// cross-entropy (times loss_scale) into the engine's gradients and
  /// reducing them. Returns the mean loss in nats. Collective.
  double train_micro_batch(std::span<const std::int32_t> tokens, int batch, int seq, double loss_scale);
  /// Forward only: the mean loss of the same layout. Collective.
  double evaluate(std::span<const std::int32_t> tokens, int batch, int seq);
  /// Greedy-free sampling: extends `prompt` by `n` bytes drawn from the
  /// softmax at `temperature`, with a generator seeded by `seed` (the same
  /// on every rank, so every rank draws the same bytes). Collective.
  std::string sample(const std::string& prompt, int n, double temperature, std::uint64_t seed);

  /// The full (unsplit) values of parameter `name`: this rank's slice
  /// gathered over the tensor-parallel group and put together along its
  /// split dimension. Collective (engine gather and tp all-gather).
  std::vector<float> full_parameter(const std::string& name);
  /// Names of every parameter, in declaration order.
  std::vector<std::string> parameter_names() const;
  /// Full shape of parameter `name`.
  std::vector<std::int64_t> full_shape(const std::string& name) const;
  const GptShape& shape() const { return shape_; }
  /// Parameters of the full model (elements).
  std::uint64_t full_parameter_count() const;

 private:
  struct Block;
  struct Param {
    std::string name;
    ParamId id = -1;
    std::vector<std::int64_t> full_shape;
    TensorParallel tp;
    UnitId unit = -1;
    parallel::Slice slice;  ///< rows (split 0) or columns (split 1) of the full tensor
  };
  ParamId declare(UnitId unit, const std::string& name, std::vector<std::int64_t> full_shape, TensorParallel tp,
                  parallel::Slice slice, bool decay);
  const Param& find(const std::string& name) const;
  double forward_backward(std::span<const std::int32_t> tokens, int batch, int seq, bool backward,
                          double loss_scale, std::vector<float>* last_logits);

  Engine& engine_;
  const Mesh& mesh_;
  GptShape shape_;
  GroupId no_decay_ = 0;
  std::vector<Param> params_;
  UnitId embed_unit_ = -1, final_unit_ = -1;
  std::vector<UnitId> block_units_;
  parallel::VocabParallelEmbedding wte_layer_;
  parallel::ColumnParallelLinear head_;
  parallel::VocabParallelCrossEntropy loss_;
  parallel::LayerNorm norm_;
  parallel::ParallelSelfAttention attn_;
  parallel::ColumnParallelLinear fc_;
  parallel::RowParallelLinear mlp_proj_;
  struct Ids {
    ParamId ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mproj_w, mproj_b;
  };
  std::vector<Ids> ids_;
  ParamId wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1;
};

}  // namespace zeroshard::examples
