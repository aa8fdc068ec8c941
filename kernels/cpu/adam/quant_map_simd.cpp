// Vector blockwise quantization / dequantization of whole arrays
// (quantize_blockwise, dequantize_blockwise in quant_map.h): Highway,
// compiled per target and chosen at run time, split over kernel_pool() by
// whole blocks.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam/quant_map_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/adam/quant_map-inl.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

template <bool kSigned>
void QuantizeBlocks(const float* x, std::size_t n, std::size_t block, std::uint8_t* codes,
                    float* absmax, const detail::QuantTables& qt) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const EncodeTables<DF> t(df, qt);
  const std::size_t lanes = hn::Lanes(df);
  for (std::size_t lo = 0; lo < n; lo += block) {
    const std::size_t len = std::min(block, n - lo), full = len - len % lanes;
    AbsMaxAcc<hn::ScalableTag<float>> acc(df);
    HWY_ALIGN float tail[HWY_MAX_BYTES / 4] = {};
    std::memcpy(tail, x + lo + full, (len - full) * 4);
    for (std::size_t i = 0; i < full; i += lanes) acc.add(df, hn::LoadU(df, x + lo + i));
    if (full < len) acc.add(df, hn::Load(df, tail));  // zero padding: no effect on the max
    const float am = acc.result(df);
    absmax[lo / block] = am;
    const float inv_s = quant_inverse_absmax(am);
    if (!VectorEncodable(inv_s)) {  // absmax 0, NaN, Inf or below 2^-128
      const QuantMap map = kSigned ? QuantMap::signed_dynamic : QuantMap::unsigned_dynamic;
      for (std::size_t i = lo; i < lo + len; ++i) codes[i] = quantize_value(map, x[i], inv_s);
      continue;
    }
    const auto inv = hn::Set(df, inv_s);
    for (std::size_t i = 0; i < full; i += lanes) {
      StoreCodes(df, EncodeValues<kSigned>(df, t, hn::LoadU(df, x + lo + i), inv), codes + lo + i);
    }
    if (full < len) {
      HWY_ALIGN std::uint8_t out[HWY_MAX_BYTES / 4];
      StoreCodes(df, EncodeValues<kSigned>(df, t, hn::Load(df, tail), inv), out);
      std::memcpy(codes + lo + full, out, len - full);
    }
  }
}

template <bool kSigned>
void DequantizeBlocks(const std::uint8_t* codes, const float* absmax, std::size_t n,
                      std::size_t block, float* x, const detail::QuantTables& qt) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const DecodeTables<DF> t(df, qt);
  const std::size_t lanes = hn::Lanes(df);
  for (std::size_t lo = 0; lo < n; lo += block) {
    const std::size_t len = std::min(block, n - lo), full = len - len % lanes;
    const auto am = hn::Set(df, absmax[lo / block]);
    for (std::size_t i = 0; i < full; i += lanes) {
      hn::StoreU(DecodeCodes<kSigned>(df, t, LoadCodes<kSigned>(df, codes + lo + i), am), df,
                 x + lo + i);
    }
    if (full < len) {
      HWY_ALIGN std::uint8_t in[HWY_MAX_BYTES / 4] = {};
      HWY_ALIGN float out[HWY_MAX_BYTES / 4];
      std::memcpy(in, codes + lo + full, len - full);
      hn::Store(DecodeCodes<kSigned>(df, t, LoadCodes<kSigned>(df, in), am), df, out);
      std::memcpy(x + lo + full, out, (len - full) * 4);
    }
  }
}

}  // namespace

// Blocks of the already offset arrays; n elements (a multiple of block
// except at the array's end).
void QuantizeRange(const float* x, std::size_t n, std::size_t block, QuantMap map,
                   std::uint8_t* codes, float* absmax) {
  const detail::QuantTables& t = detail::quant_tables(map);
  if (t.is_signed) return QuantizeBlocks<true>(x, n, block, codes, absmax, t);
  QuantizeBlocks<false>(x, n, block, codes, absmax, t);
}

void DequantizeRange(const std::uint8_t* codes, const float* absmax, std::size_t n,
                     std::size_t block, QuantMap map, float* x) {
  const detail::QuantTables& t = detail::quant_tables(map);
  if (t.is_signed) return DequantizeBlocks<true>(codes, absmax, n, block, x, t);
  DequantizeBlocks<false>(codes, absmax, n, block, x, t);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(QuantizeRange);
HWY_EXPORT(DequantizeRange);

void quantize_blockwise(const float* x, std::size_t n, std::size_t block, QuantMap map,
                        std::uint8_t* codes, float* absmax) {
  check_quant_block(block, "quantize_blockwise");
  if (n == 0) return;
  const auto kernel = HWY_DYNAMIC_DISPATCH(QuantizeRange);
  parallel_for_blocks(n, block, [&](std::size_t b, std::size_t lo, std::size_t hi) {
    kernel(x + lo, hi - lo, block, map, codes + lo, absmax + b);
  });
}

void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::size_t n,
                          std::size_t block, QuantMap map, float* x) {
  check_quant_block(block, "dequantize_blockwise");
  if (n == 0) return;
  const auto kernel = HWY_DYNAMIC_DISPATCH(DequantizeRange);
  parallel_for_blocks(n, block, [&](std::size_t b, std::size_t lo, std::size_t hi) {
    kernel(codes + lo, absmax + b, hi - lo, block, map, x + lo);
  });
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
