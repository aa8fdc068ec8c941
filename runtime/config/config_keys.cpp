#include "runtime/config/config_keys.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "runtime/config/config_options.h"

namespace zeroshard {

namespace {

using S = KeyStatus;
using T = KeyType;

// Shorthands for the rows below.
ConfigKey impl(const char* path, T type, const char* dflt, const char* what, bool auto_ok = false,
               const char* only_for = "") {
  return ConfigKey{path, type, S::implemented, dflt, what, auto_ok, "", only_for, "", ""};
}
ConfigKey quiet(const char* path, T type, const char* what, const char* neutral = "", const char* refusal = "") {
  return ConfigKey{path, type, S::no_effect, "", what, false, neutral, "", "", refusal};
}
ConfigKey refuse(const char* path, T type, const char* why) {
  return ConfigKey{path, type, S::refused, "", why, false, "", "", "", ""};
}
ConfigKey legacy(const char* path, T type, const char* maps_to) {
  return ConfigKey{path, type, S::legacy, "", "older DeepSpeed spelling", false, "", "", maps_to, ""};
}

std::vector<ConfigKey> make_table() {
  const char* betas = "Adam,AdamW,Adam8bit,AdamW8bit,Lion";
  const char* eps = "Adam,AdamW,Adam8bit,AdamW8bit,Adagrad";
  const char* q8 = "Adam8bit,AdamW8bit";
  const char* fp_adam = "Adam,AdamW";
  const char* decay = "WarmupDecayLR,WarmupCosineLR";
  const char* minmax = "WarmupLR,WarmupDecayLR";
  return {
      // top level
      impl("train_batch_size", T::int64, "micro x accumulation x world size",
           "global batch per optimizer step; any two of the three batch keys give the third at the world size "
           "(EngineConfig::resolve_batch), all three must agree", true),
      impl("train_micro_batch_size_per_gpu", T::int64, "1", "samples per rank per micro-batch (>= 1)", true),
      impl("gradient_accumulation_steps", T::int64, "1", "micro-batches per optimizer step (>= 1)", true),
      impl("gradient_clipping", T::float64, "0", "max global L2 norm of the gradients (torch clip_grad_norm_); 0 = off",
           true),
      impl("steps_per_print", T::int64, "10", "how often the example programs log (>= 1)"),
      impl("communication_data_type", T::string, "fp32",
           "fp32, bf16 or fp16, in any case as DeepSpeed reads it: the dtype gradients travel in (16-bit gradients "
           "are widened, reduced in fp32 and rounded once by default); \"bfp16\", DeepSpeed's spelling of bf16 "
           "before 0.14.1, is read as bf16 with a note"),
      impl("data_types", T::section, "", "DeepSpeed's data_types section"),
      impl("data_types.grad_accum_dtype", T::string, "fp32",
           "the dtype micro-batch gradients are summed in under bf16 / fp16 mixed precision (DeepSpeed #1800): fp32 "
           "(an fp32 accumulator beside the 16-bit gradient buffer, full at stages 0/1, sharded at 2/3), or the "
           "compute dtype (bf16 / fp16: no accumulator, a 16-bit sum, with one warning line); any case"),
      impl("optimizer", T::section, "AdamW", "the optimizer: {type, params}"),
      impl("optimizer.type", T::string, "AdamW",
           "Adam, AdamW, SGD, Lion, Adagrad or Muon (case-insensitive); as in DeepSpeed, Adam means AdamW unless "
           "adam_w_mode is false. Muon (torch.optim.Muon's update on whole matrices, any ZeRO stage) needs "
           "muon_params and adamw. AdamW8bit / Adam8bit (bitsandbytes' names): the same update with 8-bit "
           "blockwise exp_avg and exp_avg_sq (block_size, min_8bit_size). Other DeepSpeed optimizers (Lamb, OneBitAdam, OneBitLamb, ZeroOneAdam, MuAdam, "
           "...) are refused"),
      impl("optimizer.params", T::section, "", "the optimizer's hyper-parameters"),
      impl("optimizer.params.lr", T::float32, "0.001 (Adagrad 0.01)",
           "learning rate (>= 0); Muon: its matrices' (optimizer.params.adamw.lr: the others')", true),
      impl("optimizer.params.betas", T::betas, "[0.9, 0.999]",
           "Adam's or Lion's beta1, beta2, each in [0, 1) (Lion: beta1 mixes the update's sign, beta2 the "
           "momentum)", true, betas),
      impl("optimizer.params.eps", T::float32, "1e-8 (Adagrad 1e-10)", "Adam's or Adagrad's epsilon (> 0)", true,
           eps),
      impl("optimizer.params.weight_decay", T::float32, "0 (Muon 0.1)",
           "decoupled (AdamW, Lion, Muon) or L2 (Adam, SGD, Adagrad) decay (>= 0)", true),
      impl("optimizer.params.adam_w_mode", T::boolean, "true",
           "Adam: false selects Adam with L2 decay; AdamW stays AdamW whatever it says, as in DeepSpeed (Accelerate's "
           "templates set it)", false, "Adam,AdamW,Adam8bit,AdamW8bit"),
      impl("optimizer.params.block_size", T::int64, "256",
           "8-bit states: elements per quantization block, one fp32 absmax each (power of two, 64 to 4096)", false,
           q8),
      impl("optimizer.params.min_8bit_size", T::int64, "4096",
           "8-bit states: units (flat parameter buffers) with fewer elements keep fp32 states (>= 0), as "
           "bitsandbytes' min_8bit_size for tensors", false, q8),
      impl("optimizer.params.state_dtype", T::string, "fp32",
           "Adam/AdamW state storage: fp32, or bf16 (exp_avg and exp_avg_sq kept as bf16, 2 bytes each; the "
           "parameters stay fp32; round to nearest even unless stochastic_rounding); 8-bit states are chosen by "
           "optimizer.type", false, fp_adam),
      impl("optimizer.params.stochastic_rounding", T::boolean, "false",
           "bf16 states: stochastic rounding instead of round-to-nearest-even, seeded by seed and the same at "
           "every ZeRO stage, offload tier and world size", false, fp_adam),
      impl("optimizer.params.seed", T::int64, "0", "bf16 states: seed of the stochastic rounding (>= 0)", false,
           fp_adam),
      impl("optimizer.params.momentum", T::float32, "0 (Muon 0.95)",
           "SGD momentum (>= 0); Muon's beta in momentum.lerp_(grad, 1 - beta), in [0, 1)", false, "SGD,Muon"),
      impl("optimizer.params.dampening", T::float32, "0", "SGD dampening", false, "SGD"),
      impl("optimizer.params.nesterov", T::boolean, "false (Muon true)",
           "Nesterov momentum: SGD's (needs momentum > 0, dampening 0), or Muon's update = grad.lerp(momentum, beta)",
           false, "SGD,Muon"),
      impl("optimizer.params.ns_steps", T::int32, "5", "Muon: Newton-Schulz iterations (0 to 100)", false, "Muon"),
      impl("optimizer.params.adjust_lr_fn", T::string, "original",
           "Muon's update scale, as torch.optim.Muon: \"original\" sqrt(max(1, rows / cols)), or "
           "\"match_rms_adamw\" 0.2 sqrt(max(rows, cols)) (Moonshot AI 2025)", false, "Muon"),
      impl("optimizer.params.ns_dtype", T::string, "fp32",
           "Muon: the Newton-Schulz iteration's dtype, fp32 or bf16 (fp32 accumulation, as the reference)", false,
           "Muon"),
      impl("optimizer.params.muon_params", T::any, "(required)",
           "Muon: list of fnmatch patterns of the parameter names Muon updates (2-D matrices of the default "
           "parameter group; other groups keep theirs); the others train with AdamW; a pattern that names no "
           "such parameter is an error", false, "Muon"),
      impl("optimizer.params.adamw", T::section, "(required)",
           "Muon: the AdamW of the parameters muon_params does not name (embeddings, LM head, biases, norms)", false,
           "Muon"),
      impl("optimizer.params.adamw.lr", T::float32, "0.001", "Muon's AdamW: learning rate (>= 0)", false, "Muon"),
      impl("optimizer.params.adamw.betas", T::betas, "[0.9, 0.999]", "Muon's AdamW: beta1, beta2, each in [0, 1)",
           false, "Muon"),
      impl("optimizer.params.adamw.eps", T::float32, "1e-8", "Muon's AdamW: epsilon (> 0)", false, "Muon"),
      impl("optimizer.params.adamw.weight_decay", T::float32, "0", "Muon's AdamW: decoupled weight decay (>= 0)",
           false, "Muon"),
      impl("optimizer.params.lr_decay", T::float32, "0",
           "Adagrad's learning-rate decay (>= 0): step t uses lr / (1 + (t - 1) * lr_decay), as torch.optim.Adagrad",
           false, "Adagrad"),
      impl("optimizer.params.initial_accumulator_value", T::float32, "0",
           "Adagrad's starting sum of squared gradients (>= 0), as torch.optim.Adagrad", false, "Adagrad"),
      quiet("optimizer.params.torch_adam", T::boolean, "DeepSpeed's choice of torch's Adam over its fused kernel; "
            "same update"),
      quiet("optimizer.params.bias_correction", T::boolean, "zeroshard's Adam always bias-corrects", "true"),
      quiet("optimizer.params.amsgrad", T::boolean, "zeroshard has no AMSGrad variant", "false"),
      impl("scheduler", T::section, "none", "learning-rate schedule: {type, params} (optimizer/lr_schedule.h)"),
      impl("scheduler.type", T::string, "", "WarmupLR, WarmupDecayLR or WarmupCosineLR"),
      impl("scheduler.params", T::section, "", "the schedule's parameters"),
      impl("scheduler.params.warmup_min_lr", T::numbers, "0", "lr at step 0", true, minmax),
      impl("scheduler.params.warmup_max_lr", T::numbers, "0.001", "lr at the end of warm-up", true, minmax),
      impl("scheduler.params.warmup_num_steps", T::int64, "1000", "warm-up length in optimizer steps", true),
      impl("scheduler.params.warmup_type", T::string, "log", "log or linear warm-up"),
      impl("scheduler.params.total_num_steps", T::int64, "", "steps of the whole schedule (> 0)", true, decay),
      impl("scheduler.params.warmup_min_ratio", T::float64, "0", "WarmupCosineLR: first lr / optimizer lr", false,
           "WarmupCosineLR"),
      impl("scheduler.params.cos_min_ratio", T::float64, "0.0001", "WarmupCosineLR: final lr / optimizer lr", false,
           "WarmupCosineLR"),
      quiet("scheduler.params.last_batch_iteration", T::int64,
            "DeepSpeed's resume position; zeroshard resumes the schedule from its checkpoint", "-1"),
      impl("fp16", T::section, "", "fp16 mixed precision with loss scaling and fp32 master weights"),
      impl("fp16.enabled", T::boolean, "false", "parameters and gradients in fp16", true),
      impl("fp16.loss_scale", T::float64, "0", "0 = dynamic loss scale, > 0 = static scale"),
      impl("fp16.initial_scale_power", T::int32, "16", "dynamic: first scale 2^power, in [0, 64]"),
      impl("fp16.loss_scale_window", T::int64, "1000", "clean steps before the scale doubles (>= 1)"),
      impl("fp16.hysteresis", T::int32, "2", "overflows tolerated before halving (>= 1)"),
      impl("fp16.min_loss_scale", T::float64, "1", "floor of the dynamic scale (> 0)"),
      quiet("fp16.auto_cast", T::boolean, "DeepSpeed's cast of the model's inputs to fp16, off", "false",
            "DeepSpeed would cast the model's inputs to fp16; the program owns its inputs here"),
      quiet("fp16.consecutive_hysteresis", T::boolean, "zeroshard's hysteresis counts any overflows", "false"),
      quiet("fp16.fp16_master_weights_and_grads", T::boolean, "zeroshard always keeps fp32 master weights", "false"),
      impl("bf16", T::section, "", "bf16 mixed precision with fp32 master weights"),
      impl("bf16.enabled", T::boolean, "false", "parameters and gradients in bf16", true),
      // DeepSpeed reads only enabled (and immediate_grad_update) from bf16;
      // templates copy the fp16 section's loss-scale keys into it.
      quiet("bf16.loss_scale", T::float64, "DeepSpeed ignores loss scaling keys under bf16 (bf16 is never scaled); so does zeroshard"),
      quiet("bf16.initial_scale_power", T::int32, "as bf16.loss_scale"),
      quiet("bf16.loss_scale_window", T::int64, "as bf16.loss_scale"),
      quiet("bf16.hysteresis", T::int32, "as bf16.loss_scale"),
      quiet("bf16.min_loss_scale", T::float64, "as bf16.loss_scale"),
      legacy("bfloat16", T::section, "bf16"),
      impl("zero_optimization", T::section, "", "ZeRO sharding; DeepSpeed's older form true / false means stage 1 / 0"),
      impl("zero_optimization.stage", T::int32, "0", "0 (DDP), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)"),
      impl("zero_optimization.reduce_bucket_size", T::count, "5e8",
           "gradient elements per reduction bucket (> 0); results are bitwise the same for any size with "
           "zeroshard.reduction_order \"rank\" (the default; runtime/sharding/grad_reducer.h). \"auto\" with "
           "ConfigOptions::hidden_size: hidden^2", true),
      impl("zero_optimization.allgather_bucket_size", T::count, "5e8",
           "parameter elements per bucket of the stage 1/2 post-step all-gather (> 0)"),
      impl("zero_optimization.overlap_comm", T::boolean, "true at stage 3, else false",
           "bucket collectives overlap backward; stage 3 prefetches the next unit"),
      impl("zero_optimization.contiguous_gradients", T::boolean, "true",
           "only true: gradients are always one flat buffer per unit"),
      impl("zero_optimization.sub_group_size", T::count, "1e9",
           "optimizer-state elements per swap-pipeline stage, rounded down to a multiple of 4096; 0 (axolotl's "
           "templates) or less than 4096 is the smallest sub-group, 4096 elements (DeepSpeed: one parameter each); "
           "results do not depend on it"),
      impl("zero_optimization.offload_optimizer", T::section, "", "offload tier of optimizer state (stages 1-3)"),
      impl("zero_optimization.offload_optimizer.device", T::string, "none", "none, cpu or nvme"),
      impl("zero_optimization.offload_optimizer.nvme_path", T::string, "", "swap folder (required with nvme)"),
      impl("zero_optimization.offload_optimizer.buffer_count", T::int32, "4", "staging buffer sets (>= 1)"),
      impl("zero_optimization.offload_optimizer.pin_memory", T::boolean, "false",
           "page-locked host buffers (needs CUDA and a device)"),
      impl("zero_optimization.offload_optimizer.pipeline_read", T::boolean, "true", "read sub-group i+1 during i"),
      impl("zero_optimization.offload_optimizer.pipeline_write", T::boolean, "true", "write behind the updates"),
      refuse("zero_optimization.offload_optimizer.ratio", T::any,
             "partial offload is not implemented: the whole shard goes to the tier"),
      refuse("zero_optimization.offload_optimizer.fast_init", T::any, "not implemented"),
      impl("zero_optimization.offload_param", T::section, "", "offload tier of parameter shards (stage 3)"),
      impl("zero_optimization.offload_param.device", T::string, "none", "none, cpu or nvme"),
      impl("zero_optimization.offload_param.nvme_path", T::string, "", "swap folder (required with nvme)"),
      impl("zero_optimization.offload_param.buffer_count", T::int32, "5", "swap-in buffers (>= 2)"),
      impl("zero_optimization.offload_param.buffer_size", T::count, "1e8", "elements per swap-in buffer"),
      impl("zero_optimization.offload_param.max_in_cpu", T::count, "1e9",
           "shard elements kept in host memory although device is nvme"),
      impl("zero_optimization.offload_param.pin_memory", T::boolean, "false", "as for offload_optimizer"),
      legacy("zero_optimization.cpu_offload", T::boolean, "offload_optimizer.device \"cpu\" (true) or nothing (false)"),
      legacy("zero_optimization.cpu_offload_param", T::boolean, "offload_param.device \"cpu\" (true) or nothing (false)"),
      legacy("zero_optimization.cpu_offload_use_pin_memory", T::boolean,
             "pin_memory of the tiers cpu_offload / cpu_offload_param turn on"),
      quiet("zero_optimization.allgather_partitions", T::boolean,
            "all-gather vs broadcasts of the updated shards; same values"),
      quiet("zero_optimization.reduce_scatter", T::boolean, "reduce-scatter vs all-reduce of gradients; same values"),
      quiet("zero_optimization.round_robin_gradients", T::boolean, "a copy schedule for cpu offload; same values"),
      quiet("zero_optimization.ignore_unused_parameters", T::boolean,
            "unused parameters get zero gradients; nothing is checked"),
      quiet("zero_optimization.use_multi_rank_bucket_allreduce", T::boolean, "a collective choice; same values"),
      quiet("zero_optimization.memory_efficient_linear", T::boolean, "a kernel choice of DeepSpeed's stage 3"),
      quiet("zero_optimization.load_from_fp32_weights", T::boolean,
            "zeroshard's checkpoints always restore fp32 master weights", "true"),
      quiet("zero_optimization.elastic_checkpoint", T::boolean,
            "zeroshard's checkpoints always reshard at any world size, which is what true asks for"),
      quiet("zero_optimization.legacy_stage1", T::boolean, "there is one stage 1", "false"),
      impl("zero_optimization.zero_quantized_weights", T::boolean, "false",
           "ZeRO++ qwZ (stage 3): each parameter all-gather moves int8 blocks with one fp32 scale per block "
           "(zeroshard.zeropp.weight_bits, weight_block_size) and dequantizes them into the full buffer; the "
           "master weights and checkpoints stay exact"),
      impl("zero_optimization.zero_hpz_partition_size", T::int64, "1",
           "ZeRO++ hpZ (stage 3): k > 1 keeps a secondary shard of each unit's parameters over groups of k "
           "consecutive ranks (a node); a unit's all-gathers after its first in a step run inside the group, the "
           "secondary copy is rebuilt after every optimizer step; k must divide the data-parallel world size"),
      impl("zero_optimization.zero_quantized_gradients", T::boolean, "false",
           "ZeRO++ qgZ (stages 2/3): the gradient reduce-scatter becomes a quantized all-to-all inside each node, "
           "an fp32 sum in rank order, a quantized all-to-all across nodes and an fp32 sum in node order "
           "(zeroshard.zeropp.gradient_bits, gradient_block_size, error_feedback); the plain reduce-scatter "
           "with one log line where the nodes are uneven or not placed node by node"),
      quiet("zero_optimization.mics_shard_size", T::int64, "MiCS sharding: not implemented", "-1"),
      impl("zero_optimization.stage3_prefetch_bucket_size", T::count, "1",
           "stage 3: the prefetch all-gathers the units the recorded order uses next while those walked weigh less "
           "than this many elements: 1 = the next unit, 0 = none (DeepSpeed's default 5e7 prefetches far ahead; "
           "runtime/sharding/unsharder.h)", true),
      impl("zero_optimization.stage3_max_live_parameters", T::count, "1e9",
           "stage 3: the most gathered elements (padded, of units not persistent) that prefetches and kept units "
           "may make; only units the loop holds unsharded itself pass it"),
      impl("zero_optimization.stage3_max_reuse_distance", T::count, "0",
           "stage 3: a unit used again within this many elements (of the units unsharded in between) stays "
           "gathered; 0 = only when it is used next (DeepSpeed's default 1e9 keeps a model under 1e9 elements "
           "gathered from forward to backward)"),
      impl("zero_optimization.stage3_param_persistence_threshold", T::count, "0",
           "stage 3: a unit whose parameters all have at most this many elements stays gathered on every rank, "
           "re-gathered once after each optimizer step (ledger: persistent units); 0 = none (DeepSpeed's 1e5 "
           "applies per tensor; zeroshard gathers per unit)", true),
      impl("zero_optimization.stage3_model_persistence_threshold", T::count, "unlimited",
           "stage 3: the most parameter elements of all persistent units together (units in declaration order)"),
      legacy("zero_optimization.prefetch_bucket_size", T::count, "zero_optimization.stage3_prefetch_bucket_size"),
      legacy("zero_optimization.max_live_parameters", T::count, "zero_optimization.stage3_max_live_parameters"),
      legacy("zero_optimization.max_reuse_distance", T::count, "zero_optimization.stage3_max_reuse_distance"),
      legacy("zero_optimization.param_persistence_threshold", T::count,
             "zero_optimization.stage3_param_persistence_threshold"),
      legacy("zero_optimization.model_persistence_threshold", T::count,
             "zero_optimization.stage3_model_persistence_threshold"),
      impl("zero_optimization.stage3_gather_16bit_weights_on_model_save", T::boolean, "false",
           "save_checkpoint also writes model.safetensors into the checkpoint: every parameter's full tensor in the "
           "compute dtype (F32, BF16 or F16), gathered to rank 0 one unit at a time at stage 3; on a tp > 1 mesh "
           "each tp rank's slices in its tp-NN checkpoint (docs/checkpoint-format.md, \"Consolidated weights\"); "
           "any stage", true),
      legacy("zero_optimization.stage3_gather_fp16_weights_on_model_save", T::boolean,
             "zero_optimization.stage3_gather_16bit_weights_on_model_save"),
      legacy("zero_optimization.gather_16bit_weights_on_model_save", T::boolean,
             "zero_optimization.stage3_gather_16bit_weights_on_model_save"),
      quiet("zero_optimization.stage3_module_granularity_threshold", T::count,
            "groups small torch modules into one fetch; zeroshard's fetch granularity is the unit the program "
            "declares"),
      quiet("zero_optimization.stage3_use_all_reduce_for_fetch_params", T::boolean,
            "an all-reduce instead of an all-gather to fetch parameters; same values"),
      legacy("zero_optimization.module_granularity_threshold", T::count,
             "zero_optimization.stage3_module_granularity_threshold"),
      legacy("zero_optimization.use_all_reduce_for_fetch_params", T::boolean,
             "zero_optimization.stage3_use_all_reduce_for_fetch_params"),
      legacy("allgather_size", T::count, "zero_optimization.allgather_bucket_size (with zero_optimization true)"),
      impl("aio", T::section, "", "the NVMe I/O engine (offload/io/aio_config.h)"),
      impl("aio.block_size", T::int64, "1048576", "bytes per I/O piece, a multiple of 4096"),
      impl("aio.queue_depth", T::int32, "32", "io_uring pieces in flight, 1..4096"),
      impl("aio.intra_op_parallelism", T::int32, "1", "threads of the thread-pool fallback engine, 1..256"),
      legacy("aio.thread_count", T::int32, "aio.intra_op_parallelism"),
      impl("aio.single_submit", T::boolean, "false", "io_uring: one submit call per piece"),
      impl("aio.overlap_events", T::boolean, "true", "io_uring: refill the queue on each completion"),
      impl("aio.use_gds", T::boolean, "false", "only false: there is no GPUDirect Storage path"),
      impl("zeroshard", T::section, "", "zeroshard's own settings"),
      impl("zeroshard.strict", T::boolean, "false",
           "true: keys accepted without effect and legacy spellings are errors (also ConfigOptions::strict)"),
      impl("zeroshard.trace", T::section, "", "Chrome traces per rank and merged (Engine::write_trace)"),
      impl("zeroshard.trace.enabled", T::boolean, "false", "record spans of collectives, waits, optimizer, swap I/O and the loop"),
      impl("zeroshard.trace.output_path", T::string, "\"zeroshard-trace\"",
           "directory of trace-rank<r>.json and the merged trace.json"),
      impl("zeroshard.collective_check", T::boolean, "false",
           "compare every rank's collective fingerprint before each collective; a mismatch is the same error on "
           "every rank naming the odd rank (one extra all-gather per collective)"),
      impl("zeroshard.collective_timeout_s", T::float64, "0",
           "> 0: a collective not complete after this many seconds ends the job naming every rank's collective "
           "(comm/traced/collective_watchdog.h); 0 = off"),
      impl("zeroshard.reduction_order", T::string, "\"rank\"",
           "\"rank\": every gradient reduction sums each element's contributions rank 0 + rank 1 + ... left to "
           "right (all-to-all, local sum, all-gather), so bucket sizes, overlap_comm, offload tiers and, without "
           "gradient accumulation, stages 0-3 give bitwise the same results at a world size; \"native\": MPI's / NCCL's own all-reduce and "
           "reduce-scatter, whose order depends on the stage and message size (comm/ordered_reduce.h)"),
      impl("zeroshard.zeropp", T::section, "", "the wire formats of ZeRO++'s options (runtime/config/zeropp_config.h)"),
      impl("zeroshard.zeropp.weight_bits", T::int32, "8", "qwZ's code width: 8 or 4 bits"),
      impl("zeroshard.zeropp.weight_block_size", T::int64, "64",
           "qwZ: elements per fp32 scale, a power of two from 16 to 8192"),
      impl("zeroshard.zeropp.gradient_bits", T::int32, "8",
           "qgZ's code width: 8 or 4 bits (both hops; 4 halves the bytes, best with error_feedback)"),
      impl("zeroshard.zeropp.gradient_block_size", T::int64, "256",
           "qgZ: elements per fp32 scale, a power of two from 16 to 8192"),
      impl("zeroshard.zeropp.error_feedback", T::boolean, "false",
           "qgZ: each rank keeps its quantization error of both hops per unit (fp32, in the ledger) and adds it to "
           "the next micro-batch's gradient; zeroed where a block overflowed; not saved in checkpoints; refused "
           "with fp16's dynamic loss scale"),
      impl("zeroshard.zeropp.ranks_per_node", T::int64, "0",
           "qgZ's nodes: 0 = the hosts, from the ranks' host names; n > 0 = ranks [k n, (k + 1) n) as node k"),
      impl("zeroshard.max_consecutive_skipped_steps", T::int64, "100",
           "this many optimizer steps in a row skipped for Inf/NaN gradients (fp16 overflow, or NaN in any "
           "precision) end the run with the same error on every rank naming the step and the first non-finite "
           "unit; 0 = no limit. Every skipped step is counted (StepResult::skipped_steps) and the 1st, 2nd, "
           "4th, 8th, ... print one line"),
      impl("zeroshard.overlap_optimizer_step", T::boolean, "false",
           "stage 3 with offload_optimizer on nvme: step() starts the swapped optimizer update on a background "
           "thread and returns; each unit's next unshard waits for its own update (the updated shard handed over "
           "in memory), every other call that touches state for the whole step. The same bits as the "
           "synchronous step; the loop's wait shows as optimizer time (runtime/update/deferred_step.h)"),
      impl("parameter_server", T::section, "",
           "zeroshard's parameter-server layout (runtime/ps/param_server.h): S server ranks hold the fp32 "
           "parameters and optimizer states of the workers' shards; the other ranks train"),
      impl("parameter_server.servers", T::int64, "0",
           "server ranks S (0: off); the workers are the other world - S ranks. Stages 1-3, fp32 training; each "
           "server holds the shards of workers w with w % S equal to its index, on offload_optimizer's tier"),
      impl("parameter_server.staleness", T::int64, "0",
           "s >= 0: after step k a worker trains on the parameters of step max(0, k - s) (push \"direct\": or "
           "of a later step, the newest reply that has arrived); 0 is synchronous and bitwise the all-reduce "
           "engine's result"),
      impl("parameter_server.staleness_aware_lr", T::boolean, "false",
           "push \"direct\" only: a server applies a push whose parameters missed tau of its updates at "
           "lr / max(1, tau) (staleness-aware async SGD, Zhang et al. 2016)"),
      impl("parameter_server.push", T::string, "reduce",
           "\"reduce\": the workers reduce the gradient among themselves and worker w pushes window w to server "
           "w % S (deterministic; a slow worker delays every step); \"direct\": each worker pushes its own "
           "gradient, window s to server s, and the servers apply every push as one update in arrival order "
           "(asynchronous SGD within the staleness: a slow worker delays only itself; no checkpoints; with "
           "communication_data_type bf16 the pushed gradients travel in bf16)"),
      impl("parameter_server.placement", T::any, "[]",
           "host names (gethostname) the servers run on: the servers are the lowest ranks on those hosts, taken "
           "host by host in this order; empty: the last S ranks"),
      impl("wall_clock_breakdown", T::boolean, "false",
           "every steps_per_print steps rank 0 prints the step breakdown (compute, exposed and hidden "
           "communication, optimizer, swap I/O wait, other; min/median/max over ranks) and the straggler "
           "line (runtime/config/observe_config.h)"),
      quiet("memory_breakdown", T::boolean, "DeepSpeed's memory log; see the engine's ledger"),
      quiet("dump_state", T::boolean, "DeepSpeed prints its config at start"),
      impl("activation_checkpointing", T::section, "",
           "how the checkpoints a loop keeps through Engine::activations() are held (runtime/activation/"
           "activation_store.h); what to recompute is the loop's choice (examples/gpt: --activation-checkpointing)"),
      impl("activation_checkpointing.partition_activations", T::boolean, "false",
           "each checkpoint (the same values on every tensor-parallel rank) is split over the tensor-parallel "
           "group, 1/tp kept per rank, and all-gathered when the backward restores it (ZeRO-R's Pa)"),
      quiet("activation_checkpointing.cpu_checkpointing", T::boolean,
            "DeepSpeed moves partitioned checkpoints to host memory: the cpu engine's checkpoints are in host "
            "memory already (memory, not values)"),
      quiet("activation_checkpointing.contiguous_memory_optimization", T::boolean,
            "DeepSpeed copies checkpoints into one preallocated buffer against fragmentation; each is its own "
            "buffer here (memory, not values)"),
      quiet("activation_checkpointing.number_checkpoints", T::any,
            "the size of contiguous_memory_optimization's buffer"),
      quiet("activation_checkpointing.synchronize_checkpoint_boundary", T::boolean,
            "a CUDA synchronize at each checkpoint: timing only"),
      quiet("activation_checkpointing.profile", T::boolean,
            "DeepSpeed logs the checkpoint functions' times; the engine's trace (zeroshard.trace) shows the "
            "loop's recompute spans"),
      quiet("flops_profiler", T::object,
            "DeepSpeed's FLOPs profiler prints a per-module profile; zeroshard has none (wall_clock_breakdown prints "
            "its step breakdown)"),
      impl("csv_monitor", T::section, "", "DeepSpeed's CSV monitor (runtime/observe/csv_monitor.h): one file per "
           "series under output_path/job_name, written by world rank 0 at each optimizer step"),
      impl("csv_monitor.enabled", T::boolean, "false",
           "write Train/Samples/train_loss (when the loop reports its loss), lr, loss_scale (fp16), and zeroshard's "
           "grad_norm, skipped_steps, step_time_ms and samples_per_second"),
      impl("csv_monitor.output_path", T::string, "\"\" (the working directory)", "folder of the job folder"),
      impl("csv_monitor.job_name", T::string, "\"DeepSpeedJobName\"", "the job folder's name"),
      quiet("tensorboard", T::object, "DeepSpeed's TensorBoard monitor, off", R"({"enabled": false})",
            "zeroshard writes no TensorBoard event files (docs/config.md, \"Monitor\"): the run would log nothing "
            "there; set tensorboard.enabled to false and use csv_monitor, which writes the same series"),
      quiet("wandb", T::object, "DeepSpeed's Weights & Biases monitor, off", R"({"enabled": false})",
            "zeroshard has no W&B client: the run would log nothing there; set wandb.enabled to false and use "
            "csv_monitor"),
      quiet("comet", T::object, "DeepSpeed's Comet monitor, off", R"({"enabled": false})",
            "zeroshard has no Comet client: the run would log nothing there; set comet.enabled to false and use "
            "csv_monitor"),
      quiet("monitor_config", T::object,
            "DeepSpeed does not read this key: monitor_config is the name under which it prints the settings it "
            "reads from the top-level tensorboard, wandb, csv_monitor and comet sections; write csv_monitor to "
            "write the monitor"),
      quiet("comms_config", T::object,
            "DeepSpeed does not read this key: comms_config is the name under which it prints its comms_logger "
            "settings; write comms_logger for the communication log"),
      impl("comms_logger", T::section, "", "the communication log (comm/traced/comms_log.h)"),
      impl("comms_logger.enabled", T::boolean, "false", "count, bytes, latency, algbw and busbw per collective kind and size"),
      impl("comms_logger.verbose", T::boolean, "false", "print each logged collective as it completes"),
      impl("comms_logger.prof_all", T::boolean, "true", "log every collective kind (false: only prof_ops)"),
      impl("comms_logger.prof_ops", T::any, "[]",
           "kinds logged when prof_all is false: all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, barrier"),
      impl("comms_logger.debug", T::boolean, "false", "verbose lines name the unit of each collective"),
      quiet("autotuning", T::object, "DeepSpeed's launcher-side tuner"),
      impl("checkpoint", T::section, "", "checkpoint saving (runtime/engine/engine_save_async.cpp)"),
      impl("checkpoint.async", T::boolean, "false",
           "the example programs save with Engine::save_checkpoint_async (a snapshot in host memory, written by a "
           "background thread, committed at a later step); finalize() reserves the staging memory"),
      impl("checkpoint.staging_memory", T::int64, "0",
           "most bytes of host memory one rank's async snapshot may stage (its rank file; on rank 0 also the "
           "consolidated weights); a larger snapshot is a ConfigError; 0 = no limit"),
      impl("checkpoint.async_in_flight", T::string, "\"wait\"",
           "a save_checkpoint_async while one is in flight: \"wait\" finishes that one first, \"refuse\" throws"),
      quiet("checkpoint.tag_validation", T::string, "DeepSpeed's check that ranks save the same tag: zeroshard's "
            "saves agree on the tag always"),
      quiet("checkpoint.load_universal", T::boolean, "DeepSpeed's universal checkpoints: zeroshard's checkpoints "
            "reshard to any world size as they are"),
      quiet("checkpoint.use_node_local_storage", T::boolean, "DeepSpeed's per-node saves: each rank writes its own "
            "file here"),
      quiet("checkpoint.parallel_write", T::object, "DeepSpeed's pipeline-stage write pipelining"),
      quiet("checkpoint.writer", T::object, "DeepSpeed's checkpoint writer choice (fast, decoupled): zeroshard "
            "writes in the background with checkpoint.async"),
      quiet("zero_allow_untested_optimizer", T::boolean, "zeroshard uses its own optimizers"),
      quiet("dataloader_drop_last", T::boolean,
            "DeepSpeed's own data loader (deepspeed.initialize(training_data=...)); the program owns its data here"),
      quiet("zero_force_ds_cpu_optimizer", T::boolean, "zeroshard uses its own optimizers"),
      quiet("prescale_gradients", T::boolean, "true divides before the reduction: not implemented", "false"),
      quiet("gradient_predivide_factor", T::float64, "not implemented", "1.0"),
      quiet("sparse_gradients", T::boolean, "sparse embedding gradients: not implemented", "false"),
      refuse("elasticity", T::object, "elastic training changes the batch sizes: not implemented"),
      refuse("data_efficiency", T::object, "curriculum learning and data routing change the data: not implemented"),
      refuse("curriculum_learning", T::object, "changes the data: not implemented"),
      refuse("compression_training", T::object, "quantization and pruning change the model: not implemented"),
      refuse("sparse_attention", T::object, "the model's attention would silently stay dense: not implemented"),
      refuse("amp", T::object, "NVIDIA Apex AMP: use fp16 or bf16"),
      refuse("pipeline", T::object,
             "configures DeepSpeed's PipelineEngine; zeroshard's pipeline parallelism is set up by the program, "
             "not the config: a Mesh with pp > 1 (comm/mesh.h) and a PipelineExecutor running a GPipe or 1F1B "
             "schedule (parallel/pipeline_executor.h), as examples/gpt does with --pp and --schedule"),
  };
}

std::size_t levenshtein(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string section_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(path.substr(0, dot));
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> table = make_table();
  return table;
}

const ConfigKey* find_config_key(std::string_view path) {
  for (const ConfigKey& k : config_keys()) {
    if (path == k.path) return &k;
  }
  return nullptr;
}

std::vector<std::string> config_sections() {
  std::vector<std::string> out{""};
  for (const ConfigKey& k : config_keys()) {
    if (k.type == T::section) out.emplace_back(k.path);
  }
  return out;
}

std::string closest_config_key(const std::string& section, const std::string& key) {
  constexpr std::size_t kMaxLen = 64;
  if (key.size() > kMaxLen || key.empty()) return "";
  std::string best;
  std::size_t best_d = 1 + key.size() / 4 + 1;
  for (const ConfigKey& k : config_keys()) {
    const std::string_view path = k.path;
    if (section_of(path) != section) continue;
    const std::string_view name = section.empty() ? path : path.substr(section.size() + 1);
    const std::size_t d = levenshtein(key, name);
    if (d < best_d && d < name.size()) {
      best_d = d;
      best = std::string(name);
    }
  }
  return best;
}

std::string config_reference_markdown() {
  std::string out =
      "# ds_config keys in zeroshard\n\n"
      "<!-- Printed from the key table in runtime/config/config_keys.cpp by the config_doc program "
      "(tests/runtime/config/config_doc.cpp); the config_doc test fails when this file differs. -->\n\n"
      "zeroshard reads DeepSpeed's `ds_config` JSON (`EngineConfig::from_file`). Every problem in a file is "
      "reported in one `ConfigError`: key path, the value as written (a short prefix of a long one), what is "
      "wrong, and for an unknown key the closest known key of its section. `\"auto\"` (what HF Trainer and "
      "Accelerate fill in) is accepted where the table says so and is filled by the program: "
      "`ConfigOptions::from_program(ProgramValues)` fills every such key by HF Trainer's rules from the "
      "program's own settings (section \"auto\" below), `ConfigOptions::fill(key, value)` one key; one left "
      "unfilled is an error listing all of them, and `EngineConfig::auto_fills` records what each became (the "
      "example programs print it in one line). The batch keys follow DeepSpeed's arithmetic: any two of `train_batch_size`, "
      "`train_micro_batch_size_per_gpu` and `gradient_accumulation_steps` give the third at the world size; "
      "`train_batch_size` alone gives accumulation 1. Without any of them the micro-batch is 1 (DeepSpeed "
      "refuses such a file).\n\n"
      "The keys of a file accepted without effect are named in one warning line, and its legacy spellings, with "
      "what each became, in another (`EngineConfig::warnings`, printed by the examples); strict mode (`zeroshard.strict` or "
      "`ConfigOptions::strict`) makes them errors. A key with a value in the \"only\" column is accepted only "
      "with that value (a section: only with those values of the keys it names); any other value would change the "
      "math, or asks for what zeroshard cannot do, and is an error saying which.\n";
  auto cell = [](std::string s) {
    std::string r;
    for (char c : s) r += c == '|' ? std::string("\\|") : std::string(1, c);
    return r;
  };
  out += "\n## Implemented\n\n| key | default | \"auto\" | what it does here |\n|---|---|---|---|\n";
  for (const ConfigKey& k : config_keys()) {
    if (k.status != S::implemented) continue;
    std::string what = k.description;
    if (*k.only_for) what += fmt::format(" (only for {})", k.only_for);
    out += fmt::format("| `{}` | {} | {} | {} |\n", k.path, *k.default_text ? cell(k.default_text) : "",
                       k.auto_ok ? "yes" : "", cell(what));
  }
  out += "\n## \"auto\": what fills it\n\n"
         "`ConfigOptions::from_program` fills each key the file sets to `\"auto\"` as HF Trainer does from its "
         "`TrainingArguments` and the model; the names are `ProgramValues`' fields. Unlike HF, which refuses a file "
         "whose value differs from its argument, a value the file sets itself is kept. A key the file leaves out "
         "stays at its default (HF fills only `\"auto\"`).\n\n"
         "| key | \"auto\" becomes | in HF's terms | rule from |\n|---|---|---|---|\n";
  for (const AutoRule& r : auto_rules()) {
    out += fmt::format("| `{}` | {} | {} | {} |\n", r.key, cell(r.value), cell(r.hf), cell(r.source));
  }
  out += "\n## Legacy spellings (accepted and mapped, with a note)\n\n| key | becomes |\n|---|---|\n";
  for (const ConfigKey& k : config_keys()) {
    if (k.status == S::legacy) out += fmt::format("| `{}` | {} |\n", k.path, cell(k.maps_to));
  }
  out += "\n## Accepted without effect (one warning line)\n\n| key | only | why it changes nothing here |\n"
         "|---|---|---|\n";
  for (const ConfigKey& k : config_keys()) {
    if (k.status == S::no_effect) {
      out += fmt::format("| `{}` | {} | {} |\n", k.path, *k.neutral ? fmt::format("`{}`", k.neutral) : "",
                         cell(k.description));
    }
  }
  out += "\n## Refused\n\n| key | why |\n|---|---|\n";
  for (const ConfigKey& k : config_keys()) {
    if (k.status == S::refused) out += fmt::format("| `{}` | {} |\n", k.path, cell(k.description));
  }
  out += "\nAny key not in these tables is an error naming it, with the closest known key of its section.\n";
  out +=
      "\n## Monitor\n\n"
      "`csv_monitor.enabled` makes the Engine write DeepSpeed's CSV monitor files on world rank 0 at each optimizer "
      "step: in `output_path/job_name`, one file per series, named after DeepSpeed's event with `/` as `_` "
      "(`Train/Samples/lr` in `Train_Samples_lr.csv`), header `step,<series>`, then `<samples>,<value>` rows, where "
      "the first column is the number of samples trained so far, as DeepSpeed writes it. DeepSpeed's series: "
      "`train_loss` (the mean of the losses the loop gave `Engine::report_loss` since the previous step; no row "
      "when it gave none), `lr` (parameter group 0) and `loss_scale` (fp16); zeroshard's: `grad_norm` (before "
      "clipping), `skipped_steps` (so far), `step_time_ms` and `samples_per_second`. Files are appended to, so a "
      "resumed run continues its series; a write that fails stops the monitor with one line on stderr, not the "
      "training ([Note: monitor files] in runtime/observe/csv_monitor.h).\n\n"
      "zeroshard writes no TensorBoard event files: Debian packages no C++ TensorBoard writer, and writing "
      "TensorBoard's record format through protobuf would need protoc at build time and a CRC-32C, which the "
      "project's libraries (zlib's CRC-32) do not provide. A file with `tensorboard`, `wandb` or `comet` enabled is "
      "refused for that reason; disabled, they are accepted with the warning line.\n";
  return out;
}

}  // namespace zeroshard
