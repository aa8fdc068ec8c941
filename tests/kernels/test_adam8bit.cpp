// 8-bit blockwise optimizer states (kernels/cpu/adam/quant_map.h, adam8bit.h):
// the dynamic tree maps and their thresholds against the exact values and
// midpoints; the vector encoder against the reference's binary search over
// every float near a threshold or a region bound and a sweep of all others;
// quantize / dequantize round trips; adam8bit_update against its scalar
// reference bit for bit (codes, absmax, param, param copy) on every SIMD
// target at 1 and 2 threads; and against the fp32 AdamW reference within
// the stated quantization bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam8bit.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernel_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;
using kernels::QuantMap;

namespace {

constexpr QuantMap kMaps[] = {QuantMap::signed_dynamic, QuantMap::unsigned_dynamic};
const std::vector<std::size_t> kSizes8 = {0, 1, 7, 57, 255, 256, 257, 2047, 2048, 2049, 10001};

// The exact value of magnitude u of a map (long double), from the formula
// 10^-E * (0.1 + 0.9 * (k + 1) / 2^F).
long double exact_value(QuantMap map, unsigned u) {
  if (u == 0) return 0.0L;
  const int lmax = map == QuantMap::signed_dynamic ? 6 : 7;
  int l = 0;
  while ((2u << l) <= u) ++l;
  const int e = lmax - l;
  const unsigned k = u - (1u << l);
  return std::pow(10.0L, -e) * (0.1L + 0.9L * (k + 1) / std::ldexp(1.0L, l));
}

// Largest gap between neighbouring magnitudes (the top level's step).
float max_gap(QuantMap map) { return map == QuantMap::signed_dynamic ? 0.9f / 64 : 0.9f / 128; }

std::vector<std::uint8_t> random_codes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> c(n);
  for (auto& x : c) x = static_cast<std::uint8_t>(rng());
  return c;
}

// First index where two code arrays differ, or -1.
long first_code_difference(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<long>(i);
  }
  return -1;
}

void check_codes(const std::uint8_t* a, const std::uint8_t* b, std::size_t n, const char* what) {
  const long i = first_code_difference(a, b, n);
  const std::string what_s = what;
  CAPTURE(what_s);
  CAPTURE(i);
  if (i >= 0) {
    const int x = a[i], y = b[i];
    CAPTURE(x);
    CAPTURE(y);
  }
  CHECK(i == -1);
}

}  // namespace

TEST_CASE("dynamic tree maps: values, order, 1.0 at the top, thresholds near the midpoints") {
  for (const QuantMap map : kMaps) {
    const bool sgn = map == QuantMap::signed_dynamic;
    CAPTURE(sgn);
    const unsigned umax = kernels::quant_map_max_magnitude(map);
    CHECK(umax == (sgn ? 127u : 255u));
    const float* v = kernels::quant_map_values(map);
    const float* th = kernels::quant_map_thresholds(map);
    CHECK(v[umax] == 1.0f);
    CHECK(v[0] == 0.0f);
    CHECK(v[1] == static_cast<float>(sgn ? 1e-6L : 1e-7L));
    for (unsigned u = 0; u <= umax; ++u) {
      CAPTURE(u);
      // Within 2^-23 of the exact value, relatively (N_u * R_L: R_L and the
      // product are each rounded once).
      const long double ex = exact_value(map, u);
      CHECK(std::fabs(static_cast<long double>(v[u]) - ex) <= std::ldexp(ex, -23));
      if (sgn) CHECK(float_bits(v[u | 0x80u]) == (float_bits(v[u]) | 0x80000000u));
      if (u == umax) continue;
      CHECK(v[u] < v[u + 1]);
      // The decision point: within 1e-4 of a code step of the exact midpoint.
      const long double mid = (static_cast<long double>(v[u]) + v[u + 1]) / 2;
      const long double step = static_cast<long double>(v[u + 1]) - v[u];
      CHECK(std::fabs(static_cast<long double>(th[u]) - mid) <= 1e-4L * step);
      CHECK(v[u + 1] - v[u] <= max_gap(map) * 1.0001f);
      // Every map value quantizes to itself.
      CHECK(kernels::quantize_value(map, v[u], 1.0f) == u);
    }
    CHECK(kernels::quantize_value(map, 1.0f, 1.0f) == umax);
    CHECK(kernels::quantize_value(map, 7.0f, 1.0f) == umax);  // beyond the block: the top code
    CHECK(kernels::quantize_value(map, std::numeric_limits<float>::quiet_NaN(), 1.0f) == 0);
    if (sgn) {
      CHECK(kernels::quantize_value(map, -1.0f, 1.0f) == 0xff);
      CHECK(kernels::quantize_value(map, -v[5], 1.0f) == (0x80 | 5));
    } else {
      CHECK(kernels::quantize_value(map, -v[5], 1.0f) == 5);  // by magnitude
    }
  }
}

