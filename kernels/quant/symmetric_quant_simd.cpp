// Vector symmetric block quantization ([Note: symmetric block quantization]
// in kernels/quant/symmetric_quant.h): Highway, compiled once per target and
// chosen at run time, split over kernel_pool() by whole blocks. Every
// operation is the reference's, lane by lane (the absmax is a max, exact in
// any order; the rounding is the reference's two adds, not hn::Round), so
// the codes, scales and values are bitwise the references' for any target
// and thread count.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quant/symmetric_quant_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant/symmetric_quant.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

using DF = hn::ScalableTag<float>;
constexpr float kRint = 12582912.0f;  // 1.5 * 2^23, as the reference
constexpr std::size_t kMaxLanes = hn::MaxLanes(DF());

// The clamped codes of v / s (s finite, > 0) as floats.
HWY_INLINE hn::Vec<DF> Codes(DF df, hn::Vec<DF> v, hn::Vec<DF> s, hn::Vec<DF> qmax) {
  const auto t = hn::Div(v, s);
  const auto rint = hn::Set(df, kRint);
  const auto r = hn::Sub(hn::Add(t, rint), rint);
  return hn::Min(hn::Max(r, hn::Neg(qmax)), qmax);
}

// Stores the first `count` (<= Lanes) codes of c at element i of `codes`.
// (D is always DF; a template so that the other targets' branches are
// not instantiated.)
template <QuantBits kBits, class D>
HWY_INLINE void StoreCodes(D df, hn::Vec<D> c, std::uint8_t* codes, std::size_t i, std::size_t count) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::int8_t, D> d8;
  const auto q8 = hn::DemoteTo(d8, hn::ConvertTo(di, c));
  const std::size_t lanes = hn::Lanes(df);
  if constexpr (kBits == QuantBits::int8) {
    if (count == lanes) {
      hn::StoreU(q8, d8, reinterpret_cast<std::int8_t*>(codes + i));
      return;
    }
    HWY_ALIGN std::int8_t buf[kMaxLanes];
    hn::Store(q8, d8, buf);
    std::memcpy(codes + i, buf, count);
  } else if constexpr (HWY_TARGET == HWY_SCALAR) {
    // One lane: element i's nibble into its byte.
    const int q = hn::GetLane(hn::ConvertTo(di, c));
    std::uint8_t& b = codes[i / 2];
    const auto nibble = static_cast<std::uint8_t>(q & 0xf);
    b = i % 2 == 0 ? nibble : static_cast<std::uint8_t>(b | (nibble << 4));
    (void)count;
  } else {
    // Pairs of int8 lanes as one u16 lane: low byte element 2j, high byte
    // 2j + 1; both nibbles into the low byte, then narrowed.
    const hn::Repartition<std::int16_t, decltype(d8)> d16;
    const hn::Rebind<std::uint8_t, decltype(d16)> du8;
    const auto w = hn::BitCast(d16, q8);
    const auto packed = hn::Or(hn::And(w, hn::Set(d16, 0x000f)), hn::And(hn::ShiftRight<4>(w), hn::Set(d16, 0x00f0)));
    const auto bytes = hn::DemoteTo(du8, packed);
    if (count == lanes) {
      hn::StoreU(bytes, du8, codes + i / 2);
      return;
    }
    HWY_ALIGN std::uint8_t buf[kMaxLanes];
    hn::Store(bytes, du8, buf);
    std::memcpy(codes + i / 2, buf, (count + 1) / 2);
  }
}

