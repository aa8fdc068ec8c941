// Offload settings of the engine: where optimizer state and stage 3
// parameter shards live between uses (ZeRO-Offload, Ren et al. 2021;
// ZeRO-Infinity, Rajbhandari et al. 2021), with DeepSpeed's ds_config key
// names under zero_optimization.
// Details: [Note: offload keys] below.
#pragma once

#include <cstdint>
#include <string>

#include "offload/io/aio_config.h"

// [Note: offload keys]
// zero_optimization.offload_optimizer (stages 1-3):
//   device          "none" (default) | "cpu" | "nvme": tier of this rank's
//                   fp32 master weights (mixed precision), exp_avg,
//                   exp_avg_sq / momentum, and, at stages 2/3, its gradient
//                   shard. "cpu" keeps them in host memory (the ledger's
//                   host tier);
//                   "nvme" keeps them in swap files under nvme_path, read and
//                   written sub-group by sub-group during step().
//   nvme_path       directory for the swap files (required with "nvme"); the
//                   engine writes under <nvme_path>/zeroshard-<host>-<pid>-
//                   rank<r>-e<k>/ (k: the process's k-th engine) and removes
//                   that folder when it is destroyed;
//                   folders of this host's earlier runs whose process is gone
//                   (killed) are removed when the next run starts there.
//   buffer_count    staging buffer sets of the sub-group pipeline (default 4,
//                   >= 1): sub-group i uses set i % buffer_count, so with 3 or
//                   more the read of i+1, the update of i and the write of
//                   i-1 overlap; fewer serialise them.
//   pin_memory      host-tier and staging buffers in page-locked memory
//                   (cudaHostRegister; offload/pinned_host_allocator.h), what
//                   asynchronous host-device copies need. Needs a CUDA build
//                   and a visible device: otherwise finalize() throws a
//                   ConfigError naming the key (default false).
//   pipeline_read   read sub-group i+1 while i is updated (default true);
//                   false reads each sub-group just before its update.
//   pipeline_write  let the write of sub-group i run while later ones are
//                   updated (default true); false waits for each write.
//   ratio, fast_init  DeepSpeed keys zeroshard does not implement: a
//                   ConfigError naming them (docs/config.md).
// zero_optimization.offload_param (stage 3 only):
//   device          "none" | "cpu" | "nvme": tier of this rank's parameter
//                   shards; they are swapped in ahead of the unit's
//                   all-gather, with the same prefetch as unshard.
//   nvme_path       as above (required with "nvme").
//   buffer_count    swap-in buffers for parameter shards (default 5, >= 2):
//                   at most this many units' shards are held in memory at
//                   once; the prefetch is skipped when none is free.
//   buffer_size     elements of each swap-in buffer (default 1e8): a unit
//                   whose shard is larger is a ConfigError at finalize().
//   max_in_cpu      parameter shard elements kept in host memory although
//                   device is "nvme" (default 1e9): units, in declaration
//                   order, while their shards fit.
//   pin_memory      as for offload_optimizer.
// zero_optimization.sub_group_size  elements of optimizer state updated per
//                   pipeline stage (default 1e9); rounded down to a multiple
//                   of 4096 (>= 4096) so sub-groups start on O_DIRECT
//                   boundaries in every dtype; 0 (axolotl's templates; for
//                   DeepSpeed one parameter per sub-group) is 4096 too.
// aio               the I/O engine's settings (offload/io/aio_config.h).

namespace zeroshard {

class ConfigDiagnostics;

/// An offload tier named by ds_config's "device" key.
enum class OffloadDevice { none, cpu, nvme };

/// "none", "cpu" or "nvme".
const char* offload_device_name(OffloadDevice d);

/// zero_optimization.offload_optimizer. Plain value type.
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  int buffer_count = 4;
  bool pin_memory = false;
  bool pipeline_read = true;
  bool pipeline_write = true;
};

/// zero_optimization.offload_param. Plain value type.
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  int buffer_count = 5;
  std::int64_t buffer_size = 100'000'000;  ///< elements
  std::int64_t max_in_cpu = 1'000'000'000;  ///< elements
  bool pin_memory = false;
};

/// Everything about offload tiers. Plain value type.
struct OffloadConfig {
  OffloadOptimizerConfig optimizer;
  OffloadParamConfig param;
  std::int64_t sub_group_size = 1'000'000'000;  ///< elements, as configured
  AioConfig aio;

  /// True if any state lives on NVMe (the engine then opens swap files).
  bool uses_nvme() const {
    return optimizer.device == OffloadDevice::nvme || param.device == OffloadDevice::nvme;
  }
  /// sub_group_size rounded down to a multiple of 4096, at least 4096.
  std::size_t sub_group_elements() const;
  /// Checks ranges and combinations with the ZeRO stage (offload needs
  /// stage >= 1, offload_param stage 3, nvme a nvme_path). Throws
  /// ConfigError naming the key, prefixed by `source`.
  void validate(int stage, const std::string& source) const;
  /// validate()'s checks, each failure recorded in `d` (prefixed there by
  /// its source) instead of thrown.
  void collect_problems(int stage, ConfigDiagnostics& d) const;
};

}  // namespace zeroshard
