// kernels/quant/symmetric_quant.h ([Note: symmetric block quantization]):
// the references against hand-worked blocks and the stated error bound, and
// every vector kernel against its reference bit for bit, for every input
// dtype (f32, bf16, f16), both widths (int8, int4), every block size
// (16 ... 8192) and sizes 0, 1, 7, 10001 (plus 57 and 70001 for the vector
// tails and the split over two threads), on every SIMD target with 1 and 2
// threads.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/convert.h"
#include "kernels/quant/symmetric_quant.h"

using namespace zeroshard;
using namespace zeroshard::testing;
using kernels::QuantBits;
using kernels::SymQuantFormat;

namespace {

const std::vector<std::size_t> kBoundSizes = {0, 1, 7, 10001};
const std::vector<std::size_t> kSimdSizes = {0, 1, 7, 57, 10001, 70001};
const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
const QuantBits kWidths[] = {QuantBits::int8, QuantBits::int4};

std::vector<std::size_t> all_blocks() {
  std::vector<std::size_t> b;
  for (std::size_t s = kernels::kSymQuantBlockMin; s <= kernels::kSymQuantBlockMax; s *= 2) b.push_back(s);
  return b;
}

// n elements of dtype t (bytes) from fp32 values: magnitudes that change
// from block to block (1e-30 ... 1e4, so a block's scale matters), and,
// when `specials`, NaN / Inf / subnormals sprinkled in.
std::vector<unsigned char> make_input(DType t, std::size_t n, std::uint64_t seed, bool specials) {
  std::vector<float> v = test_floats(n, seed, 1.0f, specials ? 97 : 0);
  const float scales[] = {1.0f, 3e-4f, 250.0f, 1e-30f, 6e4f};
  for (std::size_t i = 0; i < n; ++i) v[i] *= scales[(i / 37) % 5];
  std::vector<unsigned char> out(n * dtype_size(t) + 8);
  for (std::size_t i = 0; i < n; ++i) kernels::store_from_float(out.data(), t, i, v[i]);
  return out;
}

// A 4-byte-aligned chunk buffer.
std::vector<float> chunk_for(std::size_t n, SymQuantFormat f) {
  return std::vector<float>(kernels::sym_quant_chunk_bytes(n, f) / 4 + 1, -1.0f);
}

const float* scales_of(const std::vector<float>& chunk, std::size_t n, SymQuantFormat f) {
  return reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(chunk.data()) +
                                        kernels::sym_quant_scales_offset(n, f));
}

std::string label(DType t, SymQuantFormat f, std::size_t n) {
  return std::string(dtype_name(t)) + " " + kernels::quant_bits_name(f.bits) + " block " + std::to_string(f.block) +
         " n " + std::to_string(n);
}

