// Checks the GPT example's sizes against memory before it builds the model,
// so that a huge --layers, --dim, --micro-batch, --seq or
// --gradient-accumulation-steps fails in seconds with the flag named
// instead of in std::bad_alloc or the OOM killer (the Fashion-MNIST job's
// check of --hidden, examples/fashion_mnist/preflight.h, does the same).
#pragma once

#include <cstdint>

#include "examples/gpt/gpt_model.h"
#include "parallel/pipeline_schedule.h"

namespace zeroshard::examples {

/// The sizes of a GPT run that decide its memory. dp, tp and pp are the
/// mesh's; stage is the ZeRO stage; element_bytes 2 (bf16) or 4 (fp32).
struct GptRunSizes {
  GptShape shape;
  int micro_batch = 8;   ///< sequences per micro-batch and dp rank
  int seq = 64;          ///< tokens per sequence
  int accumulation = 1;  ///< micro-batches per optimizer step
  int dp = 1, tp = 1, pp = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stage = 0;
  double element_bytes = 4;
  bool param_nvme = false;      ///< offload_param.device nvme: the parameters live in swap files
  bool optimizer_nvme = false;  ///< offload_optimizer.device nvme: master weights, states and gradients do
  bool activation_checkpointing = false;  ///< --activation-checkpointing: block inputs kept, one block recomputed
};

/// One rank's bytes for a GPT run, each part an estimate in bytes (doubles:
/// sizes near 2^31 per flag do not wrap around).
struct GptMemoryEstimate {
  double parameters = 0;     ///< elements of the largest pipeline stage's slice on one tp rank
  double model_states = 0;   ///< parameters x the ZeRO paper's bytes per parameter at the stage and dp, in RAM
  double activations = 0;    ///< forward state of the micro-batches a stage keeps for backward
  double token_buffers = 0;  ///< one step's micro-batches of int32 tokens
  double total() const { return model_states + activations + token_buffers; }
};

/// The estimate of [Note: GPT memory check] (examples/gpt/gpt_preflight.cpp).
/// Pure.
GptMemoryEstimate gpt_memory_estimate(const GptRunSizes& sizes);

/// Throws ConfigError naming the flags that make the run too large when
/// gpt_memory_estimate(sizes).total() exceeds `memory_bytes` (this rank's
/// share of the host's memory): --layers/--dim for the model states,
/// --gradient-accumulation-steps for the token buffers (and for GPipe's
/// activations), --micro-batch/--seq for the activations; the message
/// gives the parts and the memory in GiB.
void check_gpt_fits(const GptRunSizes& sizes, std::uint64_t memory_bytes);

}  // namespace zeroshard::examples
