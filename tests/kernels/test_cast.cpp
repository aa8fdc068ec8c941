// kernels/cpu/cast.h (cast, accumulate_cast, grad_stats) against plain
// scalar loops written here with core/dtype.h, bit for bit: every dtype
// pair of f32, bf16, f16, sizes 0, 1, 7, 57, 10001 (and 40001, which splits
// over two threads), scales 1 and 0.25, every SIMD target this CPU has and 1
// and 2 threads. The loops are the element formulas cast.h documents (and
// that kernels/cpu/cast.cpp ran as scalar code before it moved onto the
// vector kernels of convert.h and grad_check.h).
#include "kernels/cpu/fp_strict.h"  // first: the loops below must not contract to FMA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/grad_check.h"
#include "kernel_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
const std::vector<std::size_t> kCastSizes = {0, 1, 7, 57, 10001, 40001};
constexpr float kScales[] = {1.0f, 0.25f};

// Element i of an array of dtype t, widened to float (core/dtype.h).
float widen(const std::vector<std::uint8_t>& a, DType t, std::size_t i) {
  if (t == DType::f32) {
    float v;
    std::memcpy(&v, a.data() + 4 * i, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, a.data() + 2 * i, 2);
  return t == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
}

// Stores v into element i of an array of dtype t, rounded by core/dtype.h.
void narrow(std::vector<std::uint8_t>& a, DType t, std::size_t i, float v) {
  if (t == DType::f32) {
    std::memcpy(a.data() + 4 * i, &v, 4);
    return;
  }
  const std::uint16_t h = t == DType::bf16 ? float_to_bf16(v) : float_to_f16(v);
  std::memcpy(a.data() + 2 * i, &h, 2);
}

// n elements of dtype t: fp32 values with specials (Inf, NaN, subnormals,
// rounding cases) every few elements, or random 16-bit patterns (every
// bf16/f16 class, NaNs included).
std::vector<std::uint8_t> make_array(DType t, std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> a(n * dtype_size(t));
  if (t == DType::f32) {
    const std::vector<float> v = test_floats(n, seed, 4.0f, 5);
    if (n != 0) std::memcpy(a.data(), v.data(), a.size());
  } else {
    const std::vector<std::uint16_t> v = test_halves(n, seed);
    if (n != 0) std::memcpy(a.data(), v.data(), a.size());
  }
  return a;
}

// Element-wise comparison of two arrays of dtype t (nan_aware: NaN payloads
// may differ, see [Note: NaN payloads]).
void check_same(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                DType t, std::size_t n, const char* what, bool nan_aware) {
  if (t == DType::f32) {
    check_bitwise(reinterpret_cast<const float*>(got.data()),
                  reinterpret_cast<const float*>(want.data()), n, what, nan_aware);
  } else {
    check_bitwise(reinterpret_cast<const std::uint16_t*>(got.data()),
                  reinterpret_cast<const std::uint16_t*>(want.data()), n, what, nan_aware, t);
  }
}

}  // namespace

TEST_CASE("cast and accumulate_cast equal scalar loops bit for bit, every dtype pair") {
  for_each_target_and_threads([&] {
    for (const DType st : kDtypes) {
      for (const DType dt : kDtypes) {
        const std::string pair = std::string(dtype_name(st)) + " -> " + std::string(dtype_name(dt));
        CAPTURE(pair);
        for (const std::size_t n : kCastSizes) {
          CAPTURE(n);
          const auto src = make_array(st, n, 17 + n);
          const auto dst0 = make_array(dt, n, 91 + n);
          for (const float scale : kScales) {
            CAPTURE(scale);
            // cast: dst = round(float(src) * scale), the multiply skipped at 1.
            std::vector<std::uint8_t> got(n * dtype_size(dt)), want(got.size());
            kernels::cast(got.data(), dt, src.data(), st, n, scale);
            for (std::size_t i = 0; i < n; ++i) {
              const float x = widen(src, st, i);
              narrow(want, dt, i, scale == 1.0f ? x : x * scale);
            }
            // One NaN operand at most: its payload is kept, so compare strictly.
            check_same(got, want, dt, n, "cast", false);

            // accumulate_cast: dst = round(float(dst) + float(src) * scale).
            got = dst0;
            want = dst0;
            kernels::accumulate_cast(got.data(), dt, src.data(), st, n, scale);
            for (std::size_t i = 0; i < n; ++i) {
              narrow(want, dt, i, widen(want, dt, i) + widen(src, st, i) * scale);
            }
            check_same(got, want, dt, n, "accumulate_cast", true);
          }
        }
      }
      // In place (dst == src, same dtype), as the engine unscales gradients.
      for (const std::size_t n : kCastSizes) {
        CAPTURE(n);
        auto buf = make_array(st, n, 5 + n);
        auto want = buf;
        kernels::cast(buf.data(), st, buf.data(), st, n, 0.25f);
        for (std::size_t i = 0; i < n; ++i) narrow(want, st, i, widen(want, st, i) * 0.25f);
        check_same(buf, want, st, n, "in-place cast", false);
      }
    }
  });
}

