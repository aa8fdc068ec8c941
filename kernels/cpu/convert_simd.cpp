// Vector conversions between fp32, bf16 and fp16, plain, scaled, or added
// into the destination (Highway, compiled once per target and chosen at run
// time; the per-lane code is in convert-inl.h) and the public entry points
// of convert.h, which split the range over kernel_pool() threads.
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

// What a loop computes per element, x = src[i] widened to fp32.
enum class Mode {
  plain,       // dst[i] = x
  scaled,      // dst[i] = x * scale
  accumulate,  // dst[i] = dst[i] + x * scale
};

template <Mode kMode, Fmt kOut, class DF>
HWY_INLINE hn::Vec<DF> Combine(DF df, hn::Vec<DF> x, hn::Vec<DF> scale, const void* dst,
                               std::size_t i) {
  if constexpr (kMode == Mode::plain) {
    return x;
  } else if constexpr (kMode == Mode::scaled) {
    return hn::Mul(x, scale);
  } else {
    return hn::Add(LoadAsF32<kOut>(df, dst, i), hn::Mul(x, scale));
  }
}

template <Fmt kIn, Fmt kOut, Mode kMode>
void ConvertLoop(const void* src, void* dst, std::size_t n, float scale) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  const auto vscale = hn::Set(df, scale);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    StoreFromF32<kOut>(df, Combine<kMode, kOut>(df, LoadAsF32<kIn>(df, src, i), vscale, dst, i),
                       dst, i);
  }
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t is = fmt_size(kIn), os = fmt_size(kOut);
  TailBuffer tin, tout;
  void* out = Advance(dst, i, os);
  if constexpr (kMode == Mode::accumulate) tout.load(out, r, os);
  const auto x = LoadAsF32<kIn>(df, tin.load(Advance(src, i, is), r, is), 0);
  StoreFromF32<kOut>(df, Combine<kMode, kOut>(df, x, vscale, tout.bytes, 0), tout.bytes, 0);
  tout.store(out, r, os);
}

template <Fmt kIn, Mode kMode>
void ConvertToDtype(const void* src, void* dst, DType dst_dtype, std::size_t n, float scale) {
  switch (dst_dtype) {
    case DType::bf16: return ConvertLoop<kIn, Fmt::bf16, kMode>(src, dst, n, scale);
    case DType::f16: return ConvertLoop<kIn, Fmt::f16, kMode>(src, dst, n, scale);
    default: return ConvertLoop<kIn, Fmt::f32, kMode>(src, dst, n, scale);
  }
}

template <Mode kMode>
void ConvertFromDtype(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                      float scale) {
  switch (src_dtype) {
    case DType::bf16: return ConvertToDtype<Fmt::bf16, kMode>(src, dst, dst_dtype, n, scale);
    case DType::f16: return ConvertToDtype<Fmt::f16, kMode>(src, dst, dst_dtype, n, scale);
    default: return ConvertToDtype<Fmt::f32, kMode>(src, dst, dst_dtype, n, scale);
  }
}

}  // namespace

// Converts n elements between two dtypes among f32, bf16, f16 (validated by
// the caller; pointers already offset): mode 0 plain, 1 scaled, 2
// accumulate (see Mode).
void ConvertRange(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                  int mode, float scale) {
  switch (mode) {
    case 1: return ConvertFromDtype<Mode::scaled>(src, src_dtype, dst, dst_dtype, n, scale);
    case 2: return ConvertFromDtype<Mode::accumulate>(src, src_dtype, dst, dst_dtype, n, scale);
    default: return ConvertFromDtype<Mode::plain>(src, src_dtype, dst, dst_dtype, n, scale);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(ConvertRange);

namespace {

// Splits [0, n) over kernel_pool() threads and runs one ConvertRange mode
// (0 plain, 1 scaled, 2 accumulate) on each chunk.
void run_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                 int mode, float scale) {
  if (n == 0) return;
  const std::size_t is = dtype_size(src_dtype), os = dtype_size(dst_dtype);
  const auto kernel = HWY_DYNAMIC_DISPATCH(ConvertRange);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    kernel(static_cast<const unsigned char*>(src) + b * is, src_dtype,
           static_cast<unsigned char*>(dst) + b * os, dst_dtype, e - b, mode, scale);
  });
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) {
  check_kernel_dtype(src_dtype, "convert source");
  check_kernel_dtype(dst_dtype, "convert destination");
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  run_convert(src, src_dtype, dst, dst_dtype, n, 0, 1.0f);
}

void convert_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                    float scale) {
  check_kernel_dtype(src_dtype, "convert_scaled source");
  check_kernel_dtype(dst_dtype, "convert_scaled destination");
  if (scale == 1.0f && src_dtype == DType::f32 && dst_dtype == DType::f32) {
    if (n != 0 && dst != src) std::memmove(dst, src, n * sizeof(float));
    return;
  }
  run_convert(src, src_dtype, dst, dst_dtype, n, scale == 1.0f ? 0 : 1, scale);
}

void accumulate_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                       std::size_t n, float scale) {
  check_kernel_dtype(src_dtype, "accumulate_scaled source");
  check_kernel_dtype(dst_dtype, "accumulate_scaled destination");
  run_convert(src, src_dtype, dst, dst_dtype, n, 2, scale);
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
