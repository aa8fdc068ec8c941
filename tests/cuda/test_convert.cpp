// The conversion kernel against kernels/cpu/convert.h's convert_reference,
// bitwise: every 16-bit pattern as input, special fp32 values (signed
// zeros, subnormals, ties, overflow, Inf, NaN payloads) and random bit
// patterns, every dtype pair, and the standard sizes; the scaled forms
// against convert_scaled_reference / accumulate_scaled_reference.
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "kernels/cpu/convert.h"
#include "kernels/cuda/convert.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr DType kTypes[] = {DType::f32, DType::bf16, DType::f16};

std::vector<float> tricky_floats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                          3.0e38f, 1e-8f, -1e-8f, 6.0e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min()};
  // NaNs with payloads and signs, and values exactly halfway between two
  // bf16 / fp16 neighbours (ties to even both ways).
  for (const std::uint32_t bits : {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa5a5a5u, 0x3f808000u,
                                   0x3f818000u, 0x3f801000u, 0x3f803000u, 0x387fe000u, 0x33000000u,
                                   0x33000001u, 0x477ff000u, 0x477fefffu}) {
    v.push_back(bits_float(bits));
  }
  std::mt19937 rng(2024);
  for (int i = 0; i < 200000; ++i) v.push_back(bits_float(static_cast<std::uint32_t>(rng())));
  return v;
}

// Converts `src` (n elements of src_dtype) on the GPU and with the
// reference, and compares the bytes.
void check_convert(const std::vector<std::uint8_t>& src, DType src_dtype, DType dst_dtype,
                   const std::string& what) {
  const std::size_t n = src.size() / dtype_size(src_dtype);
  std::vector<std::uint8_t> want(n * dtype_size(dst_dtype));
  kernels::convert_reference(src.data(), src_dtype, want.data(), dst_dtype, n);
  DeviceBuffer d_src = upload(src);
  DeviceBuffer d_dst(want.size());
  kernels::gpu::convert(d_src.data(), src_dtype, d_dst.data(), dst_dtype, n, nullptr);
  const std::vector<std::uint8_t> got = download<std::uint8_t>(d_dst.data(), want.size());
  std::size_t bad = n;
  const std::size_t width = dtype_size(dst_dtype);
  for (std::size_t i = 0; i < n && bad == n; ++i) {
    if (std::memcmp(&got[i * width], &want[i * width], width) != 0) bad = i;
  }
  CHECK_MESSAGE(bad == n, what << " " << dtype_name(src_dtype) << " -> " << dtype_name(dst_dtype)
                                << ": first mismatch at element " << bad << " of " << n);
}

std::vector<std::uint8_t> as_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("cuda convert: fp32 special and random values to every dtype") {
  const std::vector<std::uint8_t> src = as_bytes(tricky_floats());
  for (const DType to : kTypes) check_convert(src, DType::f32, to, "tricky");
}

TEST_CASE("cuda convert: every bf16 and f16 bit pattern to every dtype") {
  std::vector<std::uint8_t> all(65536 * 2);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    std::memcpy(&all[i * 2], &h, 2);
  }
  for (const DType from : {DType::bf16, DType::f16}) {
    for (const DType to : kTypes) check_convert(all, from, to, "all patterns");
  }
}

TEST_CASE("cuda convert: standard sizes") {
  for (const std::size_t n : kSizes) {
    const std::vector<float> values = random_floats(n, 5 + n, 100.0f);
    for (const DType from : kTypes) {
      for (const DType to : kTypes) {
        check_convert(gradient_bytes(values, from), from, to, "n=" + std::to_string(n));
      }
    }
  }
}

TEST_CASE("cuda convert_scaled and accumulate_scaled: bitwise the CPU references") {
  // Finite inputs (no NaN payload question); scale 1 takes convert()'s path.
  for (const std::size_t n : kSizes) {
    const std::vector<float> a = random_floats(n, 11 + n, 100.0f), b = random_floats(n, 17 + n, 3.0f);
    for (const float scale : {1.0f, 0.25f, 1.0f / 3.0f, 65536.0f}) {
      for (const DType from : kTypes) {
        for (const DType to : kTypes) {
          const std::string what = fmt::format("n={} scale={} {} -> {}", n, scale, dtype_name(from), dtype_name(to));
          const std::vector<std::uint8_t> src = gradient_bytes(a, from), dst0 = gradient_bytes(b, to);
          std::vector<std::uint8_t> want_c(dst0.size()), want_a = dst0;
          kernels::convert_scaled_reference(src.data(), from, want_c.data(), to, n, scale);
          kernels::accumulate_scaled_reference(src.data(), from, want_a.data(), to, n, scale);
          DeviceBuffer d_src = upload(src), d_c(dst0.size()), d_a = upload(dst0);
          kernels::gpu::convert_scaled(d_src.data(), from, d_c.data(), to, n, scale, nullptr);
          kernels::gpu::accumulate_scaled(d_src.data(), from, d_a.data(), to, n, scale, nullptr);
          CHECK_MESSAGE(download<std::uint8_t>(d_c.data(), want_c.size()) == want_c, "convert_scaled " << what);
          CHECK_MESSAGE(download<std::uint8_t>(d_a.data(), want_a.size()) == want_a, "accumulate_scaled " << what);
        }
      }
    }
  }
}
