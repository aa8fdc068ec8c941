// How the tensor-parallel layers split a dimension across the ranks of a
// tensor-parallel group, and helpers that cut a rank's slice out of a full
// (unsplit) weight.
//
// [Note: uneven split]
// n rows (or columns, or vocabulary entries) over p ranks: with q = n / p and
// r = n % p, ranks 0..r-1 hold q + 1 items and ranks r..p-1 hold q; rank i
// starts at i * q + min(i, r). Any n >= 0 and p >= 1 work: 7 over 4 is
// 2, 2, 2, 1, and 1 over 4 is 1, 0, 0, 0 (a rank may hold nothing; its
// GEMMs are empty and it still joins every collective). Megatron-LM asserts
// divisibility instead; splitting unevenly keeps byte-level vocabularies (257
// symbols) and odd widths usable at any tp.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace zeroshard::parallel {

/// A contiguous range [begin, begin + size) of items (rows, columns or
/// vocabulary ids; elements of that dimension, not bytes).
struct Slice {
  std::size_t begin = 0;
  std::size_t size = 0;
  std::size_t end() const { return begin + size; }
  bool contains(std::size_t i) const { return i >= begin && i < begin + size; }
  friend bool operator==(const Slice&, const Slice&) = default;
};

/// Part `index` of `n` items split over `parts` ranks as [Note: uneven
/// split]. Throws ConfigError when parts < 1 or index is outside [0, parts).
Slice split_slice(std::size_t n, int parts, int index);

/// Rows `rows` of a row-major [n_rows, cols] matrix, as a row-major
/// [rows.size, cols] matrix (a column-parallel weight or a vocabulary slice of
/// an embedding from the full one). Throws InvariantError when `full` does
/// not hold n_rows * cols elements or the slice ends past n_rows.
std::vector<float> take_rows(std::span<const float> full, std::size_t n_rows, std::size_t cols,
                             Slice rows);

/// Columns `cols` of a row-major [rows, n_cols] matrix, as a row-major
/// [rows, cols.size] matrix (a row-parallel weight from the full one).
/// Throws InvariantError when `full` does not hold rows * n_cols elements or
/// the slice ends past n_cols.
std::vector<float> take_cols(std::span<const float> full, std::size_t rows, std::size_t n_cols,
                             Slice cols);

}  // namespace zeroshard::parallel
