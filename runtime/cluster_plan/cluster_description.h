// A GPU cluster described for the planner, without running on it: its
// nodes and accelerators, their memory and peak FLOP/s, the two link
// levels (inside a node: NVLink or PCIe; between nodes: InfiniBand or
// Ethernet) with a bandwidth and a latency each, host memory, the
// host-device link and NVMe, and optionally a price. Read from JSON
// (`zs_plan --cluster`); tools/plan/clusters/ ships descriptions of real
// systems, each citing its source.
//
// The JSON form, units in the key names (GB = 1e9 bytes, GiB = 2^30):
//   {"name": "...", "source": ["https://..."], "notes": "... (optional)",
//    "nodes": 8, "accelerators_per_node": 8,
//    "accelerator": {"name": "H100-SXM5-80GB", "memory_GiB": 80,
//                    "peak_TFLOPs": {"bf16": 989, "fp16": 989, "fp32": 67},
//                    "memory_bandwidth_GBps": 3350},
//    "intra_node": {"kind": "NVLink 4", "bandwidth_GBps": 450, "latency_us": 3},
//    "inter_node": {"kind": "InfiniBand NDR", "bandwidth_GBps": 50, "latency_us": 5},
//    "host": {"memory_GiB": 2048, "device_bandwidth_GBps": 55,
//             "nvme_read_GBps": 25, "nvme_write_GBps": 12},
//    "price_per_accelerator_hour": 2.5, "compute_efficiency": 0.565}
// Link bandwidths are per accelerator and direction (what one GPU can send
// while every GPU sends: a DGX H100's eight 400 Gb/s NICs give each GPU
// 50 GB/s between nodes); NVMe bandwidths are per node; "price_per_
// accelerator_hour" (any currency) and "compute_efficiency" (the planner's
// fitted fraction of peak for this accelerator, in (0, 1]) are optional.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace zeroshard {

/// One link level: a bandwidth per accelerator and direction and a
/// per-message latency (the alpha-beta model's beta = 1 / bandwidth and
/// alpha). Plain value.
struct LinkDescription {
  std::string kind;                ///< free text, for reports ("NVLink 4", "InfiniBand NDR 400")
  double bandwidth_bytes_per_s = 0;  ///< bytes per second
  double latency_s = 0;              ///< seconds
};

/// See the file comment. Plain value; the reader validates every field.
struct ClusterDescription {
  std::string name;
  std::vector<std::string> sources;  ///< where the figures come from (datasheets, papers)
  std::string notes;                 ///< optional: how figures the sources do not state were chosen
  int nodes = 0;
  int accelerators_per_node = 0;
  std::string accelerator;           ///< the accelerator's name
  double memory_bytes = 0;           ///< accelerator memory, bytes
  double peak_flops_bf16 = 0;        ///< dense FLOP/s (0: not supported)
  double peak_flops_fp16 = 0;        ///< dense FLOP/s (0: not supported)
  double peak_flops_fp32 = 0;        ///< dense FLOP/s (not TF32)
  double memory_bandwidth = 0;       ///< accelerator memory, bytes per second
  LinkDescription intra_node;
  LinkDescription inter_node;
  double host_memory_bytes = 0;        ///< per node
  double host_device_bandwidth = 0;    ///< bytes per second, per accelerator and direction
  double nvme_read_bandwidth = 0;      ///< bytes per second, per node (0: no NVMe)
  double nvme_write_bandwidth = 0;     ///< bytes per second, per node
  std::optional<double> price_per_accelerator_hour;
  /// The planner's fitted compute efficiency for this accelerator
  /// (PlanConstants::compute_efficiency; bench/plan/bench_published), if known.
  std::optional<double> compute_efficiency;

  /// Accelerators in the cluster.
  int accelerators() const { return nodes * accelerators_per_node; }
  /// Dense peak FLOP/s for compute dtype `dtype` (bf16, f16 or f32;
  /// InvariantError for others); 0 where the accelerator lacks it.
  double peak_flops(DType dtype) const;
  /// peak_flops, or ConfigError naming `source` and the key when it is 0.
  double checked_peak_flops(DType dtype, const std::string& source) const;

  /// Parses the JSON form; `source` names it in messages. Throws
  /// ConfigError naming the key path (e.g. "accelerator.memory_GiB"): not
  /// JSON (with its position), a key given twice, an unknown key, a
  /// missing required key, a value of the wrong type, a count < 1, a
  /// bandwidth, memory or fp32 FLOP/s <= 0, a bf16 / fp16 FLOP/s, latency
  /// or price < 0, only one of the NVMe bandwidths 0, a compute efficiency
  /// outside (0, 1].
  static ClusterDescription from_json(std::string_view text, const std::string& source);
  /// Reads and parses `path`. Throws IoError (unreadable) and ConfigError.
  static ClusterDescription from_file(const std::string& path);
};

}  // namespace zeroshard
