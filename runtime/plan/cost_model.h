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
// ((n-1)/n for all-gather and all-to-all, 2(n-1)/n for all-reduce; a
// group of g ranks by (g-1)/g), and are 0 at n = 1. Across hosts
// (MachineRates::ranks_per_node L < n, hosts of L consecutive ranks, and a
// link_bandwidth) each collective also takes its cross-host bytes through
// the host's link: L x the bytes each rank sends to other hosts
// (cross_host_bytes' model, comm/traced/collective_record.h) / the link's bytes
// per second, added to the collective's time. ZeRO++ ([Note: ZeRO++
// unsharding], [Note: hierarchical quantized reduce-scatter]): qwZ's world
// gathers move chunks (sym_quant_chunk_bytes) and hpZ's later gathers of a
// step run in the group of k ranks (over the link only where a group
// spans hosts); qgZ's buckets are an all-to-all of chunks in the host (L
// ranks) and one across hosts (H = n / L ranks); the quantization kernels
// take elements / MachineRates::quantize_rate (0: not measured, no time).
// What it leaves out: the engine's bookkeeping, casts outside the update,
// waits for a slower rank, and the CPU time the collectives take from the
// loop when ranks outnumber cores.
//
// cross_host_traffic() counts a steady step's bytes between hosts, over
// every rank, in the same model: what the comms log of a step shows
// (comm/traced/comms_log.h; bench/zeropp compares the two). A steady step is one
// after the first (which records the unshard order and keeps no unit), of
// gradient_accumulation_steps micro-batches, each forward over the units
// 0 .. U-1 and backward U-1 .. 0, with the stage3_* knobs at their
// defaults (one unit prefetched, reuse distance 0, no persistent units):
//   stage 3 parameters: 2U - 1 gathers of each micro-batch (the last
//     forward unit is kept for the backward); without hpZ all over the
//     world, rank r sending its shard (a chunk with qwZ) to the R = n - L
//     ranks of other hosts; with hpZ the first micro-batch's forward over
//     the world and the rest in the groups, each rank sending its padded /
//     k elements to the group's members on other hosts;
//   stages 1/2: the post-step all-gather, each rank's shards to the R
//     others;
//   gradients (once per step at stages 0/1: each bucket's all-to-all and
//     all-gather, 2 x its elements; every micro-batch at stages 2/3: each
//     bucket's all-to-all, its elements): x size x R; with qgZ each
//     bucket's hop across hosts, every rank sending H - 1 chunks of its
//     block (nothing when one host holds every rank);
//   the gradient norm: an all-gather of two doubles per rank (rank order;
//     an all-reduce of them with reduction_order native).
// Not counted: the agreed-error collectives of offloaded state (a few
// bytes, only with offload) and the program's own collectives.

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
  /// Elements per second of one quantize_symmetric (int8, blocks of 2048)
  /// plus one dequantize_accumulate over them (kernels/quant); 0 = not
  /// measured (calibrations older than ZeRO++): no time for quantization.
  double quantize_rate = 0;
  /// The hosts, for predictions across them (not measured: zs_plan's
  /// --ranks-per-node and --link-rate): ranks per host (hosts of that many
  /// consecutive ranks; 0 = every rank on one host) and the bytes per
  /// second each host's link carries each way (0 = no link term).
  int ranks_per_node = 0;
  double link_bandwidth = 0;

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
  /// Bytes the step moves between hosts over every rank
  /// (cross_host_traffic(...).total() with the rates' hosts).
  double cross_host_bytes = 0;
  /// loop + comm_exposed + optimizer + swap_exposed.
  double step() const { return loop + comm_exposed + optimizer + swap_exposed; }
  nlohmann::json to_json() const;
};

/// Bytes a steady step moves between hosts, over every rank, by what
/// moves them (see [Note: step cost model]). Plain value type.
struct CrossHostTraffic {
  std::uint64_t parameter_gathers = 0;  ///< stage 3 all-gathers, or the stage 1/2 post-step all-gather
  std::uint64_t gradient_reduction = 0;
  std::uint64_t norm = 0;               ///< the gradient norm's exchange
  std::uint64_t total() const { return parameter_gathers + gradient_reduction + norm; }
  nlohmann::json to_json() const;
};

/// cross_host_traffic of the note for `layout` (finalized for the
/// data-parallel world n) and `config`, hosts of `ranks_per_node`
/// consecutive ranks (0 or n: one host, no bytes). Throws ConfigError when
/// ranks_per_node does not divide n. Pure; thread safe.
CrossHostTraffic cross_host_traffic(const FlatLayout& layout, const EngineConfig& config, int ranks_per_node);

/// Bytes one all-gather of unit u's parameters sends between hosts over
/// every rank, in cross_host_traffic's model: over the world (`group`
/// false: each rank's shard, a chunk with qwZ, to the R ranks of other
/// hosts) or inside hpZ's group (each rank's padded / k elements to the
/// group's members on other hosts). For a loop whose unshards differ from
/// the note's (the examples' gpt holds its embedding from the forward to
/// the backward), the gathers the engine counted times these give the
/// parameter bytes (examples/report/cross_host_meter.h). Throws as
/// cross_host_traffic. Pure.
std::uint64_t cross_host_gather_bytes(const FlatLayout& layout, const EngineConfig& config, int ranks_per_node,
                                      UnitId u, bool group);

/// The predicted step of rank `rank` (the update runs over its shard) for
/// `layout` finalized for the data-parallel world, with `loop_seconds` the
/// loop's compute per micro-batch. Throws ConfigError when the
/// configuration needs a rate `rates` lacks (collectives at world > 1
/// measured at world 1; nvme offload without disk rates; optimizer.type
/// Muon, whose Newton-Schulz and exchange are not modelled), naming it.
/// Pure; thread safe.
StepCost predict_step(const FlatLayout& layout, const EngineConfig& config, int rank, const MachineRates& rates,
                      double loop_seconds);

}  // namespace zeroshard
