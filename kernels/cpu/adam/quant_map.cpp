#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/adam/quant_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace zeroshard::kernels {

namespace {

// 10^k for 0 <= k <= 8, exact in float and double.
double pow10(int k) {
  double r = 1.0;
  for (int i = 0; i < k; ++i) r *= 10.0;
  return r;
}

// The encoder's line of each region r = 0..lmax (scale[r], offset[r]; see
// QuantTables step 2). Region 0 covers [0, value(1)) (codes 0, 1); L >= 1
// covers [value(2^L - 1), value(2^(L+1) - 1)), where value(2^L - 1) and the
// 2^L values of level L are equally spaced by the level's step, so the
// nearest code is the rounded position (u - 2^L + 1 steps above the
// region's start). Position + 0.5, truncated, is that rounding.
void region_lines(int lmax, float* scale, float* offset) {
  for (int l = 0; l <= lmax; ++l) {
    const double denom = std::ldexp(pow10(lmax - l + 1), l);
    if (l == 0) {
      scale[0] = static_cast<float>(denom / 10.0);  // a / value(1)
      offset[0] = 0.5f;
    } else {
      // value = (9u + 9 - 8 * 2^L) / denom  =>  u = value * denom / 9 + (8 * 2^L - 9) / 9.
      scale[l] = static_cast<float>(denom / 9.0);
      offset[l] = static_cast<float>((std::ldexp(8.0, l) - 9.0) / 9.0 + 0.5);
    }
  }
}

detail::QuantTables build_tables(bool is_signed) {
  detail::QuantTables t{};
  const int lmax = is_signed ? 6 : 7;  // levels L = F = 0..lmax, exponent E = lmax - L
  t.is_signed = is_signed;
  t.max_magnitude = (2u << lmax) - 1;
  // Magnitudes: u = 2^L + k; value = N_u * R_L, N_u = 9u + 9 - 8 * 2^L,
  // R_L = 1 / (2^L * 10^(E + 1)) (the denominator is exact in float).
  float mag[256] = {};
  float r[9] = {};
  for (int l = 0; l <= lmax; ++l) {
    const float denom = static_cast<float>(std::ldexp(pow10(lmax - l + 1), l));
    r[l] = 1.0f / denom;
    for (unsigned u = 1u << l; u < (2u << l); ++u) {
      mag[u] = static_cast<float>(9u * u + 9u - (8u << l)) * r[l];
    }
  }
  t.lmax = lmax;
  for (int l = 0; l <= lmax; ++l) {
    t.dec_r[l] = r[l];
    t.dec_c[l] = static_cast<float>(9 - (8 << l));
  }  // entries lmax + 1 .. 15 stay 0 (entry 15: u = 0)
  region_lines(lmax, t.enc_scale, t.enc_offset);
  region_lines(6, t.enc_scale_both, t.enc_offset_both);
  region_lines(7, t.enc_scale_both + 8, t.enc_offset_both + 8);
  t.enc_region_offset = is_signed ? 0 : 8;
  // Region bounds value(2^L - 1), L = 1..lmax: enc_next[r] is the bound
  // above region r; by binade (enc_base / enc_bound), the number of bounds
  // at or below the binade's start and the bound inside it. The arithmetic
  // base (quant_region_base) must count the same for every binade.
  for (int r = 0; r < 16; ++r) {
    t.enc_next[r] = r < lmax ? mag[(2u << r) - 1] : std::numeric_limits<float>::infinity();
  }
  for (int e = 0; e < 255; ++e) {
    const float lo = e == 0 ? 0.0f : bits_float(static_cast<std::uint32_t>(e) << 23);
    const float hi = bits_float(static_cast<std::uint32_t>(e + 1) << 23);
    int base = 0;
    float bound = std::numeric_limits<float>::infinity();
    for (int l = 1; l <= lmax; ++l) {
      const float b = mag[(1u << l) - 1];
      if (b <= lo) {
        ++base;
      } else if (b < hi) {
        bound = b;
      }
    }
    ZS_CHECK(base == detail::quant_region_base(lmax, e),
             "quant_map: region base of binade {} is {}, arithmetic gives {}", e, base,
             detail::quant_region_base(lmax, e));
    if (e >= 96 && e < 128) {
      t.enc_base[e - 96] = base;
      t.enc_bound[e - 96] = bound;
      // The bound moves by at most 15 ulp: near a bound both regions'
      // lines truncate to the same code ([Note: 8-bit vector encoder]).
      const std::uint32_t bound_bits = std::isinf(bound) ? 0x7f7ffff0u : float_bits(bound) & ~15u;
      t.enc_bound_base[e - 96] =
          bits_float(bound_bits | static_cast<std::uint32_t>(base + t.enc_region_offset));
    }
  }
  // By groups of four binades from 96: the bounds inside (at most two: they
  // are a decade, 3.3 binades, apart) and the base of the first binade.
  constexpr std::uint32_t kNoBound = 0x7f7ffff8u;  // above every a
  for (int g = 0; g < 8; ++g) {
    const int e0 = 96 + 4 * g;
    const float lo = bits_float(static_cast<std::uint32_t>(e0) << 23);
    const float hi = bits_float(static_cast<std::uint32_t>(e0 + 4) << 23);
    std::uint32_t inside[2] = {kNoBound, kNoBound};
    int count = 0;
    for (int l = 1; l <= lmax; ++l) {
      const float b = mag[(1u << l) - 1];
      if (b > lo && b < hi) {
        ZS_CHECK(count < 2, "quant_map: three region bounds in binades {}..{}", e0, e0 + 3);
        inside[count++] = float_bits(b);
      }
    }
    // The lower bound moves by at most 7 ulp ([Note: 8-bit vector encoder]).
    const auto base = static_cast<std::uint32_t>(detail::quant_region_base(lmax, e0));
    t.enc_group_lo[g] = bits_float((inside[0] & ~7u) | base);
    t.enc_group_hi[g] = bits_float(inside[1]);
  }
  for (unsigned c = 0; c < 256; ++c) {
    if (is_signed) {
      const float v = mag[c & 0x7fu];
      t.values[c] = (c & 0x80u) != 0 ? bits_float(float_bits(v) | 0x80000000u) : v;
    } else {
      t.values[c] = mag[c];
    }
  }
  // Thresholds: the smallest float a >= 0 whose code exceeds u (the
  // arithmetic is monotone in a), by bisection over the bits of a in [0, 2).
  for (unsigned u = 0; u < t.max_magnitude; ++u) {
    std::uint32_t lo = 0, hi = 0x40000000u;  // code(lo) <= u < code(hi)
    while (hi - lo > 1) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (detail::quantize_magnitude_arith(t, bits_float(mid)) > u) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    t.thresholds[u] = bits_float(hi);
  }
  t.thresholds[t.max_magnitude] = std::numeric_limits<float>::infinity();
  return t;
}

}  // namespace

