// The cluster the planner's tests describe in code: `nodes` x `per_node`
// accelerators of 80 GB and 1 PFLOP/s bf16 (fp32 1/16 of it), 100 GB/s and
// 2 us between accelerators of a node, 10 GB/s and 10 us between nodes, a
// 20 GB/s host link, NVMe at 8 GB/s read and 4 GB/s write per node, 2 TB
// of host memory per node. Header-only.
#pragma once

#include "runtime/cluster_plan/cluster_description.h"

namespace zeroshard::testing {

inline ClusterDescription test_cluster(int nodes, int per_node) {
  ClusterDescription c;
  c.name = "test cluster";
  c.accelerator = "test-gpu";
  c.nodes = nodes;
  c.accelerators_per_node = per_node;
  c.memory_bytes = 80e9;
  c.peak_flops_bf16 = c.peak_flops_fp16 = 1e15;
  c.peak_flops_fp32 = 1e15 / 16;
  c.intra_node = LinkDescription{.kind = "in", .bandwidth_bytes_per_s = 100e9, .latency_s = 2e-6};
  c.inter_node = LinkDescription{.kind = "out", .bandwidth_bytes_per_s = 10e9, .latency_s = 10e-6};
  c.host_memory_bytes = 2e12;
  c.host_device_bandwidth = 20e9;
  c.nvme_read_bandwidth = 8e9;
  c.nvme_write_bandwidth = 4e9;
  return c;
}

}  // namespace zeroshard::testing
