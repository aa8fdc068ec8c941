// Bitwise equality of fp32 arrays, for tests whose results must equal a
// reference to the last bit (NaN payloads and -0 against +0 differ).
// Header-only.
#pragma once

#include <cstring>
#include <vector>

namespace zeroshard::testing {

/// True when a and b have the same size and the same bytes.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp of two empty vectors would be passed null pointers (UB).
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace zeroshard::testing
