// Checks that a checkpoint's training state is finite: master weights (or
// fp32 parameters), optimizer moments and 8-bit absmax scales, before a
// save writes them and when a load reads them (docs/checkpoint-format.md,
// "Validation"). Local: the engine agrees on the outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zeroshard {

struct Manifest;

/// Where a checked array comes from, for the error message: the file (rank
/// file, or the save's for a save), the unit's index in `m`, the tensor's
/// name ("master", "exp_avg", ... or "exp_avg absmax"), and the logical
/// flat-buffer index of element 0 of the checked values (absmax: the block
/// index of its first value, times the block size). Plain value type.
struct StateSource {
  std::string file;
  const Manifest* m = nullptr;
  std::size_t unit = 0;
  std::string tensor;
  std::uint64_t first = 0;
  std::uint64_t stride = 1;  ///< logical elements per checked value (absmax: the block size)
};

/// Throws IoError "<file>: <tensor> holds nan at parameter \"<name>\"
/// (unit \"<unit>\"), element <i> of the parameter: a checkpoint's master
/// weights and optimizer states must be finite" for the first NaN or +-Inf
/// of the n fp32 values (a padding element is named as the unit's padding).
/// With `scale` true (8-bit absmax values) a negative value is refused too
/// ("<file>: <tensor> holds -1 for the block starting at ...: a
/// checkpoint's 8-bit absmax scales must be finite and not negative"); an
/// all-zero block has absmax 0 (kernels/cpu/adam/quant_map.h), which is valid.
void check_finite_state(const float* values, std::size_t n, const StateSource& source, bool scale = false);

/// How a range of a checkpoint file is checked before it is saved: fp32
/// values, bf16 values (widened), 8-bit absmax scales (fp32, finite and not
/// negative), or not at all (8-bit codes).
enum class FiniteCheck { none, f32, bf16, absmax };

/// Bytes of one value that `check` checks (4 or 2; 1 for none).
std::size_t checked_value_bytes(FiniteCheck check);

/// Checks `bytes` bytes at `data` (whole values) as `check` says, the
/// first of them value `value_offset` of `source`'s range (logical element
/// source.first + (value_offset + i) * source.stride). Throws IoError
/// "save_checkpoint refused: <check_finite_state's message>; nothing was
/// saved".
void check_before_save(const std::byte* data, std::size_t bytes, FiniteCheck check, const StateSource& source,
                       std::uint64_t value_offset = 0);

}  // namespace zeroshard
