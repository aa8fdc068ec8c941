// The median the benchmarks report: of an odd count the middle value, of an
// even count the mean of the two middle values; NaN for none. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace zeroshard::bench {

/// The median of `v` (see the file comment). Pure.
inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 == 1 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

}  // namespace zeroshard::bench
