// A GPT-2-style byte-level decoder (Radford et al., 2019, "Language Models
// are Unsupervised Multitask Learners") on the Engine over a device mesh:
// token and position embeddings, pre-LayerNorm blocks of causal multi-head
// self-attention and a GELU MLP, a final LayerNorm and an LM head tied to
// the token embedding. Forward and backward are written out by hand from
// the tensor-parallel blocks of parallel/ (Megatron-LM layout: attention
// split by heads, MLP column- then row-parallel, vocabulary-parallel
// embedding and cross-entropy); the Engine shards the rank's slices over
// the data-parallel group.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "parallel/layer_norm.h"
#include "parallel/parallel_attention.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/vocab_parallel_cross_entropy.h"
#include "parallel/vocab_parallel_embedding.h"
#include "runtime/engine/engine.h"

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
//
// [Note: GPT pipeline stages]
// With pp > 1 pipeline stages (mesh.pp_size()) stage s holds blocks
// [s L / pp, (s + 1) L / pp) (L = layers; as even as integers allow), the
// first stage also the embeddings, the last also ln_f and the LM head. The
// LM head's weight is a copy of wte on the last stage (unit "lm_head"),
// tied to the first stage's (Engine::tie_parameter over
// Mesh::embedding_group(), as Megatron-LM keeps its shared embedding): the
// two start equal, their gradients are summed, so they stay equal. The
// first stage's units are then "wte" and "wpe" (a tied copy must be laid
// out alike on both stages). Activations between stages are the residual
// stream [batch x seq, D] in fp32; train_batch runs a step's micro-batches
// through parallel/pipeline_executor.h with the schedule asked for.

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
  /// Declares this pipeline stage's parameters in `engine` (not finalized
  /// yet; its mesh is `mesh`) and, with pp > 1 on the first and last stage,
  /// ties wte ([Note: GPT pipeline stages]); records the shape as the
  /// engine's model configuration (Engine::set_model_config: a checkpoint
  /// of another shape, such as other heads at the same width, is refused). Throws ConfigError naming the
  /// sizes when heads does not divide dim, tp does not divide heads, 4 dim
  /// or vocab, or layers < pp.
  Gpt(Engine& engine, const Mesh& mesh, GptShape shape);
  ~Gpt();

  /// After engine.finalize(): sets every parameter from the GPT-2
  /// initialisation of the full model (seeded; the same on every mesh).
  void initialize(std::uint64_t seed);

  /// One micro-batch: forward and backward over `batch` sequences of
  /// `seq` + 1 tokens (row-major [batch, seq + 1]: inputs are the first seq
  /// of each row, targets the last seq), adding the gradient of the mean
  /// cross-entropy (times loss_scale) into the engine's gradients and
  /// reducing them. Returns the mean loss in nats. Collective.
  /// pp = 1 only (InvariantError otherwise).
  double train_micro_batch(std::span<const std::int32_t> tokens, int batch, int seq, double loss_scale);
  /// One gradient-accumulation cycle through the pipeline: the
  /// micro-batches (each laid out as train_micro_batch's tokens, the same
  /// on every stage of a pipeline; their number must be the engine's
  /// gradient_accumulation_steps) run forward and backward in the order of
  /// schedule `kind` (parallel/pipeline_schedule.h), and engine.step() is
  /// called after every micro-batch's backward but the last: the caller's
  /// step() ends the cycle. Any pp, including 1. Returns the mean loss over
  /// the micro-batches (nats), on every stage. Collective over the world.
  /// Throws InvariantError for a wrong number of micro-batches or tokens.
  double train_batch(std::span<const std::vector<std::int32_t>> micro_batches, int batch, int seq,
                     PipelineScheduleKind kind, double loss_scale);
  /// Activation checkpointing (off by default): the forward of a
  /// micro-batch that a backward follows keeps only each block's input, in
  /// the engine's ActivationStore (Engine::activations(): partitioned over
  /// the tensor-parallel group with activation_checkpointing.
  /// partition_activations), and the backward recomputes the block from
  /// it before its gradients, under a "recompute" span. The same
  /// operations on the same values: gradients are bitwise those without.
  void set_activation_checkpointing(bool on) { checkpointing_ = on; }
  bool activation_checkpointing() const { return checkpointing_; }
  /// The last train_batch's timeline on this stage (parallel/pipeline_executor.h).
  const PipelineTimeline& last_timeline() const { return timeline_; }
  /// Most bytes of forward state (activations kept for the backward) this
  /// stage held at once since construction: 1F1B keeps at most min(pp -
  /// stage, m) micro-batches' worth, GPipe m.
  std::size_t peak_activation_bytes() const { return peak_saved_bytes_; }
  /// Forward only: the mean loss of the same layout, on every stage (with
  /// pp > 1 the activations go stage to stage by blocking messages).
  /// Collective.
  double evaluate(std::span<const std::int32_t> tokens, int batch, int seq);
  /// Greedy-free sampling: extends `prompt` by `n` bytes drawn from the
  /// softmax at `temperature`, with a generator seeded by `seed` (the same
  /// on every rank, so every rank draws the same bytes). Collective.
  std::string sample(const std::string& prompt, int n, double temperature, std::uint64_t seed);

  /// The full (unsplit) values of parameter `name` of this pipeline stage: this rank's slice
  /// gathered over the tensor-parallel group and put together along its
  /// split dimension. Collective (engine gather and tp all-gather).
  std::vector<float> full_parameter(const std::string& name);
  /// Names of this pipeline stage's parameters, in declaration order.
  std::vector<std::string> parameter_names() const;
  /// Full shape of parameter `name`.
  std::vector<std::int64_t> full_shape(const std::string& name) const;
  const GptShape& shape() const { return shape_; }
  /// Parameters of the full model (elements; the tied LM head counted once).
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
  struct MicroBatch;  // one micro-batch's forward state on this stage (gpt_micro_batch.h)
  const Param& find(const std::string& name) const;
  bool first_pipeline_stage() const { return mesh_.is_first_pipeline_stage(); }
  bool last_pipeline_stage() const { return mesh_.is_last_pipeline_stage(); }
  /// `value` as the last pipeline stage holds it, on every stage (a
  /// broadcast over the pipeline group; `value` itself at pp = 1).
  /// Collective over the pipeline group.
  double from_last_pipeline_stage(double value);
  /// Elements of the activation between stages for batch x seq tokens.
  std::size_t activation_count(int batch, int seq) const;
  /// This stage's forward of `mb` (its tokens set): `input` is the previous
  /// stage's activation (ignored on the first stage), `output` gets this
  /// stage's (not on the last, whose forward ends in mb's loss). With
  /// `backward_follows` the last stage keeps ln_f, the head (and at pp = 1
  /// the embeddings) unsharded for backward(); otherwise every unit is
  /// resharded and nothing is kept.
  void forward(MicroBatch& mb, const float* input, float* output, bool backward_follows);
  /// Block i's forward (its unit unsharded) from k.x over batch x seq
  /// tokens: fills k's other activations and writes the block's output to
  /// `out`; `tmp` is scratch of the same size (T x dim).
  void block_forward(std::size_t i, int batch, int seq, Block& k, std::vector<float>& out, std::vector<float>& tmp);
  /// This stage's backward of `mb`: from mb's loss (last stage) or the
  /// gradient of the output `grad_output`; writes the gradient of the input
  /// to `grad_input` (not on the first stage); reduces every unit's
  /// gradients into the engine and frees mb's state.
  void backward(MicroBatch& mb, const float* grad_output, float* grad_input);
  /// Runs a forward-only pass stage to stage (evaluate and sample); the
  /// last stage's logits go to `last_logits` when not null. Returns the
  /// loss on the last stage (0 elsewhere).
  double forward_only(std::span<const std::int32_t> tokens, int batch, int seq, std::vector<float>* last_logits);
  void track_saved(std::ptrdiff_t bytes);

  Engine& engine_;
  const Mesh& mesh_;
  GptShape shape_;
  int layer_begin_ = 0, layer_end_ = 0;  ///< this stage's blocks
  GroupId no_decay_ = 0;
  std::vector<Param> params_;
  /// First stage: the embeddings' units ("embed", or "wte" and "wpe" with
  /// pp > 1); last stage: "ln_f" and, with pp > 1, "lm_head".
  std::vector<UnitId> embed_units_, final_units_;
  std::vector<UnitId> block_units_;  ///< this stage's blocks, in order
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
  std::vector<Ids> ids_;  ///< this stage's blocks
  bool checkpointing_ = false;  ///< set_activation_checkpointing
  ParamId wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1;  ///< wte: the embedding's or the head's copy
  std::vector<std::unique_ptr<MicroBatch>> micro_batches_;  ///< train_batch's, by index
  std::vector<double> losses_;                              ///< their losses (last stage)
  std::unique_ptr<PipelineExecutor> executor_;              ///< for executor_count_ activation elements
  std::size_t executor_count_ = 0;
  PipelineTimeline timeline_;
  std::size_t saved_bytes_ = 0, peak_saved_bytes_ = 0;
  /// fp32 buffers of the passes (widened parameters, gradients) kept for
  /// the next unit and pass instead of freed (gpt_model.cpp, ParamAccess).
  std::vector<std::vector<float>> spare_;
  /// Blocks' activation buffers freed by a pass, kept for the next block
  /// instead of freed (take_block / give_block); at most as many as a pass
  /// held at once.
  std::vector<Block> spare_blocks_;
  /// A pass's activation-sized buffers (tokens x width, the MLP's for dg),
  /// kept between passes instead of allocated and zeroed each time.
  struct Scratch {
    std::vector<float> tmp, dh, dx, dg, dpre, out;
  };
  Scratch scratch_;
  /// A block's buffers for a forward: a spare (sizes and contents of its
  /// last use, which block_forward overwrites whole), else empty ones.
  Block take_block();
  /// Gives k's buffers to the spares (its checkpoint must be released) and
  /// leaves k empty.
  void give_block(Block& k);
};

}  // namespace zeroshard::examples
