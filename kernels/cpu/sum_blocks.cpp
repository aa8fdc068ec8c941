#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/sum_blocks.h"

#include "core/error.h"

namespace zeroshard::kernels {

void check_sum_blocks_args(const void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype);

void check_sum_blocks_args(const void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) {
  ZS_CHECK(dtype != DType::u8, "sum_blocks: u8 arrays are not summed (f32, f64, bf16 or f16 only)");
  ZS_CHECK(blocks > 0, "sum_blocks: needs at least one block (n = {} elements)", n);
  ZS_CHECK(n == 0 || (dst != nullptr && src != nullptr), "sum_blocks: null buffer with n = {} elements", n);
}

namespace {

template <class T>
void sum_typed(T* dst, const T* src, std::size_t blocks, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T acc = src[i];
    for (std::size_t j = 1; j < blocks; ++j) acc = acc + src[j * n + i];
    dst[i] = acc;
  }
}

// round16(float(a) + float(b)) after every add ([Note: 16-bit reductions]).
template <float (*kWiden)(std::uint16_t), std::uint16_t (*kRound)(float)>
void sum_16bit(std::uint16_t* dst, const std::uint16_t* src, std::size_t blocks, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t acc = src[i];
    for (std::size_t j = 1; j < blocks; ++j) acc = kRound(kWiden(acc) + kWiden(src[j * n + i]));
    dst[i] = acc;
  }
}

}  // namespace

void sum_blocks_reference(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) {
  check_sum_blocks_args(dst, src, blocks, n, dtype);
  switch (dtype) {
    case DType::f32:
      return sum_typed(static_cast<float*>(dst), static_cast<const float*>(src), blocks, n);
    case DType::f64:
      return sum_typed(static_cast<double*>(dst), static_cast<const double*>(src), blocks, n);
    case DType::bf16:
      return sum_16bit<bf16_to_float, float_to_bf16>(static_cast<std::uint16_t*>(dst),
                                                     static_cast<const std::uint16_t*>(src), blocks, n);
    case DType::f16:
      return sum_16bit<f16_to_float, float_to_f16>(static_cast<std::uint16_t*>(dst),
                                                   static_cast<const std::uint16_t*>(src), blocks, n);
    case DType::u8: return;  // refused by check_sum_blocks_args
  }
}

}  // namespace zeroshard::kernels
