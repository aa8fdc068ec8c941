// Vector sum of blocks in rank order (Highway, compiled once per target and
// chosen at run time) and the public entry point, which splits the
// elements over kernel_pool() threads. Every element is summed alone, left
// to right over the blocks, exactly as sum_blocks_reference does, so the
// result is bitwise the reference's for any target and thread count; the
// 16-bit forms round every partial sum back to the 16-bit type (the vector
// rounding of convert-inl.h is round-to-nearest-even, as core/dtype.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/sum_blocks_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cstdint>

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/sum_blocks.h"
#include "kernels/cpu/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// Elements [b, e) of an f32 or f64 sum; the last partial vector is scalar.
template <class T>
void SumPlain(T* dst, const T* src, std::size_t blocks, std::size_t n, std::size_t b, std::size_t e) {
  const hn::ScalableTag<T> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = b;
  for (; i + lanes <= e; i += lanes) {
    auto acc = hn::LoadU(d, src + i);
    for (std::size_t j = 1; j < blocks; ++j) acc = hn::Add(acc, hn::LoadU(d, src + j * n + i));
    hn::StoreU(acc, d, dst + i);
  }
  for (; i < e; ++i) {
    T acc = src[i];
    for (std::size_t j = 1; j < blocks; ++j) acc = acc + src[j * n + i];
    dst[i] = acc;
  }
}

// Elements [b, e) of a bf16 or f16 sum: every partial sum is rounded to the
// 16-bit type (stored into dst, then widened again for the next add).
template <Fmt kF>
void Sum16(std::uint16_t* dst, const std::uint16_t* src, std::size_t blocks, std::size_t n, std::size_t b,
           std::size_t e) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = b;
  for (; i + lanes <= e; i += lanes) {
    if (blocks == 1) {
      StoreFromF32<kF>(df, LoadAsF32<kF>(df, src, i), dst, i);
      continue;
    }
    auto acc = LoadAsF32<kF>(df, src, i);
    for (std::size_t j = 1; j < blocks; ++j) {
      StoreFromF32<kF>(df, hn::Add(acc, LoadAsF32<kF>(df, src + j * n, i)), dst, i);
      if (j + 1 < blocks) acc = LoadAsF32<kF>(df, dst, i);
    }
  }
  for (; i < e; ++i) {
    std::uint16_t acc = src[i];
    for (std::size_t j = 1; j < blocks; ++j) {
      if constexpr (kF == Fmt::bf16) {
        acc = float_to_bf16(bf16_to_float(acc) + bf16_to_float(src[j * n + i]));
      } else {
        acc = float_to_f16(f16_to_float(acc) + f16_to_float(src[j * n + i]));
      }
    }
    dst[i] = acc;
  }
}

}  // namespace

// Elements [b, e) of the sum (arguments checked by the caller).
void SumBlocksRange(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype, std::size_t b,
                    std::size_t e) {
  switch (dtype) {
    case DType::f32:
      return SumPlain(static_cast<float*>(dst), static_cast<const float*>(src), blocks, n, b, e);
    case DType::f64:
      return SumPlain(static_cast<double*>(dst), static_cast<const double*>(src), blocks, n, b, e);
    case DType::bf16:
      return Sum16<Fmt::bf16>(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), blocks,
                              n, b, e);
    case DType::f16:
      return Sum16<Fmt::f16>(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), blocks, n,
                             b, e);
    case DType::u8: return;  // refused by check_sum_blocks_args
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(SumBlocksRange);

void check_sum_blocks_args(const void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype);

void sum_blocks(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) {
  check_sum_blocks_args(dst, src, blocks, n, dtype);
  if (n == 0) return;
  const auto kernel = HWY_DYNAMIC_DISPATCH(SumBlocksRange);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) { kernel(dst, src, blocks, n, dtype, b, e); });
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
