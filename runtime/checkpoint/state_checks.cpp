// Finite checks of checkpointed state; see runtime/checkpoint/state_checks.h.
#include "runtime/checkpoint/state_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/dtype.h"
#include "runtime/checkpoint/checkpoint_manifest.h"

namespace zeroshard {

namespace {

// "parameter \"h.0.attn.w\" (unit \"h.0\") ... element 7 of the parameter",
// or the unit's padding, for logical element e of unit u.
std::string where(const StateSource& s, std::uint64_t e) {
  const ManifestUnit& u = s.m->units[s.unit];
  for (const ManifestParam& p : u.params) {
    if (e >= p.offset && e < p.offset + p.numel) {
      return fmt::format("parameter \"{}\" (unit \"{}\"), element {} of the parameter", p.name, u.name,
                         e - p.offset);
    }
  }
  return fmt::format("the padding of unit \"{}\" (element {} of its flat buffer)", u.name, e);
}

// True when every one of the n fp32 values is finite: an exponent field
// that is not all ones. Branch-free over blocks, so that the compiler
// vectorizes it (a save checks every byte it snapshots: the stall of an
// async save, [Note: async checkpoint]).
bool all_finite(const float* values, std::size_t n) {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  constexpr std::size_t kBlock = 4096;
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t e = std::min(n, b + kBlock);
    std::uint32_t bad = 0;
    for (std::size_t i = b; i < e; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, values + i, sizeof bits);
      bad |= static_cast<std::uint32_t>((bits & kExponent) == kExponent);
    }
    if (bad != 0) return false;
  }
  return true;
}

}  // namespace

void check_finite_state(const float* values, std::size_t n, const StateSource& source, bool scale) {
  if (!scale && all_finite(values, n)) return;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = values[i];
    if (std::isfinite(v) && !(scale && v < 0.0f)) continue;
    const std::uint64_t e = source.first + i * source.stride;
    if (scale) {
      throw IoError(fmt::format("{}: {} holds {} for the block starting at {}: a checkpoint's 8-bit absmax scales "
                                "must be finite and not negative",
                                source.file, source.tensor, v, where(source, e)));
    }
    throw IoError(fmt::format("{}: {} holds {} at {}: a checkpoint's master weights and optimizer states must be "
                              "finite",
                              source.file, source.tensor, v, where(source, e)));
  }
}

std::size_t checked_value_bytes(FiniteCheck check) {
  switch (check) {
    case FiniteCheck::f32:
    case FiniteCheck::absmax: return sizeof(float);
    case FiniteCheck::bf16: return sizeof(std::uint16_t);
    case FiniteCheck::none: break;
  }
  return 1;
}

void check_before_save(const std::byte* data, std::size_t bytes, FiniteCheck check, const StateSource& source,
                       std::uint64_t value_offset) {
  if (check == FiniteCheck::none || bytes == 0) return;
  StateSource at = source;
  at.first += value_offset * source.stride;
  try {
    if (check == FiniteCheck::bf16) {
      std::vector<float> wide(bytes / sizeof(std::uint16_t));
      for (std::size_t i = 0; i < wide.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        wide[i] = bf16_to_float(h);
      }
      check_finite_state(wide.data(), wide.size(), at);
    } else {
      check_finite_state(reinterpret_cast<const float*>(data), bytes / sizeof(float), at,
                         check == FiniteCheck::absmax);
    }
  } catch (const IoError& e) {
    throw IoError(fmt::format("save_checkpoint refused: {}; nothing was saved", e.what()));
  }
}

}  // namespace zeroshard