TEST_CASE("vector encoder equals the binary search: every float near a threshold, a sweep of all others") {
  for (const QuantMap map : kMaps) {
    const bool sgn = map == QuantMap::signed_dynamic;
    CAPTURE(sgn);
    const unsigned umax = kernels::quant_map_max_magnitude(map);
    const float* th = kernels::quant_map_thresholds(map);
    // Blocks of 64 whose first element is 1.0 (absmax 1, inverse 1), so every
    // other element is encoded as it is.
    std::vector<float> x;
    auto push = [&](float a) {
      if (x.size() % 64 == 0) x.push_back(1.0f);
      x.push_back(a);
      if (sgn) {
        if (x.size() % 64 == 0) x.push_back(1.0f);
        x.push_back(-a);
      }
    };
    for (unsigned u = 0; u < umax; ++u) {
      const std::uint32_t b = float_bits(th[u]);
      for (std::uint32_t d = b - 64; d <= b + 64; ++d) push(bits_float(d));
    }
    // Around the region bounds value(2^L - 1), which the vector encoders'
    // tables hold off by a few ulp ([Note: 8-bit vector encoder]).
    const float* values = kernels::quant_map_values(map);
    for (unsigned u = 1; u < umax; u = 2 * u + 1) {
      const std::uint32_t b = float_bits(values[u]);
      for (std::uint32_t d = b - 64; d <= b + 64; ++d) push(bits_float(d));
    }
    for (std::uint32_t bits = 0; bits <= 0x3f800000u; bits += 4099) push(bits_float(bits));
    for (const float s : special_floats()) push(s);
    const std::size_t n = x.size();
    std::vector<std::uint8_t> c1(n), c2(n);
    std::vector<float> a1(kernels::quant_block_count(n, 64)), a2(a1.size());
    kernels::quantize_blockwise_reference(x.data(), n, 64, map, c2.data(), a2.data());
    for_each_target_and_threads([&] {
      std::fill(c1.begin(), c1.end(), 0xaa);
      kernels::quantize_blockwise(x.data(), n, 64, map, c1.data(), a1.data());
      check_bitwise(a1.data(), a2.data(), a1.size(), "absmax", false);
      const long i = first_code_difference(c1.data(), c2.data(), n);
      CAPTURE(i);
      if (i >= 0) CAPTURE(x[i]);
      CHECK(i == -1);
    });
  }
}

