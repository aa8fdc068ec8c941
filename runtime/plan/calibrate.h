// Calibration: measures this machine's rates for the step cost model
// (runtime/plan/cost_model.h, [Note: step cost model]) with short probes of the
// code the engine runs:
//   - the fp32 AdamW kernel (kernels/cpu/adam/adam.h) over `optimizer_elements`
//     elements with the kernel threads as configured: bytes moved (28 per
//     element) / the best of 5 passes;
//   - ZeRO++'s quantization round trip (kernels/quant/symmetric_quant.h:
//     quantize_symmetric, int8 blocks of 2048, then dequantize_accumulate)
//     over the same element count: elements / the best of 3 passes, the
//     slowest rank's (MachineRates::quantize_rate);
//   - the Communicator's all-to-all, all-gather and all-reduce (the
//     collectives of the engine's rank-ordered reductions and parameter
//     gathers) of fp32 buffers from 4 KiB to `max_collective_bytes` per
//     rank in steps of 4x: the median of 9 timed calls (3 above 1 MiB)
//     after one untimed, the slowest rank's median (every rank then holds
//     the same figures);
//   - with `nvme_path`: swap files written and read back through the swap
//     files' own code (offload/swap_directory.h: O_DIRECT where the file
//     system allows it, a temporary file fdatasync'ed and renamed, the
//     default aio settings) in a folder there, removed after: one file of
//     `disk_bytes` (the bandwidth), then a batch of 16 files of 64 KiB (the
//     cost per file beyond its bytes: the syncs and renames), every rank at
//     once, the slowest rank's times.
// A probe takes well under a second per size on this project's machines.
#pragma once

#include <cstddef>
#include <string>

#include "comm/communicator.h"
#include "runtime/plan/cost_model.h"

namespace zeroshard {

/// What calibrate() measures (see the file comment). Plain value type.
struct CalibrateOptions {
  std::string nvme_path;                               ///< "" = no disk rates
  std::size_t optimizer_elements = std::size_t{1} << 23;  ///< elements of the AdamW probe
  std::size_t disk_bytes = std::size_t{256} << 20;     ///< bytes written and read (multiple of 4096)
  std::size_t max_collective_bytes = std::size_t{64} << 20;  ///< largest collective probe, bytes per rank
};

/// Measures the rates on every rank of `comm` (collective: every rank must
/// call it with the same options). Returns the same MachineRates on every
/// rank (world_size = comm's). Throws IoError naming the file when the
/// disk probe cannot write or read `nvme_path`, ConfigError for
/// disk_bytes not a positive multiple of 4096.
MachineRates calibrate(Communicator& comm, const CalibrateOptions& options);

}  // namespace zeroshard