// Lanes codes from element i of `codes` as floats (exact small integers);
// `count` (<= Lanes) of them are read, the rest are 0.
template <QuantBits kBits, class D>
HWY_INLINE hn::Vec<D> LoadCodes(D df, const std::uint8_t* codes, std::size_t i, std::size_t count) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::int8_t, D> d8;
  const std::size_t lanes = hn::Lanes(df);
  if constexpr (kBits == QuantBits::int8) {
    if (count == lanes) {
      return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(codes + i))));
    }
    HWY_ALIGN std::int8_t buf[kMaxLanes] = {};
    std::memcpy(buf, codes + i, count);
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::Load(d8, buf)));
  } else if constexpr (HWY_TARGET == HWY_SCALAR) {
    (void)count;
    const int nibble = i % 2 == 0 ? codes[i / 2] & 0xf : codes[i / 2] >> 4;
    return hn::Set(df, static_cast<float>(nibble >= 8 ? nibble - 16 : nibble));
  } else {
    const hn::Repartition<std::uint16_t, decltype(d8)> d16;
    const hn::Rebind<std::uint8_t, decltype(d16)> du8;
    HWY_ALIGN std::uint8_t buf[kMaxLanes] = {};
    const std::uint8_t* src = codes + i / 2;
    if (count != lanes) {
      std::memcpy(buf, src, (count + 1) / 2);
      src = buf;
    }
    const auto w = hn::PromoteTo(d16, hn::LoadU(du8, src));
    // Low nibble to the low byte, high nibble to the high byte.
    const auto split = hn::Or(hn::And(w, hn::Set(d16, 0x000f)), hn::ShiftLeft<4>(hn::And(w, hn::Set(d16, 0x00f0))));
    // Sign-extend each 4-bit two's complement nibble: (n ^ 8) - 8.
    const auto n8 = hn::BitCast(d8, split);
    const auto eight = hn::Set(d8, 8);
    const auto q = hn::Sub(hn::Xor(n8, eight), eight);
    return hn::ConvertTo(df, hn::PromoteTo(di, q));
  }
}

// Blocks [lo, lo + n) of an array already offset to its first block:
// x (format kF), residual (kFeedback), codes (the first block's first
// code byte), scales (its scale).
template <Fmt kF, QuantBits kBits, bool kFeedback>
void QuantizeBlocks(const void* x, float* residual, std::size_t n, std::size_t block, std::uint8_t* codes,
                    float* scales) {
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  const auto qmax = hn::Set(df, static_cast<float>(sym_quant_qmax(kBits)));
  const auto inf = hn::Set(df, std::numeric_limits<float>::infinity());
  for (std::size_t lo = 0; lo < n; lo += block) {
    const std::size_t len = std::min(block, n - lo);
    // The block's values v = x (+ residual), read vector by vector; a tail
    // of fewer than `lanes` elements through zero-padded buffers.
    auto values = [&](std::size_t i, std::size_t count) {
      hn::Vec<DF> v;
      if (count == lanes) {
        v = LoadAsF32<kF>(df, x, lo + i);
      } else {
        TailBuffer t;
        v = LoadAsF32<kF>(df, t.load(Advance(x, lo + i, fmt_size(kF)), count, fmt_size(kF)), 0);
      }
      if constexpr (kFeedback) {
        HWY_ALIGN float r[kMaxLanes] = {};
        std::memcpy(r, residual + lo + i, count * 4);
        v = hn::Add(v, hn::Load(df, r));
      }
      return v;
    };
    // Pass 1: the largest magnitude and whether every value is finite
    // (with feedback, v is kept in the residual array for pass 2).
    auto amax = hn::Zero(df);
    auto finite = hn::Lt(amax, inf);
    for (std::size_t i = 0; i < len; i += lanes) {
      const std::size_t count = std::min(lanes, len - i);
      const auto v = values(i, count);
      const auto a = hn::Abs(v);
      amax = hn::Max(amax, a);
      finite = hn::And(finite, hn::Lt(a, inf));
      if constexpr (kFeedback) {
        HWY_ALIGN float out[kMaxLanes];
        hn::Store(v, df, out);
        std::memcpy(residual + lo + i, out, count * 4);
      }
    }
    const float s = sym_quant_block_scale(hn::GetLane(hn::MaxOfLanes(df, amax)), hn::AllTrue(df, finite), kBits);
    scales[lo / block] = s;
    std::uint8_t* block_codes = codes + sym_quant_code_bytes(lo, SymQuantFormat{kBits, block});
    if (!(s > 0.0f)) {
      // Codes 0; the residual stays v for a zero scale and becomes 0 for NaN.
      std::memset(block_codes, 0, sym_quant_code_bytes(len, SymQuantFormat{kBits, block}));
      if (kFeedback && std::isnan(s)) std::fill(residual + lo, residual + lo + len, 0.0f);
      continue;
    }
    // Pass 2: the codes (and residuals).
    const auto sv = hn::Set(df, s);
    for (std::size_t i = 0; i < len; i += lanes) {
      const std::size_t count = std::min(lanes, len - i);
      hn::Vec<DF> v;
      if constexpr (kFeedback) {
        HWY_ALIGN float in[kMaxLanes] = {};
        std::memcpy(in, residual + lo + i, count * 4);
        v = hn::Load(df, in);
      } else {
        v = values(i, count);
      }
      const auto c = Codes(df, v, sv, qmax);
      StoreCodes<kBits>(df, c, block_codes, i, count);
      if constexpr (kFeedback) {
        HWY_ALIGN float out[kMaxLanes];
        hn::Store(hn::Sub(v, hn::Mul(c, sv)), df, out);
        std::memcpy(residual + lo + i, out, count * 4);
      }
    }
  }
}

