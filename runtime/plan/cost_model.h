// Cost model: a predicted optimizer-step time for a configuration, from
// measured rates of this machine (MachineRates, measured by
// runtime/plan/calibrate.h and saved as JSON by `zs_plan --calibrate`) and the
// loop's own time per micro-batch (forward + backward compute, which the
// engine does not own: given by the user or measured by the job).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/config.h"
#include "runtime/sharding/flat_layout.h"

// [Note: step cost model]
// For one rank of a FlatLayout finalized for the data-parallel world n, a
// step of a micro-batches (gradient_accumulation_steps) costs
//   loop        a x the loop's time per micro-batch (input; 1/3 forward,
//               2/3 backward, as the usual 1:2 ratio of forward to backward
//               FLOPs), spread over units in proportion to their elements;
//   reduction   stages 0/1: once per step, stages 2/3: every micro-batch,
//               the engine's collectives over the padded gradients in
//               communication_data_type (fp32 unless set; a unit already
//               in it reduced in its own buffer, in runs of at most
//               reduce_bucket_size elements, the others packed into
//               buckets of that size: [Note: gradient buckets]):
//               rank-ordered all-reduce = all-to-all + all-gather of the
//               bucket, reduce-scatter = all-to-all;
//   all-gather  stages 1/2 after the update: buckets of
//               allgather_bucket_size elements of the parameters in the
//               compute dtype; stage 3: every unit's full buffer in forward
//               and again in backward each micro-batch (the last forward
//               unit is reused by backward: 2U - 1 gathers; persistent
//               units, gathered once after the update, are not counted);
//   optimizer   the update of the rank's shard (all elements at stage 0):
//               elements x bytes moved per element (optimizer_bytes) /
//               the measured optimizer bandwidth;
//   swap        the arrays plan_arrays() (runtime/sharding/array_plan.h) puts on
//               nvme for this rank: with offload_optimizer nvme the master
//               weights, optimizer states (and at stages 2/3 the gradient
//               shards) read and written once per step; with offload_param
//               nvme (stage 3) each nvme unit's parameter shard (those
//               beyond max_in_cpu) read at every gather and written once
//               after the update: per file, its bytes at the disk rate
//               plus the measured cost per swap file (one file per array,
//               unit and sub-group).
// Overlap, as the engine does it: with overlap_comm the reduction buckets
// run under the backward compute (exposed: what exceeds it, plus the last
// bucket, which completes after backward), and at stage 3 each unit's
// all-gather is prefetched under the previous unit's compute (exposed: the
// first unit's gather, then for each next unit what exceeds the compute of
// the unit before it); without it every collective is exposed. The swap
// pipeline (pipeline_read/pipeline_write, buffer_count >= 2) overlaps the
// disk with the update: exposed = max(swap, optimizer) - optimizer;
// otherwise the sum. Collective times come from MachineRates at the
// calibrated world size, scaled to n by nccl-tests' bus-bandwidth factors
// ((n-1)/n for all-gather and all-to-all, 2(n-1)/n for all-reduce), and are
// 0 at n = 1. What it leaves out: the engine's bookkeeping, casts outside
// the update, waits for a slower rank, and the CPU time the collectives
// take from the loop when ranks outnumber cores.

namespace zeroshard {

/// Measured time of one collective kind over message sizes, at the
/// calibration's world size. Plain value type.
struct CollectiveRates {
  /// Bytes per rank's buffer (the all-gather's output, the all-to-all's
  /// send buffer, the all-reduce's buffer), ascending, and the median
  /// seconds each took.
  std::vector<double> bytes;
  std::vector<double> seconds;
  /// Seconds for a message of `b` bytes at the calibrated world size:
  /// linear between the measured sizes, the smallest size's time below
  /// them (latency), the largest size's bandwidth above; 0 for b <= 0.
  /// Throws ConfigError when nothing was measured.
  double time(double b) const;
};

/// This machine's rates (see [Note: step cost model]). Plain value type.
struct MachineRates {
  std::string isa;                 ///< the SIMD target the kernels ran (e.g. "AVX2")
  int threads = 1;                 ///< kernel threads per rank when measured
  int world_size = 1;              ///< ranks the collectives were measured at
  double optimizer_bandwidth = 0;  ///< bytes/s the fp32 AdamW kernel moved (28 B/element)
  double disk_read = 0;            ///< bytes/s; 0 = not measured (no --nvme-path)
  double disk_write = 0;           ///< bytes/s; 0 = not measured
  double disk_read_file = 0;       ///< seconds per swap file read beyond its bytes
  double disk_write_file = 0;      ///< seconds per swap file written beyond its bytes (sync, rename)
  CollectiveRates all_to_all, all_gather, all_reduce;  ///< empty at world size 1

  nlohmann::json to_json() const;
  /// Parses to_json()'s form; `source` names it in messages. Throws
  /// ConfigError naming the key that is missing or mistyped.
  static MachineRates from_json(const nlohmann::json& j, const std::string& source);
  /// Reads a calibration file. Throws IoError (unreadable) and ConfigError.
  static MachineRates from_file(const std::string& path);
};

/// Bytes the update moves per element for `config`'s optimizer and dtype:
/// 4 B per fp32 array read or written (the parameter or master weight read
/// and written, each optimizer state read and written), the gradient read
/// (4 B, or 2 B in bf16/fp16) and in mixed precision the 2 B compute copy
/// written. AdamW fp32: 28.
double optimizer_bytes_per_element(const EngineConfig& config);

/// A predicted step, in seconds (see [Note: step cost model]). Plain value type.
struct StepCost {
  double loop = 0;            ///< the loop's compute (input x micro-batches)
  double reduction = 0;       ///< all gradient reduction collectives
  double gather = 0;          ///< all parameter all-gathers
  double comm_exposed = 0;    ///< the part of reduction + gather not under compute
  double optimizer = 0;       ///< the update
  double swap = 0;            ///< disk reads and writes
  double swap_exposed = 0;    ///< the part of swap not under the update
  /// loop + comm_exposed + optimizer + swap_exposed.
  double step() const { return loop + comm_exposed + optimizer + swap_exposed; }
  nlohmann::json to_json() const;
};

/// The predicted step of rank `rank` (the update runs over its shard) for
/// `layout` finalized for the data-parallel world, with `loop_seconds` the
/// loop's compute per micro-batch. Throws ConfigError when the
/// configuration needs a rate `rates` lacks (collectives at world > 1
/// measured at world 1; nvme offload without disk rates), naming it.
/// Pure; thread safe.
StepCost predict_step(const FlatLayout& layout, const EngineConfig& config, int rank, const MachineRates& rates,
                      double loop_seconds);

}  // namespace zeroshard
