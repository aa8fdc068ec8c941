// kernels::sum_blocks (the local sum of the rank-ordered reductions)
// against its scalar reference, bit for bit: every SIMD target, 1 and 2
// threads, 1-5 blocks, sizes around the vector widths, in place (dst = src)
// and out of place, special values; and the reference against sums written
// out by hand, so that a wrong order or a missing 16-bit rounding fails.
#include <cstdint>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/sum_blocks.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// blocks x n elements of dtype from fp32 test values, magnitudes mixed per block.
std::vector<unsigned char> make_blocks(DType t, std::size_t blocks, std::size_t n, std::uint64_t seed) {
  std::vector<unsigned char> b(blocks * n * dtype_size(t) + 64);
  for (std::size_t j = 0; j < blocks; ++j) {
    const std::vector<float> v = test_floats(n, seed + j, j % 2 == 0 ? 1.0f : 3e-4f, 37);
    for (std::size_t i = 0; i < n; ++i) {
      unsigned char* p = b.data() + (j * n + i) * dtype_size(t);
      switch (t) {
        case DType::f32: std::memcpy(p, &v[i], 4); break;
        case DType::f64: {
          const double d = static_cast<double>(v[i]) * (1.0 + 1e-9 * static_cast<double>(i % 7));
          std::memcpy(p, &d, 8);
          break;
        }
        case DType::bf16: {
          const std::uint16_t h = float_to_bf16(v[i]);
          std::memcpy(p, &h, 2);
          break;
        }
        case DType::f16: {
          const std::uint16_t h = float_to_f16(v[i]);
          std::memcpy(p, &h, 2);
          break;
        }
        case DType::u8: break;  // sum_blocks refuses u8
      }
    }
  }
  return b;
}

void check_same(DType t, const unsigned char* a, const unsigned char* b, std::size_t n) {
  switch (t) {
    case DType::f32:
      check_bitwise(reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b), n, "f32", true);
      break;
    case DType::f64:
      check_bitwise(reinterpret_cast<const double*>(a), reinterpret_cast<const double*>(b), n, "f64", true);
      break;
    default:
      check_bitwise(reinterpret_cast<const std::uint16_t*>(a), reinterpret_cast<const std::uint16_t*>(b), n, "16-bit",
                    true, t);
  }
}

}  // namespace

TEST_CASE("sum_blocks equals sum_blocks_reference bit for bit (targets, threads, blocks, in place)") {
  for (const DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const std::size_t blocks : {1, 2, 3, 4, 5}) {
      for (const std::size_t n : kSizes) {
        const std::string dtype_s(dtype_name(t));
        CAPTURE(dtype_s);
        CAPTURE(blocks);
        CAPTURE(n);
        const auto src = make_blocks(t, blocks, n, 1000 + n + blocks);
        std::vector<unsigned char> want(n * dtype_size(t) + 8);
        kernels::sum_blocks_reference(want.data(), src.data(), blocks, n, t);
        for_each_target_and_threads([&] {
          std::vector<unsigned char> got(n * dtype_size(t) + 8);
          kernels::sum_blocks(got.data(), src.data(), blocks, n, t);
          check_same(t, got.data(), want.data(), n);
          std::vector<unsigned char> in_place = src;  // dst = src: the sum replaces block 0
          kernels::sum_blocks(in_place.data(), in_place.data(), blocks, n, t);
          check_same(t, in_place.data(), want.data(), n);
        });
      }
    }
  }
}

TEST_CASE("sum_blocks_reference adds left to right, rounding 16-bit partial sums") {
  // f32: (1 + 2^-24) + 2^-24 rounds twice to 1; the other order gives 1 + 2^-23.
  const float big = 1.0f, tiny = 5.9604645e-08f;  // 2^-24
  const float f[3] = {big, tiny, tiny};
  float out = 0;
  kernels::sum_blocks_reference(&out, f, 3, 1, DType::f32);
  CHECK(out == 1.0f);
  const float g[3] = {tiny, tiny, big};
  kernels::sum_blocks_reference(&out, g, 3, 1, DType::f32);
  CHECK(out == 1.0f + 2 * tiny);
  // bf16 (8 significant bits): 1 + 2^-9 rounds to 1 at each step, so
  // 1 + 2^-9 + 2^-9 + 2^-9 stays 1; one rounding at the end would give 1 + 2^-7.
  const std::uint16_t one = float_to_bf16(1.0f), small = float_to_bf16(0.001953125f);  // 2^-9
  const std::uint16_t h[4] = {one, small, small, small};
  std::uint16_t hout = 0;
  kernels::sum_blocks_reference(&hout, h, 4, 1, DType::bf16);
  CHECK(hout == one);
  for_each_target_and_threads([&] {
    std::uint16_t v = 0;
    kernels::sum_blocks(&v, h, 4, 1, DType::bf16);
    CHECK(v == one);
    float w = 0;
    kernels::sum_blocks(&w, f, 3, 1, DType::f32);
    CHECK(w == 1.0f);
  });
}

TEST_CASE("sum_blocks refuses zero blocks and null buffers") {
  float x = 1.0f;
  CHECK_THROWS_AS(kernels::sum_blocks(&x, &x, 0, 1, DType::f32), InvariantError);
  CHECK_THROWS_AS(kernels::sum_blocks(nullptr, &x, 1, 1, DType::f32), InvariantError);
  CHECK_THROWS_AS(kernels::sum_blocks_reference(&x, nullptr, 2, 1, DType::f32), InvariantError);
  kernels::sum_blocks(nullptr, nullptr, 3, 0, DType::f32);  // n = 0: nothing to do
}
