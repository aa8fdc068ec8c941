// The model the engine's component tests (ArrayStore, GradReducer,
// Unsharder; tests/runtime/) sweep: three units of one parameter each, the
// outer two of n elements and the middle one of 7, for n in kComponentSizes
// (empty, single-element and odd units; one that spans several 4096-element
// sub-groups and buckets).
#pragma once

#include <cstddef>
#include <cstdint>

#include <fmt/format.h>

#include "runtime/sharding/flat_layout.h"

namespace zeroshard::testing {

/// Unit sizes n the component tests run over.
inline constexpr std::size_t kComponentSizes[] = {0, 1, 7, 57, 10001};

/// Units "u0", "u1", "u2" holding parameters "u0.w" [n], "u1.w" [7], "u2.w"
/// [n] (parameter group 0), finalized for world_size ranks.
inline FlatLayout component_layout(std::size_t n, int world_size) {
  FlatLayout l;
  const std::size_t sizes[] = {n, 7, n};
  for (std::size_t u = 0; u < 3; ++u) {
    const UnitId id = l.add_unit(fmt::format("u{}", u));
    l.add_param(id, fmt::format("u{}.w", u), {static_cast<std::int64_t>(sizes[u])}, 0);
  }
  l.finalize(world_size);
  return l;
}

}  // namespace zeroshard::testing
