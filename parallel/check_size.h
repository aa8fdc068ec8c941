// Span size checks shared by the tensor-parallel layers.
#pragma once

#include <cstddef>

#include "core/error.h"

namespace zeroshard::parallel {

/// Throws InvariantError naming the layer, the argument and both sizes when
/// `got` != `want` elements.
inline void check_size(const char* layer, const char* arg, std::size_t got, std::size_t want) {
  if (got != want) {
    throw InvariantError(
        fmt::format("{}: {} has {} elements, expected {}", layer, arg, got, want));
  }
}

}  // namespace zeroshard::parallel
