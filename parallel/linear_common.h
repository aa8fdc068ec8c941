// What the column- and row-parallel linear layers share: validating their
// shape and splitting the split dimension in granules, adding a bias to
// every row of an output, and summing an output gradient's rows into the
// bias gradient. Row-major fp32 [tokens, width] arrays; sizes in elements.
// Header-only; thread safe (pure functions).
#pragma once

#include <fmt/format.h>

#include <cstddef>

#include "core/error.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// The slice of `split_features` (the layer's in or out features, named
/// `split_name` in errors) that tp rank `rank` of `world_size` holds when
/// blocks of `granule` features move together ([Note: uneven split] over
/// split_features / granule blocks). Throws ConfigError naming `layer` when
/// in_features or out_features is 0, or granule is 0 or does not divide
/// split_features.
inline Slice linear_split(const char* layer, std::size_t in_features, std::size_t out_features,
                          std::size_t split_features, const char* split_name, std::size_t granule, int world_size,
                          int rank) {
  if (in_features == 0 || out_features == 0) {
    throw ConfigError(fmt::format("{}: in_features={} and out_features={} must both be >= 1", layer, in_features,
                                  out_features));
  }
  if (granule == 0 || split_features % granule != 0) {
    throw ConfigError(
        fmt::format("{}: granule={} must be >= 1 and divide {}={}", layer, granule, split_name, split_features));
  }
  const Slice blocks = split_slice(split_features / granule, world_size, rank);
  return Slice{blocks.begin * granule, blocks.size * granule};
}

/// y [tokens, width] += bias [width] on every row.
inline void add_bias_rows(float* y, const float* bias, std::size_t tokens, std::size_t width) {
  for (std::size_t t = 0; t < tokens; ++t) {
    float* row = y + t * width;
    for (std::size_t o = 0; o < width; ++o) row[o] += bias[o];
  }
}

/// dbias [width] += the column sums of dy [tokens, width], row by row in
/// token order.
inline void add_column_sums(float* dbias, const float* dy, std::size_t tokens, std::size_t width) {
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* row = dy + t * width;
    for (std::size_t o = 0; o < width; ++o) dbias[o] += row[o];
  }
}

}  // namespace zeroshard::parallel