// Runs body(t, f, n) for every input dtype, width and block size and each
// of `sizes`, with the case's label captured for failures.
template <class Body>
void for_each_case(const std::vector<std::size_t>& sizes, Body body) {
  for (const DType t : kDtypes) {
    for (const QuantBits bits : kWidths) {
      for (const std::size_t block : all_blocks()) {
        for (const std::size_t n : sizes) {
          const SymQuantFormat f{bits, block};
          const std::string what = label(t, f, n);
          CAPTURE(what);
          body(t, f, n);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("symmetric quantization: hand-worked blocks, nibble order, ties to even") {
  SUBCASE("int8: scale 1, codes as written") {
    const std::vector<float> x = {1.0f, -2.0f, 0.5f, 127.0f, -1.5f, 2.5f, -126.5f};
    const SymQuantFormat f{QuantBits::int8, 16};
    std::vector<float> chunk = chunk_for(x.size(), f);
    kernels::quantize_symmetric_reference(x.data(), DType::f32, x.size(), f, chunk.data());
    const auto* c = reinterpret_cast<const std::int8_t*>(chunk.data());
    const std::vector<int> want = {1, -2, 0, 127, -2, 2, -126};  // 0.5 -> 0, -1.5 -> -2, 2.5 -> 2, -126.5 -> -126
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(c[i] == want[i]);
    CHECK(c[7] == 0);  // padding to 4 bytes
    CHECK(scales_of(chunk, x.size(), f)[0] == 1.0f);
    CHECK(kernels::sym_quant_chunk_bytes(x.size(), f) == 12);
  }
  SUBCASE("int4: element 2j low nibble, 2j + 1 high nibble") {
    const std::vector<float> x = {7.0f, -7.0f, 1.0f, 0.0f, -1.0f};
    const SymQuantFormat f{QuantBits::int4, 16};
    std::vector<float> chunk = chunk_for(x.size(), f);
    kernels::quantize_symmetric_reference(x.data(), DType::f32, x.size(), f, chunk.data());
    const auto* b = reinterpret_cast<const std::uint8_t*>(chunk.data());
    CHECK(b[0] == 0x97);  // 7, -7 (0x9)
    CHECK(b[1] == 0x01);  // 1, 0
    CHECK(b[2] == 0x0f);  // -1, nothing
    CHECK(b[3] == 0x00);
    CHECK(scales_of(chunk, x.size(), f)[0] == 1.0f);
    std::vector<float> y(x.size());
    kernels::dequantize_symmetric_reference(chunk.data(), x.size(), f, y.data(), DType::f32);
    CHECK(y == x);
  }
  SUBCASE("a zero block has scale 0 and codes 0; a NaN or Inf block scale NaN and dequantizes to NaN") {
    std::vector<float> x(40, 0.0f);
    x[20] = 3.0f;
    x[33] = std::numeric_limits<float>::infinity();
    const SymQuantFormat f{QuantBits::int8, 16};
    std::vector<float> chunk = chunk_for(x.size(), f);
    kernels::quantize_symmetric_reference(x.data(), DType::f32, x.size(), f, chunk.data());
    const float* s = scales_of(chunk, x.size(), f);
    CHECK(s[0] == 0.0f);
    CHECK(float_bits(s[2]) == 0x7fc00000u);
    std::vector<float> y(x.size());
    kernels::dequantize_symmetric_reference(chunk.data(), x.size(), f, y.data(), DType::f32);
    for (std::size_t i = 0; i < 16; ++i) CHECK(y[i] == 0.0f);
    CHECK(y[20] == 3.0f);
    for (std::size_t i = 32; i < 40; ++i) CHECK(std::isnan(y[i]));
  }
  SUBCASE("bad formats and chunks are refused") {
    std::vector<float> x(4, 1.0f), chunk(8);
    for (const std::size_t block : {0, 8, 24, 16384}) {
      CHECK_THROWS_AS(kernels::quantize_symmetric(x.data(), DType::f32, 4, SymQuantFormat{QuantBits::int8, block},
                                                  chunk.data()),
                      InvariantError);
    }
    CHECK_THROWS_AS(kernels::quantize_symmetric(x.data(), DType::f64, 4, SymQuantFormat{}, chunk.data()),
                    InvariantError);
    auto* odd = reinterpret_cast<unsigned char*>(chunk.data()) + 1;
    CHECK_THROWS_AS(kernels::quantize_symmetric(x.data(), DType::f32, 4, SymQuantFormat{}, odd), InvariantError);
    CHECK_THROWS_AS(kernels::dequantize_symmetric(nullptr, 4, SymQuantFormat{}, x.data(), DType::f32),
                    InvariantError);
  }
}

TEST_CASE("symmetric quantization: the round trip is within the stated bound (every dtype, width, block, size)") {
  for_each_case(kBoundSizes, [&](DType t, SymQuantFormat f, std::size_t n) {
    const QuantBits bits = f.bits;
    const std::size_t block = f.block;
    const auto in = make_input(t, n, 7 * n + block, false);
    std::vector<float> chunk = chunk_for(n, f);
    kernels::quantize_symmetric_reference(in.data(), t, n, f, chunk.data());
    const float* s = scales_of(chunk, n, f);
    const int qmax = kernels::sym_quant_qmax(bits);
    for (std::size_t b = 0; b < kernels::sym_quant_scale_count(n, f); ++b) {
      float absmax = 0.0f;
      for (std::size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
        absmax = std::max(absmax, std::fabs(kernels::load_as_float(in.data(), t, i)));
      }
      // The stored scale is absmax / qmax rounded once.
      REQUIRE(s[b] == absmax / static_cast<float>(qmax));
    }
    for (const DType out : kDtypes) {
      std::vector<unsigned char> y(n * dtype_size(out) + 8);
      kernels::dequantize_symmetric_reference(chunk.data(), n, f, y.data(), out);
      long worst = -1;
      for (std::size_t i = 0; i < n; ++i) {
        const float x = kernels::load_as_float(in.data(), t, i);
        const float yi = kernels::load_as_float(y.data(), out, i);
        const double bound = kernels::sym_quant_error_bound(s[i / block], bits, out, yi);
        if (!(std::fabs(static_cast<double>(yi) - x) <= bound)) worst = static_cast<long>(i);
      }
      CAPTURE(out);
      CHECK(worst == -1);
    }
  });
}

TEST_CASE("symmetric quantization: accumulate and feedback references are the arithmetic they state") {
  for (const QuantBits bits : kWidths) {
    for (const std::size_t block : {std::size_t{16}, std::size_t{2048}}) {
      for (const std::size_t n : kBoundSizes) {
        const SymQuantFormat f{bits, block};
        const auto in = make_input(DType::bf16, n, 99 + n, true);
        std::vector<float> chunk = chunk_for(n, f);
        kernels::quantize_symmetric_reference(in.data(), DType::bf16, n, f, chunk.data());
        std::vector<float> y(n), acc = test_floats(n, 5, 2.0f, 0), want(n);
        kernels::dequantize_symmetric_reference(chunk.data(), n, f, y.data(), DType::f32);
        for (std::size_t i = 0; i < n; ++i) want[i] = acc[i] + y[i];
        kernels::dequantize_accumulate_reference(chunk.data(), n, f, acc.data());
        check_bitwise(acc.data(), want.data(), n, "accumulate", true);

        // Feedback: v = x + r is quantized; r becomes v - y, 0 in NaN blocks.
        std::vector<float> r = test_floats(n, 11, 1e-3f, 0), v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = kernels::load_as_float(in.data(), DType::bf16, i) + r[i];
        std::vector<float> fchunk = chunk_for(n, f), vchunk = chunk_for(n, f);
        kernels::quantize_symmetric_feedback_reference(in.data(), DType::bf16, n, f, r.data(), fchunk.data());
        kernels::quantize_symmetric_reference(v.data(), DType::f32, n, f, vchunk.data());
        CHECK(std::memcmp(fchunk.data(), vchunk.data(), kernels::sym_quant_chunk_bytes(n, f)) == 0);
        kernels::dequantize_symmetric_reference(vchunk.data(), n, f, y.data(), DType::f32);
        const float* s = scales_of(vchunk, n, f);
        for (std::size_t i = 0; i < n; ++i) want[i] = std::isnan(s[i / block]) ? 0.0f : v[i] - y[i];
        check_bitwise(r.data(), want.data(), n, "residual", false);
      }
    }
  }
}

TEST_CASE("symmetric quantization: vector kernels equal the references bit for bit (targets, threads)") {
  for_each_case(kSimdSizes, [&](DType t, SymQuantFormat f, std::size_t n) {
    const std::size_t block = f.block;
    const auto in = make_input(t, n, 3 * n + block, true);
    const std::size_t bytes = kernels::sym_quant_chunk_bytes(n, f);
    std::vector<float> want = chunk_for(n, f);
    kernels::quantize_symmetric_reference(in.data(), t, n, f, want.data());
    const std::vector<float> r0 = test_floats(n, 17 + n, 1e-2f, 0);
    std::vector<float> want_r = r0, want_fb = chunk_for(n, f);
    kernels::quantize_symmetric_feedback_reference(in.data(), t, n, f, want_r.data(), want_fb.data());
    std::vector<std::vector<unsigned char>> want_y;
    for (const DType out : kDtypes) {
      want_y.emplace_back(n * dtype_size(out) + 8);
      kernels::dequantize_symmetric_reference(want.data(), n, f, want_y.back().data(), out);
    }
    const std::vector<float> acc0 = test_floats(n, 23 + n, 4.0f, 0);
    std::vector<float> want_acc = acc0;
    kernels::dequantize_accumulate_reference(want.data(), n, f, want_acc.data());
    for_each_target_and_threads([&] {
      std::vector<float> got = chunk_for(n, f);
      kernels::quantize_symmetric(in.data(), t, n, f, got.data());
      CHECK(std::memcmp(got.data(), want.data(), bytes) == 0);
      std::vector<float> r = r0, got_fb = chunk_for(n, f);
      kernels::quantize_symmetric_feedback(in.data(), t, n, f, r.data(), got_fb.data());
      CHECK(std::memcmp(got_fb.data(), want_fb.data(), bytes) == 0);
      check_bitwise(r.data(), want_r.data(), n, "residual", true);
      for (std::size_t k = 0; k < 3; ++k) {
        const DType out = kDtypes[k];
        std::vector<unsigned char> y(n * dtype_size(out) + 8);
        kernels::dequantize_symmetric(want.data(), n, f, y.data(), out);
        if (out == DType::f32) {
          check_bitwise(reinterpret_cast<const float*>(y.data()),
                        reinterpret_cast<const float*>(want_y[k].data()), n, "dequantize f32", true);
        } else {
          check_bitwise(reinterpret_cast<const std::uint16_t*>(y.data()),
                        reinterpret_cast<const std::uint16_t*>(want_y[k].data()), n, "dequantize 16-bit",
                        true, out);
        }
      }
      std::vector<float> acc = acc0;
      kernels::dequantize_accumulate(want.data(), n, f, acc.data());
      check_bitwise(acc.data(), want_acc.data(), n, "accumulate", true);
    });
  });
}
