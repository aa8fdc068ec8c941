// ZeRO++'s three options (Wang et al., "ZeRO++: Extremely Efficient
// Collective Communication for Giant Model Training", 2023, arXiv
// 2306.10209) under DeepSpeed's keys, and zeroshard's knobs of their wire
// format.
// Details: [Note: ZeRO++ keys] below.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/quant/symmetric_quant.h"
#include "optimizer/loss_scaler.h"

// [Note: ZeRO++ keys]
//   zero_optimization.zero_quantized_weights   qwZ: stage 3's parameter
//       all-gathers move int8 blocks plus scales, dequantized into the full
//       buffer (runtime/sharding/unsharder.h); master weights stay exact;
//   zero_optimization.zero_hpz_partition_size  hpZ: a secondary copy of
//       each unit's parameters sharded over groups of k consecutive ranks
//       (a node), so that every all-gather after a unit's first one in a
//       step runs inside the group; 1 = off;
//   zero_optimization.zero_quantized_gradients qgZ: stages 2/3 reduce
//       gradients by a quantized all-to-all inside each node, an fp32 sum,
//       a quantized all-to-all across nodes and an fp32 sum, each in rank
//       order (runtime/sharding/grad_reducer.h);
//   zeroshard.zeropp.{weight_bits, weight_block_size, gradient_bits,
//       gradient_block_size}  the formats ([Note: symmetric block
//       quantization] in kernels/quant/symmetric_quant.h): 8 or 4 bits, a
//       power of two from 16 to 8192 elements per fp32 scale. The defaults
//       are int8 weights in blocks of 64 and int8 gradients in blocks of
//       256: an element's error is at most half its block's scale
//       (absmax / 127), and a small block's absmax is closer to its
//       elements'; the scales cost 4 / 64 and 4 / 256 bytes per element.
//       int4 halves the codes' bytes at 127 / 7 (about 18) times the
//       error, best with error_feedback. bench/zeropp/README.md gives the
//       defaults' training effect;
//   zeroshard.zeropp.error_feedback  qgZ keeps each rank's quantization
//       error per unit and adds it to the next micro-batch's gradient;
//   zeroshard.zeropp.ranks_per_node  the nodes qgZ's hierarchy follows: 0
//       (the default) the hosts, from the ranks' host names
//       (comm/node_groups.h); n > 0 ranks [k n, (k + 1) n) as node k (for
//       a placement whose host names do not show the machines).
// Combinations refused with a ConfigError naming them: qwZ or hpZ below
// stage 3, qgZ below stage 2, error feedback without qgZ, and error
// feedback with fp16's dynamic loss scale (the residual is in loss-scaled
// units, which a scale change invalidates; bf16 or a static fp16 scale
// work). hpZ needs k to divide the data-parallel world size (checked by
// the Engine).

namespace zeroshard {

class ConfigDiagnostics;

/// The ZeRO++ keys (see the file comment). Plain value type.
struct ZeroppConfig {
  bool quantized_weights = false;       ///< zero_quantized_weights (qwZ)
  std::int64_t hpz_partition_size = 1;  ///< zero_hpz_partition_size (hpZ): ranks per secondary group, 1 = off
  bool quantized_gradients = false;     ///< zero_quantized_gradients (qgZ)
  int weight_bits = 8;                  ///< zeroshard.zeropp.weight_bits: 8 or 4
  std::int64_t weight_block_size = 64;      ///< zeroshard.zeropp.weight_block_size (elements)
  int gradient_bits = 8;                ///< zeroshard.zeropp.gradient_bits: 8 or 4
  std::int64_t gradient_block_size = 256;   ///< zeroshard.zeropp.gradient_block_size (elements)
  bool error_feedback = false;          ///< zeroshard.zeropp.error_feedback
  std::int64_t ranks_per_node = 0;      ///< zeroshard.zeropp.ranks_per_node: 0 = from the host names

  /// True when hpZ is on (a partition size above 1).
  bool hpz() const { return hpz_partition_size > 1; }
  /// True when any of qwZ, hpZ, qgZ is on.
  bool any() const { return quantized_weights || hpz() || quantized_gradients; }
  /// The weights' and the gradients' formats (valid after collect_problems
  /// found nothing).
  kernels::SymQuantFormat weight_format() const;
  kernels::SymQuantFormat gradient_format() const;
  /// Records each range or combination problem (see the file comment) in
  /// `d`, naming the keys.
  void collect_problems(int stage, DType compute_dtype, const LossScaleConfig& loss_scale, ConfigDiagnostics& d) const;
};

}  // namespace zeroshard