TEST_CASE("quantize_blockwise / dequantize_blockwise: references, round trips, error bound") {
  for (const QuantMap map : kMaps) {
    for (const std::size_t block : {std::size_t{64}, std::size_t{256}, std::size_t{2048}}) {
      for (const std::size_t n : kSizes8) {
        const bool sgn = map == QuantMap::signed_dynamic;
        CAPTURE(sgn);
        CAPTURE(block);
        CAPTURE(n);
        const std::size_t nb = kernels::quant_block_count(n, block);
        CHECK(kernels::quant_absmax_bytes(n, block) == 4 * nb);
        CHECK(kernels::adam8bit_state_bytes(n, block) == 2 * (n + 4 * nb));
        std::vector<float> x = test_floats(n, 100 + n, 3.0f, 0);
        if (!sgn) for (auto& e : x) e = std::fabs(e);
        // Blocks spanning many decades too: scale some blocks' tails down.
        for (std::size_t i = 0; i < n; i += 3) x[i] *= 1e-5f;
        std::vector<std::uint8_t> c1(n), c2(n);
        std::vector<float> a1(nb), a2(nb), y1(n), y2(n);
        kernels::quantize_blockwise_reference(x.data(), n, block, map, c2.data(), a2.data());
        kernels::dequantize_blockwise_reference(c2.data(), a2.data(), n, block, map, y2.data());
        // Error bound: half the largest gap times absmax (+ 1e-4 of it for the
        // thresholds, + 2 ulp of the value for the roundings).
        for (std::size_t i = 0; i < n; ++i) {
          const float am = a2[i / block];
          const float bound = max_gap(map) / 2 * am * 1.0001f + 2 * std::ldexp(std::fabs(x[i]), -23);
          CHECK_MESSAGE(std::fabs(y2[i] - x[i]) <= bound, "i=" << i);
        }
        for_each_target_and_threads([&] {
          kernels::quantize_blockwise(x.data(), n, block, map, c1.data(), a1.data());
          check_codes(c1.data(), c2.data(), n, "codes");
          check_bitwise(a1.data(), a2.data(), nb, "absmax", false);
          kernels::dequantize_blockwise(c2.data(), a2.data(), n, block, map, y1.data());
          check_bitwise(y1.data(), y2.data(), n, "dequantized", false);
        });
        // Round trip on codes: dequantize, quantize again: the same codes and
        // absmax (each block's largest element is the top code, value 1.0).
        std::vector<std::uint8_t> codes = random_codes(n, 7 + n);
        std::vector<float> am(nb);
        for (std::size_t b = 0; b < nb; ++b) {
          am[b] = 0.5f + static_cast<float>(b % 7);
          codes[b * block] = sgn && b % 2 == 1 ? 0xff : static_cast<std::uint8_t>(
                                                            kernels::quant_map_max_magnitude(map));
        }
        if (sgn) {
          for (auto& c : codes) c = c == 0x80 ? 0 : c;  // -0 requantizes to 0
        }
        kernels::dequantize_blockwise(codes.data(), am.data(), n, block, map, y1.data());
        kernels::quantize_blockwise(y1.data(), n, block, map, c1.data(), a1.data());
        check_codes(c1.data(), codes.data(), n, "round-trip codes");
        check_bitwise(a1.data(), am.data(), nb, "round-trip absmax", false);
      }
    }
  }
}

TEST_CASE("quantization of non-finite blocks, zero blocks, and bad block sizes") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const QuantMap map : kMaps) {
    std::vector<float> x(128, 0.25f);
    x[3] = nan;           // block 0: NaN
    x[64 + 5] = inf;      // block 1: Inf
    std::vector<std::uint8_t> c(128);
    std::vector<float> a(2), y(128);
    kernels::quantize_blockwise(x.data(), 128, 64, map, c.data(), a.data());
    CHECK(std::isnan(a[0]));
    CHECK(a[1] == inf);
    for (const auto code : c) CHECK(code == 0);
    kernels::dequantize_blockwise(c.data(), a.data(), 128, 64, map, y.data());
    for (const float v : y) CHECK(std::isnan(v));  // the whole block, never silent numbers
    std::vector<float> z(64, 0.0f);
    kernels::quantize_blockwise(z.data(), 64, 64, map, c.data(), a.data());
    CHECK(a[0] == 0.0f);
    CHECK(c[0] == 0);
    CHECK_THROWS_AS(kernels::quantize_blockwise(x.data(), 128, 100, map, c.data(), a.data()),
                    InvariantError);
    CHECK_THROWS_AS(kernels::dequantize_blockwise(c.data(), a.data(), 128, 8192, map, y.data()),
                    InvariantError);
  }
}

