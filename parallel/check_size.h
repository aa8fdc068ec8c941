// Argument checks shared by the tensor-parallel layers: span sizes and
// token ids against the vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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

/// Throws InvariantError naming the layer, the token, `what` the id is
/// ("id", "target") and the vocabulary size for the first of `ids` outside
/// [0, vocab).
inline void check_token_ids(const char* layer, const char* what, std::span<const std::int32_t> ids,
                            std::size_t vocab) {
  for (std::size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || static_cast<std::size_t>(ids[t]) >= vocab) {
      throw InvariantError(
          fmt::format("{}: token {} has {} {}, outside the vocabulary [0, {})", layer, t, what, ids[t], vocab));
    }
  }
}

}  // namespace zeroshard::parallel