// y (format kF; Fmt::none: accumulate into the fp32 array acc instead) of
// blocks [lo, lo + n), arrays offset as in QuantizeBlocks.
template <Fmt kF, QuantBits kBits>
void DequantizeBlocks(const std::uint8_t* codes, const float* scales, std::size_t n, std::size_t block, void* y,
                      float* acc) {
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  for (std::size_t lo = 0; lo < n; lo += block) {
    const std::size_t len = std::min(block, n - lo);
    const auto sv = hn::Set(df, scales[lo / block]);
    const std::uint8_t* block_codes = codes + sym_quant_code_bytes(lo, SymQuantFormat{kBits, block});
    for (std::size_t i = 0; i < len; i += lanes) {
      const std::size_t count = std::min(lanes, len - i);
      const auto v = hn::Mul(LoadCodes<kBits>(df, block_codes, i, count), sv);
      if constexpr (kF == Fmt::none) {
        if (count == lanes) {
          hn::StoreU(hn::Add(hn::LoadU(df, acc + lo + i), v), df, acc + lo + i);
        } else {
          HWY_ALIGN float a[kMaxLanes] = {};
          std::memcpy(a, acc + lo + i, count * 4);
          hn::Store(hn::Add(hn::Load(df, a), v), df, a);
          std::memcpy(acc + lo + i, a, count * 4);
        }
      } else if (count == lanes) {
        StoreFromF32<kF>(df, v, y, lo + i);
      } else {
        TailBuffer t;
        StoreFromF32<kF>(df, v, t.bytes, 0);
        t.store(Advance(y, lo + i, fmt_size(kF)), count, fmt_size(kF));
      }
    }
  }
}

template <QuantBits kBits, bool kFeedback>
void QuantizeAny(const void* x, DType t, float* residual, std::size_t n, std::size_t block, std::uint8_t* codes,
                 float* scales) {
  switch (t) {
    case DType::bf16: return QuantizeBlocks<Fmt::bf16, kBits, kFeedback>(x, residual, n, block, codes, scales);
    case DType::f16: return QuantizeBlocks<Fmt::f16, kBits, kFeedback>(x, residual, n, block, codes, scales);
    default: return QuantizeBlocks<Fmt::f32, kBits, kFeedback>(x, residual, n, block, codes, scales);
  }
}

template <QuantBits kBits>
void DequantizeAny(const std::uint8_t* codes, const float* scales, std::size_t n, std::size_t block, void* y,
                   DType t, float* acc) {
  if (acc != nullptr) return DequantizeBlocks<Fmt::none, kBits>(codes, scales, n, block, nullptr, acc);
  switch (t) {
    case DType::bf16: return DequantizeBlocks<Fmt::bf16, kBits>(codes, scales, n, block, y, nullptr);
    case DType::f16: return DequantizeBlocks<Fmt::f16, kBits>(codes, scales, n, block, y, nullptr);
    default: return DequantizeBlocks<Fmt::f32, kBits>(codes, scales, n, block, y, nullptr);
  }
}

}  // namespace

// Whole blocks of arrays offset to their first block (arguments checked by
// the caller); residual null: no feedback.
void SymQuantizeRange(const void* x, DType t, float* residual, std::size_t n, SymQuantFormat f,
                      std::uint8_t* codes, float* scales) {
  if (f.bits == QuantBits::int8) {
    if (residual != nullptr) return QuantizeAny<QuantBits::int8, true>(x, t, residual, n, f.block, codes, scales);
    return QuantizeAny<QuantBits::int8, false>(x, t, nullptr, n, f.block, codes, scales);
  }
  if (residual != nullptr) return QuantizeAny<QuantBits::int4, true>(x, t, residual, n, f.block, codes, scales);
  QuantizeAny<QuantBits::int4, false>(x, t, nullptr, n, f.block, codes, scales);
}