namespace {

// The 8-bit state of n elements quantized from random fp32 states.
struct State8 {
  State8(std::size_t n, std::size_t block, std::uint64_t seed)
      : cm(n), cv(n), am(kernels::quant_block_count(n, block)), av(am.size()) {
    std::vector<float> m = test_floats(n, seed, 0.05f, 0), v = test_floats(n, seed + 1, 1e-3f, 0);
    for (auto& e : v) e = e * e;
    kernels::quantize_blockwise_reference(m.data(), n, block, QuantMap::signed_dynamic, cm.data(),
                                          am.data());
    kernels::quantize_blockwise_reference(v.data(), n, block, QuantMap::unsigned_dynamic,
                                          cv.data(), av.data());
  }
  kernels::Adam8bitState view() { return {cm.data(), am.data(), cv.data(), av.data()}; }
  std::vector<std::uint8_t> cm, cv;
  std::vector<float> am, av;
};

}  // namespace

TEST_CASE("adam8bit_update equals adam8bit_update_reference bit for bit") {
  // Blocks of 64 and 256 are updated in groups of 2048 elements, 2048 and
  // 4096 one by one ([Note: 8-bit kernel groups]).
  for (const bool decoupled : {true, false}) {
    for (const std::size_t block : {std::size_t{64}, std::size_t{256}, std::size_t{2048}, std::size_t{4096}}) {
      for_each_target_and_threads([&] {
        for (const std::size_t n : kSizes8) {
          for (const DType gd : {DType::f32, DType::bf16, DType::f16}) {
            for (const int copy_kind : {0, 1, 2}) {
              CAPTURE(decoupled);
              CAPTURE(block);
              CAPTURE(n);
              CAPTURE(copy_kind);
              const std::string gds(dtype_name(gd));
              CAPTURE(gds);
              const DType cd = copy_kind == 2 ? DType::f16 : DType::bf16;
              // Specials in the gradient (NaN, Inf, ...) for f32 only: they
              // poison their blocks on both paths alike.
              const std::vector<float> gf = test_floats(n, 5 + n, 0.5f, gd == DType::f32 ? 401 : 0);
              std::vector<unsigned char> g(n * 4 + 4);
              kernels::convert_reference(gf.data(), DType::f32, g.data(), gd, n);
              std::vector<float> p1 = test_floats(n, 9 + n, 1.0f, 0), p2 = p1;
              State8 s1(n, block, 11 + n), s2 = s1;
              std::vector<std::uint16_t> c1(n + 1), c2(n + 1);
              for (int step = 1; step <= 3; ++step) {
                const kernels::AdamScalars sc = kernels::make_adam_scalars(
                    1e-2, step == 2 ? 0.3 : 0.9, 0.999, 1e-8, 0.1, step, decoupled, 0.75f);
                kernels::adam8bit_update(p1.data(), g.data(), gd, s1.view(),
                                         copy_kind ? c1.data() : nullptr, cd, n, block, sc);
                kernels::adam8bit_update_reference(p2.data(), g.data(), gd, s2.view(),
                                                   copy_kind ? c2.data() : nullptr, cd, n, block,
                                                   sc);
              }
              check_bitwise(p1.data(), p2.data(), n, "param", true);
              check_codes(s1.cm.data(), s2.cm.data(), n, "exp_avg codes");
              check_codes(s1.cv.data(), s2.cv.data(), n, "exp_avg_sq codes");
              check_bitwise(s1.am.data(), s2.am.data(), s1.am.size(), "exp_avg absmax", false);
              check_bitwise(s1.av.data(), s2.av.data(), s1.av.size(), "exp_avg_sq absmax", false);
              if (copy_kind) check_bitwise(c1.data(), c2.data(), n, "param_copy", true, cd);
            }
          }
        }
      });
    }
  }
}

