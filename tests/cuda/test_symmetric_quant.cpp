// The GPU symmetric block quantization kernels (kernels/cuda/
// symmetric_quant.h) against the CPU references of kernels/quant/
// symmetric_quant.h, bit for bit: the chunks (codes, padding and scales,
// NaN scales included) exactly, the values up to NaN payloads (the GPU's
// NaNs are canonical), for every input and output dtype, both widths, every
// block size and the standard sizes, with NaN / Inf / subnormal inputs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "kernels/cpu/convert.h"
#include "kernels/cuda/symmetric_quant.h"
#include "kernels/quant/symmetric_quant.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;
using kernels::QuantBits;
using kernels::SymQuantFormat;

namespace {

constexpr DType kTypes[] = {DType::f32, DType::bf16, DType::f16};

// n elements of dtype t: magnitudes changing every 37 elements, and a
// NaN, an Inf and a subnormal now and then.
std::vector<std::uint8_t> make_input(DType t, std::size_t n, std::uint64_t seed) {
  std::vector<float> v = random_floats(n, seed, 1.0f);
  const float scale[] = {1.0f, 3e-4f, 250.0f, 1e-30f, 6e4f};
  for (std::size_t i = 0; i < n; ++i) {
    v[i] *= scale[(i / 37) % 5];
    if (i % 1013 == 500) v[i] = std::numeric_limits<float>::quiet_NaN();
    if (i % 2039 == 900) v[i] = -std::numeric_limits<float>::infinity();
    if (i % 613 == 7) v[i] = std::numeric_limits<float>::denorm_min();
  }
  std::vector<std::uint8_t> out(n * dtype_size(t));
  for (std::size_t i = 0; i < n; ++i) kernels::store_from_float(out.data(), t, i, v[i]);
  return out;
}

bool same(const std::uint8_t* a, const std::uint8_t* b, DType t, std::size_t i) {
  if (t == DType::f32) {
    float x, y;
    std::memcpy(&x, a + 4 * i, 4);
    std::memcpy(&y, b + 4 * i, 4);
    return float_bits(x) == float_bits(y) || (std::isnan(x) && std::isnan(y));
  }
  std::uint16_t x, y;
  std::memcpy(&x, a + 2 * i, 2);
  std::memcpy(&y, b + 2 * i, 2);
  const float fx = t == DType::bf16 ? bf16_to_float(x) : f16_to_float(x);
  const float fy = t == DType::bf16 ? bf16_to_float(y) : f16_to_float(y);
  return x == y || (std::isnan(fx) && std::isnan(fy));
}

// The first index where two arrays of n elements of t differ, or -1.
long first_difference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b, DType t,
                      std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!same(a.data(), b.data(), t, i)) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("gpu symmetric quantization equals the CPU references (dtypes, widths, every block size, sizes)") {
  for (const DType t : kTypes) {
    for (const QuantBits bits : {QuantBits::int8, QuantBits::int4}) {
      for (std::size_t block = kernels::kSymQuantBlockMin; block <= kernels::kSymQuantBlockMax; block *= 2) {
        for (const std::size_t n : kSizes) {
          const SymQuantFormat f{bits, block};
          const std::string what =
              fmt::format("{} {} block {} n {}", dtype_name(t), kernels::quant_bits_name(bits), block, n);
          CAPTURE(what);
          const std::vector<std::uint8_t> x = make_input(t, n, n + block);
          const std::size_t bytes = kernels::sym_quant_chunk_bytes(n, f);
          std::vector<std::uint8_t> want(bytes + 4);
          kernels::quantize_symmetric_reference(x.data(), t, n, f, want.data());
          DeviceBuffer dx = upload(x);
          DeviceBuffer dchunk(bytes + 4);
          kernels::gpu::quantize_symmetric(dx.data(), t, n, f, dchunk.data(), nullptr);
          const auto got = download<std::uint8_t>(dchunk.data(), bytes);
          CHECK(std::memcmp(got.data(), want.data(), bytes) == 0);

          // Feedback: chunk and residual.
          const std::vector<float> r0 = random_floats(n, 3 * n + 1, 1e-2f);
          std::vector<float> want_r = r0;
          std::vector<std::uint8_t> want_fb(bytes + 4);
          kernels::quantize_symmetric_feedback_reference(x.data(), t, n, f, want_r.data(), want_fb.data());
          DeviceBuffer dr = upload(r0);
          kernels::gpu::quantize_symmetric_feedback(dx.data(), t, n, f, static_cast<float*>(dr.data()),
                                                    dchunk.data(), nullptr);
          CHECK(std::memcmp(download<std::uint8_t>(dchunk.data(), bytes).data(), want_fb.data(), bytes) == 0);
          const auto got_r = download<float>(dr.data(), n);
          CHECK(std::memcmp(got_r.data(), want_r.data(), n * 4) == 0);

          // Dequantization of the reference's chunk into every dtype, and accumulation.
          DeviceBuffer dref = upload(want);
          for (const DType out : kTypes) {
            std::vector<std::uint8_t> want_y(n * dtype_size(out));
            kernels::dequantize_symmetric_reference(want.data(), n, f, want_y.data(), out);
            DeviceBuffer dy(n * dtype_size(out));
            kernels::gpu::dequantize_symmetric(dref.data(), n, f, dy.data(), out, nullptr);
            CAPTURE(out);
            CHECK(first_difference(download<std::uint8_t>(dy.data(), want_y.size()), want_y, out, n) == -1);
          }
          const std::vector<float> acc0 = random_floats(n, 7 * n + 5, 3.0f);
          std::vector<float> want_acc = acc0;
          kernels::dequantize_accumulate_reference(want.data(), n, f, want_acc.data());
          DeviceBuffer dacc = upload(acc0);
          kernels::gpu::dequantize_accumulate(dref.data(), n, f, static_cast<float*>(dacc.data()), nullptr);
          const auto got_acc = download<std::uint8_t>(dacc.data(), n * 4);
          std::vector<std::uint8_t> want_acc_bytes(n * 4);
          if (n > 0) std::memcpy(want_acc_bytes.data(), want_acc.data(), n * 4);
          CHECK(first_difference(got_acc, want_acc_bytes, DType::f32, n) == -1);
        }
      }
    }
  }
}