// As SymQuantizeRange; acc non-null: accumulate into it instead of y.
void SymDequantizeRange(const std::uint8_t* codes, const float* scales, std::size_t n, SymQuantFormat f, void* y,
                        DType t, float* acc) {
  if (f.bits == QuantBits::int8) return DequantizeAny<QuantBits::int8>(codes, scales, n, f.block, y, t, acc);
  DequantizeAny<QuantBits::int4>(codes, scales, n, f.block, y, t, acc);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(SymQuantizeRange);
HWY_EXPORT(SymDequantizeRange);

void check_sym_quant_args(const void* data, DType dtype, std::size_t n, SymQuantFormat f, const void* chunk,
                          const char* what);

namespace {

// Runs fn(first block, first element, elements) over whole blocks of n
// elements, split over kernel_pool().
template <class F>
void for_blocks(std::size_t n, SymQuantFormat f, const F& fn) {
  const std::size_t blocks = sym_quant_scale_count(n, f);
  kernel_pool().parallel_for(blocks, 1, std::max<std::size_t>(1, kMinChunkElements / f.block),
                             [&](std::size_t, std::size_t b, std::size_t e) {
                               const std::size_t lo = b * f.block, hi = std::min(n, e * f.block);
                               if (lo < hi) fn(b, lo, hi - lo);
                             });
}

void quantize_any(const void* x, DType dtype, std::size_t n, SymQuantFormat f, float* residual, void* chunk) {
  auto* codes = static_cast<std::uint8_t*>(chunk);
  auto* scales = reinterpret_cast<float*>(codes + sym_quant_scales_offset(n, f));
  // The padding between codes and scales (and an odd int4 tail's high
  // nibble, written by the kernel's zero-padded tail) is zero, as the
  // reference writes it.
  const std::size_t code_bytes = sym_quant_code_bytes(n, f);
  std::memset(codes + code_bytes, 0, sym_quant_scales_offset(n, f) - code_bytes);
  const auto kernel = HWY_DYNAMIC_DISPATCH(SymQuantizeRange);
  const std::size_t elem = dtype_size(dtype);
  for_blocks(n, f, [&](std::size_t b, std::size_t lo, std::size_t len) {
    kernel(static_cast<const std::byte*>(x) + lo * elem, dtype, residual != nullptr ? residual + lo : nullptr, len, f,
           codes + sym_quant_code_bytes(lo, f), scales + b);
  });
}

void dequantize_any(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype, float* acc) {
  const auto* codes = static_cast<const std::uint8_t*>(chunk);
  const auto* scales = reinterpret_cast<const float*>(codes + sym_quant_scales_offset(n, f));
  const auto kernel = HWY_DYNAMIC_DISPATCH(SymDequantizeRange);
  const std::size_t elem = dtype_size(dtype);
  for_blocks(n, f, [&](std::size_t b, std::size_t lo, std::size_t len) {
    kernel(codes + sym_quant_code_bytes(lo, f), scales + b, len, f,
           y != nullptr ? static_cast<std::byte*>(y) + lo * elem : nullptr, dtype,
           acc != nullptr ? acc + lo : nullptr);
  });
}

}  // namespace

void quantize_symmetric(const void* x, DType dtype, std::size_t n, SymQuantFormat f, void* chunk) {
  check_sym_quant_args(x, dtype, n, f, chunk, "quantize_symmetric");
  if (n > 0) quantize_any(x, dtype, n, f, nullptr, chunk);
}

void quantize_symmetric_feedback(const void* x, DType dtype, std::size_t n, SymQuantFormat f, float* residual,
                                 void* chunk) {
  check_sym_quant_args(x, dtype, n, f, chunk, "quantize_symmetric_feedback");
  ZS_CHECK(n == 0 || residual != nullptr, "quantize_symmetric_feedback: null residual with n = {} elements", n);
  if (n > 0) quantize_any(x, dtype, n, f, residual, chunk);
}

void dequantize_symmetric(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype) {
  check_sym_quant_args(y, dtype, n, f, chunk, "dequantize_symmetric");
  if (n > 0) dequantize_any(chunk, n, f, y, dtype, nullptr);
}

void dequantize_accumulate(const void* chunk, std::size_t n, SymQuantFormat f, float* acc) {
  check_sym_quant_args(acc, DType::f32, n, f, chunk, "dequantize_accumulate");
  if (n > 0) dequantize_any(chunk, n, f, nullptr, DType::f32, acc);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
