// Published model-state memory formulas, to print beside the estimate
// (runtime/plan/memory_estimate.h) so that a user coming from the ZeRO paper or
// from DeepSpeed sees where zeroshard's figures differ.
//   - The ZeRO paper (Rajbhandari et al. 2020, section 3.1 and figure 1):
//     per parameter, mixed precision holds 2 (fp16 parameters) + 2 (fp16
//     gradients) + K (fp32 master, momentum, variance; K = 12 for Adam)
//     bytes, fp32 training 4 + 4 + 8; ZeRO divides the sharded part by N:
//     stage 1 2+2+K/N, stage 2 2+(2+K)/N, stage 3 (2+2+K)/N.
//   - DeepSpeed's estimate_zero2_model_states_mem_needs (stage_1_and_2.py)
//     and estimate_zero3_model_states_mem_needs (stage3.py), for one node
//     of N GPUs, with their additional_buffer_factor (1.5 by default) on
//     the host figure and, at stage 3, 4 bytes per parameter of the
//     largest layer on the GPU.
// The formulas ignore padding, transient buffers and per-unit layout, which
// the estimate includes.
#pragma once

#include <cstdint>

namespace zeroshard {

/// Bytes per parameter of the ZeRO paper's three model-state parts.
struct ZeroPaperBytes {
  double parameters = 0;  ///< element bytes, divided by N at stage 3
  double gradients = 0;   ///< element bytes, divided by N at stages 2/3
  double optimizer = 0;   ///< K, divided by N at stages 1-3
  double total() const { return parameters + gradients + optimizer; }
};

/// The ZeRO paper's per-parameter bytes on one of `world` ranks at `stage`
/// (0-3), for parameters and gradients of `element_bytes` each (2 in
/// mixed precision, 4 in fp32) and `optimizer_bytes` K of optimizer state
/// (12 for mixed-precision Adam: fp32 master, momentum, variance; 8 for
/// fp32 Adam). Pure.
ZeroPaperBytes zero_paper_bytes(int stage, int world, double element_bytes, double optimizer_bytes);

/// A DeepSpeed estimate in bytes for one GPU and its share of the host.
struct DeepSpeedEstimate {
  std::uint64_t gpu = 0;
  std::uint64_t cpu = 0;
};

/// DeepSpeed's estimate_zero2_model_states_mem_needs(total_params,
/// num_gpus_per_node = gpus, num_nodes = 1, cpu_offload,
/// additional_buffer_factor), as DeepSpeed computes it (float products
/// truncated to integers). Pure.
DeepSpeedEstimate deepspeed_zero2_estimate(std::uint64_t total_params, int gpus, bool cpu_offload,
                                           double additional_buffer_factor = 1.5);

/// DeepSpeed's estimate_zero3_model_states_mem_needs(total_params,
/// largest_layer_params, num_gpus_per_node = gpus, num_nodes = 1,
/// cpu_offload, cpu_offload_params, zero_init, additional_buffer_factor).
/// Pure.
DeepSpeedEstimate deepspeed_zero3_estimate(std::uint64_t total_params, std::uint64_t largest_layer_params, int gpus,
                                           bool cpu_offload, bool cpu_offload_params, bool zero_init = true,
                                           double additional_buffer_factor = 1.5);

}  // namespace zeroshard
