#include "parallel/partition.h"

#include <algorithm>

#include "core/error.h"

namespace zeroshard::parallel {

Slice split_slice(std::size_t n, int parts, int index) {
  if (parts < 1) {
    throw ConfigError(fmt::format("split of {} items: the number of parts is {}, must be >= 1", n,
                                  parts));
  }
  if (index < 0 || index >= parts) {
    throw ConfigError(
        fmt::format("split of {} items over {} parts: part {} does not exist", n, parts, index));
  }
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t q = n / p;
  const std::size_t r = n % p;
  return Slice{i * q + std::min(i, r), q + (i < r ? 1 : 0)};
}

std::vector<float> take_rows(std::span<const float> full, std::size_t n_rows, std::size_t cols,
                             Slice rows) {
  ZS_CHECK(full.size() == n_rows * cols, "take_rows: matrix has {} elements, expected {} x {}",
           full.size(), n_rows, cols);
  ZS_CHECK(rows.end() <= n_rows, "take_rows: rows [{}, {}) outside a matrix of {} rows",
           rows.begin, rows.end(), n_rows);
  const auto first = full.begin() + static_cast<std::ptrdiff_t>(rows.begin * cols);
  return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(rows.size * cols));
}

std::vector<float> take_cols(std::span<const float> full, std::size_t rows, std::size_t n_cols,
                             Slice cols) {
  ZS_CHECK(full.size() == rows * n_cols, "take_cols: matrix has {} elements, expected {} x {}",
           full.size(), rows, n_cols);
  ZS_CHECK(cols.end() <= n_cols, "take_cols: columns [{}, {}) outside a matrix of {} columns",
           cols.begin, cols.end(), n_cols);
  std::vector<float> out(rows * cols.size);
  for (std::size_t i = 0; i < rows; ++i) {
    std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(i * n_cols + cols.begin), cols.size,
                out.begin() + static_cast<std::ptrdiff_t>(i * cols.size));
  }
  return out;
}

}  // namespace zeroshard::parallel
