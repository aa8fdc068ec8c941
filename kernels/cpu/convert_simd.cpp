// Vector conversions between fp32, bf16 and fp16 (Highway, compiled once per
// target and chosen at run time; the per-lane code is in convert-inl.h) and
// the public entry points of convert.h, which split the range over
// kernel_pool() threads.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/convert_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cstring>

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

template <Fmt kIn, Fmt kOut>
void ConvertLoop(const void* src, void* dst, std::size_t n) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) StoreFromF32<kOut>(df, LoadAsF32<kIn>(df, src, i), dst, i);
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t is = fmt_size(kIn), os = fmt_size(kOut);
  TailBuffer tin, tout;
  StoreFromF32<kOut>(df, LoadAsF32<kIn>(df, tin.load(Advance(src, i, is), r, is), 0), tout.bytes,
                     0);
  tout.store(Advance(dst, i, os), r, os);
}

template <Fmt kIn>
void ConvertToDtype(const void* src, void* dst, DType dst_dtype, std::size_t n) {
  switch (dst_dtype) {
    case DType::bf16: return ConvertLoop<kIn, Fmt::bf16>(src, dst, n);
    case DType::f16: return ConvertLoop<kIn, Fmt::f16>(src, dst, n);
    default: return ConvertLoop<kIn, Fmt::f32>(src, dst, n);
  }
}

}  // namespace

// Converts n elements between two different dtypes among f32, bf16, f16
// (validated by the caller); pointers already offset.
void ConvertRange(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) {
  switch (src_dtype) {
    case DType::bf16: return ConvertToDtype<Fmt::bf16>(src, dst, dst_dtype, n);
    case DType::f16: return ConvertToDtype<Fmt::f16>(src, dst, dst_dtype, n);
    default: return ConvertToDtype<Fmt::f32>(src, dst, dst_dtype, n);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(ConvertRange);

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) {
  check_kernel_dtype(src_dtype, "convert source");
  check_kernel_dtype(dst_dtype, "convert destination");
  if (n == 0) return;
  const std::size_t is = dtype_size(src_dtype), os = dtype_size(dst_dtype);
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * is);
    return;
  }
  const auto kernel = HWY_DYNAMIC_DISPATCH(ConvertRange);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    kernel(static_cast<const unsigned char*>(src) + b * is, src_dtype,
           static_cast<unsigned char*>(dst) + b * os, dst_dtype, e - b);
  });
}

void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  convert(src, DType::f32, dst, DType::bf16, n);
}
void bf16_to_f32(const std::uint16_t* src, float* dst, std::size_t n) {
  convert(src, DType::bf16, dst, DType::f32, n);
}
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n) {
  convert(src, DType::f32, dst, DType::f16, n);
}
void f16_to_f32(const std::uint16_t* src, float* dst, std::size_t n) {
  convert(src, DType::f16, dst, DType::f32, n);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