namespace detail {

unsigned quantize_magnitude_arith(const QuantTables& t, float a) {
  if (std::isnan(a)) a = 0.0f;
  a = std::min(a, 1.0f);
  const int base = quant_region_base(t.lmax, static_cast<int>(float_bits(a) >> 23));
  const int region = base + (a >= t.enc_next[base] ? 1 : 0);
  const float pos = std::fma(a, t.enc_scale[region], t.enc_offset[region]);
  return static_cast<unsigned>(static_cast<std::int32_t>(pos));
}

const QuantTables& quant_tables(QuantMap map) {
  static const QuantTables signed_tables = build_tables(true);
  static const QuantTables unsigned_tables = build_tables(false);
  return map == QuantMap::signed_dynamic ? signed_tables : unsigned_tables;
}

}  // namespace detail

void check_quant_block(std::size_t block, const char* where) {
  ZS_CHECK(block >= kQuantBlockMin && block <= kQuantBlockMax && (block & (block - 1)) == 0,
           "{}: quantization block size {} is not a power of two in [{}, {}]", where, block,
           kQuantBlockMin, kQuantBlockMax);
}

const float* quant_map_values(QuantMap map) { return detail::quant_tables(map).values; }

unsigned quant_map_max_magnitude(QuantMap map) {
  return detail::quant_tables(map).max_magnitude;
}

const float* quant_map_thresholds(QuantMap map) { return detail::quant_tables(map).thresholds; }

float quant_block_absmax(const float* x, std::size_t n) {
  float m = 0.0f;
  bool nan = false;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    nan = nan || std::isnan(a);
    m = a > m ? a : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

std::uint8_t quantize_value(QuantMap map, float x, float inv) {
  const detail::QuantTables& t = detail::quant_tables(map);
  const float y = x * inv;
  float a = std::fabs(y);
  if (std::isnan(a)) a = 0.0f;
  // Binary search: the number of thresholds <= a is the nearest magnitude.
  const float* th = t.thresholds;
  const unsigned u =
      static_cast<unsigned>(std::upper_bound(th, th + t.max_magnitude, a) - th);
  if (t.is_signed && y < 0.0f) return static_cast<std::uint8_t>(u | 0x80u);
  return static_cast<std::uint8_t>(u);
}

float dequantize_value(QuantMap map, std::uint8_t code, float absmax) {
  const detail::QuantTables& t = detail::quant_tables(map);
  if (!t.is_signed) return t.values[code] * absmax;
  const float v = t.values[code & 0x7fu] * absmax;
  return (code & 0x80u) != 0 ? bits_float(float_bits(v) | 0x80000000u) : v;
}

void quantize_blockwise_reference(const float* x, std::size_t n, std::size_t block, QuantMap map,
                                  std::uint8_t* codes, float* absmax) {
  check_quant_block(block, "quantize_blockwise_reference");
  for (std::size_t b = 0; b * block < n; ++b) {
    const std::size_t lo = b * block, len = std::min(block, n - lo);
    absmax[b] = quant_block_absmax(x + lo, len);
    const float inv = quant_inverse_absmax(absmax[b]);
    for (std::size_t i = lo; i < lo + len; ++i) codes[i] = quantize_value(map, x[i], inv);
  }
}

void dequantize_blockwise_reference(const std::uint8_t* codes, const float* absmax,
                                    std::size_t n, std::size_t block, QuantMap map, float* x) {
  check_quant_block(block, "dequantize_blockwise_reference");
  for (std::size_t i = 0; i < n; ++i) x[i] = dequantize_value(map, codes[i], absmax[i / block]);
}

}  // namespace zeroshard::kernels