TEST_CASE("adam8bit_update against fp32 AdamW: param exact, states within the quantization bound") {
  // Each step, the fp32 reference starts from the 8-bit states dequantized:
  // param (the same operations on the same values) must match bit for bit,
  // and the new 8-bit states dequantize to within (gap / 2) * absmax *
  // (1 + 1e-4) + 2 ulp of fp32's new exp_avg / exp_avg_sq (quant_map.h).
  const std::size_t n = 10001, block = 256;
  std::vector<float> p8 = test_floats(n, 3, 1.0f, 0);
  State8 s(n, block, 4);
  std::vector<float> m(n), v(n), m8(n), v8(n);
  for (int step = 1; step <= 6; ++step) {
    const std::vector<float> g = test_floats(n, 50 + step, 0.02f, 0);
    const kernels::AdamScalars sc =
        kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, step, true);
    kernels::dequantize_blockwise(s.cm.data(), s.am.data(), n, block, QuantMap::signed_dynamic, m.data());
    kernels::dequantize_blockwise(s.cv.data(), s.av.data(), n, block, QuantMap::unsigned_dynamic, v.data());
    std::vector<float> p32 = p8;
    kernels::adam_update_reference(p32.data(), g.data(), m.data(), v.data(), n, sc);
    kernels::adam8bit_update(p8.data(), g.data(), DType::f32, s.view(), nullptr, DType::bf16, n,
                             block, sc);
    check_bitwise(p8.data(), p32.data(), n, "param vs fp32", false);
    kernels::dequantize_blockwise(s.cm.data(), s.am.data(), n, block, QuantMap::signed_dynamic, m8.data());
    kernels::dequantize_blockwise(s.cv.data(), s.av.data(), n, block, QuantMap::unsigned_dynamic, v8.data());
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t b = i / block;
      CHECK(s.am[b] == kernels::quant_block_absmax(m.data() + b * block, std::min(block, n - b * block)));
      const float bm = 0.9f / 64 / 2 * s.am[b] * 1.0001f + 2 * std::ldexp(std::fabs(m[i]), -23);
      const float bv = 0.9f / 128 / 2 * s.av[b] * 1.0001f + 2 * std::ldexp(v[i], -23);
      CHECK_MESSAGE(std::fabs(m8[i] - m[i]) <= bm, "exp_avg i=" << i << " step " << step);
      CHECK_MESSAGE(std::fabs(v8[i] - v[i]) <= bv, "exp_avg_sq i=" << i << " step " << step);
    }
  }
}

TEST_CASE("adam8bit_update rejects bad arguments") {
  float p = 0, g = 0;
  std::uint8_t c = 0;
  float a = 0;
  const kernels::Adam8bitState st{&c, &a, &c, &a};
  const auto sc = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0, 1, true);
  CHECK_THROWS_AS(kernels::adam8bit_update(&p, &g, DType::f32, st, nullptr, DType::bf16, 1, 100, sc),
                  InvariantError);
  CHECK_THROWS_AS(kernels::adam8bit_update(&p, &g, DType::f64, st, nullptr, DType::bf16, 1, 256, sc),
                  InvariantError);
  CHECK_THROWS_AS(kernels::adam8bit_update(&p, &g, DType::f32, kernels::Adam8bitState{}, nullptr,
                                           DType::bf16, 1, 256, sc),
                  InvariantError);
  kernels::adam8bit_update(&p, &g, DType::f32, kernels::Adam8bitState{}, nullptr, DType::bf16, 0,
                           256, sc);  // n == 0: nothing to do
}