TEST_CASE("grad_stats: fixed-order sum of squares and Inf/NaN count, the same on every target") {
  for_each_target_and_threads([&] {
    for (const DType t : kDtypes) {
      const std::string dtype_s(dtype_name(t));
      CAPTURE(dtype_s);
      for (const std::size_t n : kCastSizes) {
        CAPTURE(n);
        for (const bool specials : {false, true}) {
          CAPTURE(specials);
          std::vector<std::uint8_t> a;
          if (specials) {
            a = make_array(t, n, 3 + n);
          } else {  // finite values only
            const std::vector<float> v = test_floats(n, 3 + n, 2.0f, 0);
            a.resize(n * dtype_size(t));
            for (std::size_t i = 0; i < n; ++i) narrow(a, t, i, v[i]);
          }
          const kernels::GradStats st = kernels::grad_stats(a.data(), t, n);
          // The sum's order is grad_check.h's; its reference is the scalar
          // definition of that order.
          const kernels::GradCheck ref =
              kernels::grad_check_reference(a.data(), t, n, 1.0f, false);
          CHECK(same_value(st.sum_of_squares, ref.sum_of_squares, true));
          std::size_t nonfinite = 0;
          double plain = 0;  // one accumulator, in order: agrees to rounding
          for (std::size_t i = 0; i < n; ++i) {
            const double x = widen(a, t, i);
            nonfinite += !std::isfinite(x);
            plain += x * x;
          }
          CHECK(st.nonfinite == nonfinite);
          CHECK(kernels::count_nonfinite(a.data(), t, n) == nonfinite);
          CHECK(kernels::count_nonfinite_reference(a.data(), t, n) == nonfinite);
          if (nonfinite == 0) {
            CHECK(std::fabs(st.sum_of_squares - plain) <= 1e-12 * plain);
          } else {
            CHECK(!std::isfinite(st.sum_of_squares));
          }
        }
      }
    }
  });
}

TEST_CASE("convert_scaled and accumulate_scaled equal their scalar references") {
  for_each_target_and_threads([&] {
    for (const DType st : kDtypes) {
      for (const DType dt : kDtypes) {
        const std::string pair = std::string(dtype_name(st)) + " -> " + std::string(dtype_name(dt));
        CAPTURE(pair);
        const std::size_t n = 1037;
        const auto src = make_array(st, n, 7);
        for (const float scale : kScales) {
          CAPTURE(scale);
          std::vector<std::uint8_t> got(n * dtype_size(dt)), want(got.size());
          kernels::convert_scaled(src.data(), st, got.data(), dt, n, scale);
          kernels::convert_scaled_reference(src.data(), st, want.data(), dt, n, scale);
          check_same(got, want, dt, n, "convert_scaled", false);
          got = make_array(dt, n, 8);
          want = got;
          kernels::accumulate_scaled(src.data(), st, got.data(), dt, n, scale);
          kernels::accumulate_scaled_reference(src.data(), st, want.data(), dt, n, scale);
          check_same(got, want, dt, n, "accumulate_scaled", true);
        }
      }
    }
  });
}

TEST_CASE("cast, accumulate_cast and grad_stats refuse f64 with an InvariantError") {
  double d[2] = {1.0, 2.0};
  float f[2] = {0.0f, 0.0f};
  CHECK_THROWS_AS(kernels::cast(f, DType::f32, d, DType::f64, 2), InvariantError);
  CHECK_THROWS_AS(kernels::cast(d, DType::f64, f, DType::f32, 2), InvariantError);
  CHECK_THROWS_AS(kernels::accumulate_cast(d, DType::f64, f, DType::f32, 2), InvariantError);
  CHECK_THROWS_AS(kernels::grad_stats(d, DType::f64, 2), InvariantError);
  CHECK_THROWS_AS(kernels::count_nonfinite(d, DType::f64, 2), InvariantError);
  CHECK_THROWS_WITH_AS(kernels::cast(f, DType::f32, d, DType::f64, 2),
                       doctest::Contains("cast source must be f32, bf16 or f16, got f64"),
                       InvariantError);
}
