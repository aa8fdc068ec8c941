#include "examples/gpt/gpt_preflight.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/plan/zero_formulas.h"

namespace zeroshard::examples {

// [Note: GPT memory check]
// An estimate, not the ledger (the engine's byte-exact estimate needs the
// declared model, which is what a huge --layers cannot build): one rank
// holds, with D = dim, H = heads, L = layers, T = micro-batch x seq tokens,
// tp / pp / dp the mesh and m the micro-batches of a step:
//  - parameters of the largest pipeline stage's tensor slice: ceil(L / pp)
//    blocks of (12 D^2 + 7 D) / tp + 6 D elements ([Note: GPT parameters])
//    plus the embeddings and ln_f, (256 D) / tp + context D + 2 D;
//  - model states: those parameters times the ZeRO paper's bytes per
//    parameter at the stage and dp (runtime/plan/zero_formulas.h; K = 12 in
//    mixed precision, 8 in fp32), plus the fp32 gradient accumulator of
//    mixed precision (4 bytes, sharded over dp at stages 2 and 3); only the
//    parts in memory count: offload_param on nvme takes the parameters
//    out, offload_optimizer on nvme the optimizer states, the accumulator
//    and (stages 2 and 3) the gradients, which then live in swap files;
//  - activations: per kept micro-batch and block, 4 D + 4 + 12 D / tp + (H /
//    tp) seq floats per token (x, the two LayerNorms' outputs, means and
//    reciprocal deviations, the MLP's two hidden activations, q/k/v, the
//    attention context and probabilities: Gpt::MicroBatch::bytes()), plus
//    2 D + 2 + 256 / tp per token for ln_f and the logits; 1F1B keeps
//    min(pp, m) micro-batches, GPipe m; with activation checkpointing a
//    block keeps only its input, D floats per token, until the backward
//    recomputes it: the peak, at the last block's recompute, is L - 1
//    inputs and one block's full set (the partitioned inputs of
//    partition_activations are not divided by tp: an upper bound);
//  - token buffers: the step's m micro-batches of micro-batch x (seq + 1)
//    int32 tokens, and the dp-wide window they are drawn from.
// Transient buffers (gathered units, gradients of activations) are left
// out, so the check refuses only runs that cannot fit.

namespace {

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

GptMemoryEstimate gpt_memory_estimate(const GptRunSizes& s) {
  const double d = s.shape.dim, heads = s.shape.heads, tp = s.tp, seq = s.seq;
  const double blocks = std::ceil(static_cast<double>(s.shape.layers) / std::max(1, s.pp));
  GptMemoryEstimate e;
  e.parameters = blocks * ((12 * d * d + 7 * d) / tp + 6 * d) + static_cast<double>(s.shape.vocab) * d / tp +
                 static_cast<double>(s.shape.context) * d + 2 * d;
  const bool mixed = s.element_bytes < 4;
  const ZeroPaperBytes z = zero_paper_bytes(s.stage, s.dp, s.element_bytes, mixed ? 12.0 : 8.0);
  double optimizer_side = z.optimizer + (mixed ? (s.stage >= 2 ? 4.0 / s.dp : 4.0) : 0.0);
  double gradients = z.gradients;
  if (s.optimizer_nvme) {
    optimizer_side = 0;
    if (s.stage >= 2) gradients = 0;
  }
  const double parameters = s.param_nvme && s.stage == 3 ? 0.0 : z.parameters;
  e.model_states = e.parameters * (parameters + gradients + optimizer_side);
  const double tokens = static_cast<double>(s.micro_batch) * seq;
  const double per_block = 4 * d + 4 + 12 * d / tp + heads / tp * seq;
  const double kept_blocks = s.activation_checkpointing ? (blocks - 1) * d + per_block : blocks * per_block;
  const double per_micro_batch = tokens * (kept_blocks + 2 * d + 2 + s.shape.vocab / tp) * 4.0;
  const double kept = s.schedule == PipelineScheduleKind::gpipe ? s.accumulation
                                                                  : std::min(s.pp, s.accumulation);
  e.activations = kept * per_micro_batch;
  const double row = static_cast<double>(s.micro_batch) * (seq + 1) * 4.0;
  e.token_buffers = static_cast<double>(s.accumulation) * row + static_cast<double>(s.dp) * row;
  return e;
}

void check_gpt_fits(const GptRunSizes& s, std::uint64_t memory_bytes) {
  const GptMemoryEstimate e = gpt_memory_estimate(s);
  const double memory = static_cast<double>(memory_bytes);
  if (e.total() <= memory) return;
  const std::string parts = fmt::format(
      "{:.3g} GiB in all: model states {:.3g} GiB, activations {:.3g} GiB, token buffers {:.3g} GiB; this rank's "
      "share of the memory is {:.3g} GiB",
      gib(e.total()), gib(e.model_states), gib(e.activations), gib(e.token_buffers), gib(memory));
  if (e.model_states > memory) {
    throw ConfigError(fmt::format(
        "--layers {} --dim {}: {:.4g} parameters on the largest pipeline stage's tensor slice need {:.3g} GiB of "
        "model states on each rank (ZeRO stage {}, dp {}, tp {}, pp {}) ({}); use fewer --layers or a smaller --dim, "
        "or spread the model with --tp, --pp{}",
        s.shape.layers, s.shape.dim, e.parameters, gib(e.model_states), s.stage, s.dp, s.tp, s.pp, parts,
        s.stage < 3 ? " or a higher ZeRO stage" : ""));
  }
  if (e.token_buffers >= e.activations) {
    throw ConfigError(fmt::format(
        "--gradient-accumulation-steps {}: one step's {} micro-batches of {} x {} tokens need {:.3g} GiB of token "
        "buffers ({}); use fewer micro-batches per step",
        s.accumulation, s.accumulation, s.micro_batch, s.seq + 1, gib(e.token_buffers), parts));
  }
  const bool gpipe_keeps_all = s.schedule == PipelineScheduleKind::gpipe && s.accumulation > 1;
  throw ConfigError(fmt::format(
      "--micro-batch {} --seq {}{}: the activations kept for the backward need {:.3g} GiB ({}); use a smaller "
      "--micro-batch or --seq{}",
      s.micro_batch, s.seq,
      gpipe_keeps_all ? fmt::format(" --gradient-accumulation-steps {} (GPipe keeps every micro-batch)", s.accumulation)
                      : std::string(),
      gib(e.activations), parts, gpipe_keeps_all ? ", fewer micro-batches, or --schedule 1f1b" : ""));
}

}  // namespace zeroshard::examples