TEST_CASE("blocks the vector encoder leaves to the scalar path: zero, subnormal and huge scales") {
  // A block's inverse scale 1 / absmax is 0 (absmax 0, NaN or Inf) or Inf
  // (absmax below 2^-128): those blocks are encoded element by element by
  // quantize_value in the vector kernels; codes and absmax must still equal
  // the references bit for bit, next to ordinary blocks.
  const std::size_t block = 64, n = 6 * block + 7;
  std::vector<float> x = test_floats(n, 77, 1.0f, 0);
  for (std::size_t i = 0; i < block; ++i) x[i] = 0.0f;                         // absmax 0
  for (std::size_t i = block; i < 2 * block; ++i) x[i] *= 1e-39f;              // subnormal absmax
  x[2 * block + 3] = std::numeric_limits<float>::denorm_min();                 // one subnormal
  for (std::size_t i = 2 * block + 4; i < 3 * block; ++i) x[i] = 0.0f;
  for (std::size_t i = 3 * block; i < 4 * block; ++i) x[i] *= 3e38f;           // near FLT_MAX
  x[4 * block + 1] = -0.0f;
  for (const QuantMap map : kMaps) {
    CAPTURE(map == QuantMap::signed_dynamic);
    std::vector<float> xs = x;
    if (map == QuantMap::unsigned_dynamic) for (auto& e : xs) e = std::fabs(e);
    const std::size_t nb = kernels::quant_block_count(n, block);
    std::vector<std::uint8_t> c1(n), c2(n);
    std::vector<float> a1(nb), a2(nb);
    kernels::quantize_blockwise_reference(xs.data(), n, block, map, c2.data(), a2.data());
    for_each_target_and_threads([&] {
      kernels::quantize_blockwise(xs.data(), n, block, map, c1.data(), a1.data());
      check_codes(c1.data(), c2.data(), n, "codes");
      check_bitwise(a1.data(), a2.data(), nb, "absmax", false);
    });
  }
  // The fused kernel: a block whose gradient and states are 0 (both absmax
  // 0 afterwards) and one whose exp_avg becomes subnormal (inverse scale
  // Inf; exp_avg_sq underflows to 0).
  const std::size_t bl = 256, m = 3 * bl + 5;
  std::vector<float> g = test_floats(m, 8, 0.5f, 0);
  for (std::size_t i = 0; i < bl; ++i) g[i] = 0.0f;
  for (std::size_t i = bl; i < 2 * bl; ++i) g[i] *= 1e-38f;
  for_each_target_and_threads([&] {
    State8 s1(m, bl, 21), s2 = s1;
    for (std::size_t i = 0; i < 2 * bl; ++i) s1.cm[i] = s1.cv[i] = s2.cm[i] = s2.cv[i] = 0;
    s1.am[0] = s1.av[0] = s2.am[0] = s2.av[0] = 0.0f;
    s1.am[1] = s1.av[1] = s2.am[1] = s2.av[1] = 0.0f;
    std::vector<float> p1 = test_floats(m, 9, 1.0f, 0), p2 = p1;
    const auto sc = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.0, 1, true);
    kernels::adam8bit_update(p1.data(), g.data(), DType::f32, s1.view(), nullptr, DType::bf16, m,
                             bl, sc);
    kernels::adam8bit_update_reference(p2.data(), g.data(), DType::f32, s2.view(), nullptr,
                                       DType::bf16, m, bl, sc);
    CHECK(s2.am[0] == 0.0f);
    CHECK(s2.am[1] > 0.0f);
    CHECK(s2.am[1] < 1e-38f);
    CHECK(std::isinf(kernels::quant_inverse_absmax(s2.am[1])));
    check_bitwise(p1.data(), p2.data(), m, "param", true);
    check_codes(s1.cm.data(), s2.cm.data(), m, "exp_avg codes");
    check_codes(s1.cv.data(), s2.cv.data(), m, "exp_avg_sq codes");
    check_bitwise(s1.am.data(), s2.am.data(), s1.am.size(), "exp_avg absmax", false);
    check_bitwise(s1.av.data(), s2.av.data(), s1.av.size(), "exp_avg_sq absmax", false);
  });
}
