// Checks fashion_mnist runs before it loads the data or trains, so that a
// bad option fails in seconds with the option named instead of after the
// run (or with a bare std::bad_alloc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zeroshard::examples {

/// Bytes of memory of this machine (sysconf: physical pages x page size).
std::uint64_t physical_memory_bytes();

/// Estimated bytes one rank needs to train the MLP `layer_sizes` (inputs,
/// hidden widths, classes) with `max_batch` samples per forward pass: model
/// state at 16 bytes per parameter (parameters, gradients, fp32 Adam
/// moments: the most any stage keeps per rank) plus activations and their
/// gradients at 8 bytes per sample and unit. A double: widths near 2^63 do
/// not wrap around.
double training_bytes_estimate(const std::vector<std::int64_t>& layer_sizes, std::uint64_t max_batch);

/// Throws ConfigError naming `--hidden` (when the model state alone does not
/// fit) or `train_micro_batch_size_per_gpu` (when the activations make the
/// difference) if training_bytes_estimate exceeds `memory_bytes`; the
/// message gives both sizes. `hidden_text` is the option as given.
void check_model_fits(const std::vector<std::int64_t>& layer_sizes, const std::string& hidden_text,
                      std::uint64_t micro_batch, std::uint64_t eval_batch, std::uint64_t memory_bytes);

/// Makes sure every rank can write checkpoints into `save_dir` before the
/// training: rank 0 creates it (with its parents), then every rank creates
/// and removes a probe file `.probe-rank-NNNNN` there. Agreed across comm:
/// throws AgreedIoError "--save-dir <dir>: ..." on every rank if any rank
/// fails. Collective.
void check_save_dir(Communicator& comm, const std::string& save_dir);

}  // namespace zeroshard::examples
