// Helpers shared by the CUDA tests: host <-> device copies, deterministic
// random data, and bitwise comparison that names the first mismatch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"

namespace zeroshard::testing {

/// The element sizes every kernel test covers: empty, one, an odd tail, and
/// more than one 4096-element block with a ragged end.
inline const std::vector<std::size_t> kSizes = {0, 1, 7, 10001};

/// A device copy of v (an empty buffer for an empty v).
template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) {
    ZS_CUDA_CHECK(cudaMemcpy(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  return b;
}

/// n elements of T copied from device pointer p (waits for the device).
template <class T>
std::vector<T> download(const void* p, std::size_t n) {
  ZS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> v(n);
  if (n > 0) ZS_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

/// n floats uniform in [-scale, scale] from a fixed seed.
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// n floats uniform in [0, scale] (second moments must be >= 0).
inline std::vector<float> random_positive(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<float> v = random_floats(n, seed, scale);
  for (auto& x : v) x = x < 0 ? -x : x;
  return v;
}

/// Raw bits of v rounded to a 16-bit dtype (bf16 or f16).
inline std::vector<std::uint16_t> to_16bit(const std::vector<float>& v, DType t) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = t == DType::bf16 ? float_to_bf16(v[i]) : float_to_f16(v[i]);
  }
  return out;
}

/// Exact widening of 16-bit bits to float.
inline std::vector<float> from_16bit(const std::vector<std::uint16_t>& v, DType t) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = t == DType::bf16 ? bf16_to_float(v[i]) : f16_to_float(v[i]);
  }
  return out;
}

/// The bytes of v as a gradient of dtype (f32 as is; bf16/f16 rounded).
inline std::vector<std::uint8_t> gradient_bytes(const std::vector<float>& v, DType dtype) {
  std::vector<std::uint8_t> bytes(v.size() * dtype_size(dtype));
  if (v.empty()) return bytes;
  if (dtype == DType::f32) {
    std::memcpy(bytes.data(), v.data(), bytes.size());
  } else {
    const std::vector<std::uint16_t> h = to_16bit(v, dtype);
    std::memcpy(bytes.data(), h.data(), bytes.size());
  }
  return bytes;
}

/// Index of the first element whose bits differ, or a.size() when a and b
/// are bitwise equal (sizes must match).
template <class T>
std::size_t first_mismatch(const std::vector<T>& a, const std::vector<T>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  }
  return a.size();
}

/// CHECKs that got and want are bitwise equal; on failure the message
/// names `what` and the first differing element (value and hex bits).
inline void check_bitwise(const std::vector<float>& got, const std::vector<float>& want,
                          const std::string& what) {
  const std::size_t i = first_mismatch(got, want);
  std::ostringstream msg;
  if (i < got.size()) {
    msg << what << ": first mismatch at " << i << " of " << got.size() << ": got " << got[i]
        << " (0x" << std::hex << float_bits(got[i]) << "), want " << std::dec << want[i]
        << " (0x" << std::hex << float_bits(want[i]) << ")";
  }
  CHECK_MESSAGE(i == got.size(), msg.str());
}

/// As check_bitwise for raw 16-bit values.
inline void check_bitwise(const std::vector<std::uint16_t>& got,
                          const std::vector<std::uint16_t>& want, const std::string& what) {
  const std::size_t i = first_mismatch(got, want);
  std::ostringstream msg;
  if (i < got.size()) {
    msg << what << ": first mismatch at " << i << " of " << got.size() << ": got 0x" << std::hex
        << got[i] << ", want 0x" << want[i];
  }
  CHECK_MESSAGE(i == got.size(), msg.str());
}

/// As check_bitwise for bytes (8-bit quantization codes).
inline void check_bitwise(const std::vector<std::uint8_t>& got,
                          const std::vector<std::uint8_t>& want, const std::string& what) {
  const std::size_t i = first_mismatch(got, want);
  std::ostringstream msg;
  if (i < got.size()) {
    msg << what << ": first mismatch at " << i << " of " << got.size() << ": got "
        << static_cast<int>(got[i]) << ", want " << static_cast<int>(want[i]);
  }
  CHECK_MESSAGE(i == got.size(), msg.str());
}

}  // namespace zeroshard::testing
