// Helpers for the CPU kernel tests: deterministic data with special values,
// misaligned views, bitwise comparisons, and a loop over every SIMD target
// and thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include "core/dtype.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"

namespace zeroshard::testing {

/// Sizes every kernel is tested at: the edge cases around vector widths
/// (4, 8, 16 lanes) and one size large enough to split over two threads.
inline const std::vector<std::size_t> kSizes = {0, 1, 7, 15, 16, 17, 57, 1000, 10001, 70001};

/// Element offsets from a 64-byte-aligned base: aligned and misaligned.
inline const std::vector<std::size_t> kOffsets = {0, 1, 3};

/// fp32 values that stress the arithmetic and the conversions.
inline std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          bits_float(0xffc00000u), bits_float(0x7f800001u),  // -qNaN, sNaN
                          bits_float(0x7fc12345u),                         // payload
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(), bits_float(1u),  // min normal, min subnormal
                          bits_float(0x007fffffu), -bits_float(0x00400000u),  // subnormals
                          65504.0f, 65519.0f, 65520.0f, -65520.0f,            // fp16 max, Inf threshold
                          5.9604645e-08f, 2.9802322e-08f, 8.940697e-08f,       // fp16 subnormal, halfway
                          bits_float(0x3f808000u), bits_float(0x3f818000u),   // bf16 halfway, even/odd
                          bits_float(0x3f801000u), bits_float(0x3f803000u),   // fp16 halfway, even/odd
                          bits_float(0x387fe000u), bits_float(0x38800000u),   // fp16 normal boundary
                          bits_float(0x33000000u), bits_float(0x33000001u),   // fp16 underflow boundary
                          bits_float(0x477fefffu), bits_float(0x477ff000u),   // fp16 overflow boundary
                          bits_float(0x7f7f8000u), bits_float(0x7f7fffffu)};  // bf16 rounds to Inf
  return v;
}

/// n random floats in [-scale, scale], with a special value every `every`
/// elements (0: none), deterministic in seed.
inline std::vector<float> test_floats(std::size_t n, std::uint64_t seed, float scale,
                                      std::size_t every) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  const auto specials = special_floats();
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = (every != 0 && rng() % every == 0) ? specials[rng() % specials.size()] : d(rng);
  }
  return v;
}

/// A buffer whose data() starts `offset` elements after a 64-byte boundary,
/// so kernels see misaligned pointers.
template <class T>
class OffsetArray {
 public:
  OffsetArray(std::size_t n, std::size_t offset) : storage_(n + offset + 64 / sizeof(T)), n_(n) {
    auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    const std::size_t skip = ((64 - addr % 64) % 64) / sizeof(T);
    data_ = storage_.data() + skip + offset;
  }
  T* data() { return data_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) { return data_[i]; }
  void assign(const std::vector<T>& v) {
    if (n_ > 0) std::memcpy(data_, v.data(), n_ * sizeof(T));
  }
  std::vector<T> to_vector() const { return std::vector<T>(data_, data_ + n_); }

 private:
  std::vector<T> storage_;
  T* data_;
  std::size_t n_;
};

// [Note: NaN payloads]
// IEEE 754 does not say which payload an operation with two NaN operands
// returns (x86 returns the first operand's), and compilers may commute + and
// *, so a vector kernel and its scalar reference can return different NaNs
// where NaNs meet (kernels/cpu/fp_strict.h). Every other result, and
// NaN-ness itself, must match bit for bit; conversions (integer operations)
// are compared strictly.

/// Whether element bits a and b count as equal: the same bits, or (when
/// nan_aware) both NaN ([Note: NaN payloads]).
inline bool same_value(float a, float b, bool nan_aware) {
  return float_bits(a) == float_bits(b) || (nan_aware && std::isnan(a) && std::isnan(b));
}
inline bool same_value(double a, double b, bool nan_aware) {
  std::uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y || (nan_aware && std::isnan(a) && std::isnan(b));
}
/// 16-bit elements of format fmt (bf16 or f16).
inline bool same_value(std::uint16_t a, std::uint16_t b, bool nan_aware, DType fmt) {
  const std::uint32_t inf = fmt == DType::bf16 ? 0x7f80u : 0x7c00u;
  const auto is_nan = [inf](std::uint16_t h) { return (h & 0x7fffu) > inf; };
  return a == b || (nan_aware && is_nan(a) && is_nan(b));
}

/// Index of the first element that differs (see same_value), or -1.
template <class T, class... Fmt>
long first_difference(const T* a, const T* b, std::size_t n, bool nan_aware, Fmt... fmt) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!same_value(a[i], b[i], nan_aware, fmt...)) return static_cast<long>(i);
  }
  return -1;
}

/// CHECKs that two arrays are equal bit for bit (NaN payloads aside when
/// nan_aware, see same_value), reporting the first difference. fmt: the
/// format (bf16/f16) of 16-bit elements, nothing otherwise.
template <class T, class... Fmt>
void check_bitwise(const T* a, const T* b, std::size_t n, const char* what, bool nan_aware,
                   Fmt... fmt) {
  const long i = first_difference(a, b, n, nan_aware, fmt...);
  const std::string what_s = what;
  CAPTURE(what_s);
  CAPTURE(i);
  if (i >= 0) {
    std::uint64_t x = 0, y = 0;
    std::memcpy(&x, a + i, sizeof(T));
    std::memcpy(&y, b + i, sizeof(T));
    CAPTURE(x);
    CAPTURE(y);
    CHECK(i == -1);
  }
}

/// The bf16/fp16 bits of the specials, plus random bits (for 16-bit inputs).
inline std::vector<std::uint16_t> test_halves(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = static_cast<std::uint16_t>(rng());
  return v;
}

/// Calls f() once for every SIMD target the kernels have for this CPU and
/// every thread count in {1, 2}, then restores the defaults.
template <class F>
void for_each_target_and_threads(F&& f) {
  for (const std::int64_t target : kernels::simd_targets()) {
    kernels::force_simd_target(target);
    for (const int threads : {1, 2}) {
      kernels::set_num_threads(threads);
      const std::string target_name = hwy::TargetName(target);
      CAPTURE(target_name);
      CAPTURE(threads);
      f();
    }
  }
  kernels::force_simd_target(0);
  kernels::set_num_threads(0);
}

}  // namespace zeroshard::testing
