// Seeded, reproducible stochastic rounding of fp32 to bf16 (Gupta et al.
// 2015, "Deep Learning with Limited Numerical Precision"; as DeepSpeed and
// torchao offer for bf16 optimizer states), shared by the CPU scalar
// reference, the Highway kernels (the same operations per lane) and the
// CUDA kernels (ZS_HOST_DEVICE), so all three give the same bits.
//
// [Note: stochastic rounding stream]
// The random bits of element i (its global index in the tensor or shard,
// not its position within a thread's chunk) at optimizer step t with seed
// s come from a counter-based hash, no generator state:
//   key   = splitmix64(s ^ splitmix64(t ^ 0x632be59bd9b4e019))   (per call)
//   r(i)  = fmix32(lo32(i) ^ lo32(key) ^ fmix32(hi32(i) ^ hi32(key)))
// (splitmix64: core/splitmix64.h; fmix32: MurmurHash3's 32-bit
// finalizer; the inner hash of the index's high half is one value for
// every element of a call below 2^32 elements, so the vector kernels hash
// once per element). So results depend on (s, t, i) only: any thread count, any
// chunking, CPU or GPU. An Adam step rounds exp_avg with the low 16 bits of
// r(i) and exp_avg_sq with the high 16 bits.
// Rounding x (not NaN) with 16 random bits b: bf16 bits = (bits(x) + b) >>
// 16, i.e. the magnitude is rounded up with probability (low 16 bits of
// x) / 2^16 and down otherwise, so E[result] = x exactly (unbiased) and the
// error is below one bf16 ulp (2^-7 relatively). Values of magnitude above
// the largest bf16 may round to Inf; Inf stays Inf; NaN rounds as
// float_to_bf16 (quiet NaN).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/splitmix64.h"

namespace zeroshard::kernels {

/// The per-call key of the stream: both halves of
/// splitmix64(seed ^ splitmix64(step ^ 0x632be59bd9b4e019)).
struct StochasticKey {
  std::uint32_t lo = 0;  ///< xor-ed into the index's low 32 bits
  std::uint32_t hi = 0;  ///< xor-ed into the index's high 32 bits before their hash
};

/// MurmurHash3's 32-bit finalizer (a bijection with full avalanche). Pure.
ZS_HOST_DEVICE inline std::uint32_t fmix32(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

/// The key of (seed, step). Pure.
ZS_HOST_DEVICE inline StochasticKey stochastic_key(std::uint64_t seed, std::uint64_t step) {
  const std::uint64_t k = splitmix64(seed ^ splitmix64(step ^ 0x632be59bd9b4e019ull));
  return StochasticKey{static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
}

/// The key's mix of an index's high half: fmix32(hi ^ key.hi). Pure.
ZS_HOST_DEVICE inline std::uint32_t stochastic_high(StochasticKey key, std::uint32_t hi) {
  return fmix32(hi ^ key.hi);
}

/// The 32 random bits of global element index i. Pure.
ZS_HOST_DEVICE inline std::uint32_t stochastic_bits(StochasticKey key, std::uint64_t i) {
  return fmix32(static_cast<std::uint32_t>(i) ^ key.lo ^
                stochastic_high(key, static_cast<std::uint32_t>(i >> 32)));
}

/// x rounded to bf16 bits with 16 random bits b (b < 2^16): (bits(x) + b)
/// >> 16, NaN as float_to_bf16. Pure.
ZS_HOST_DEVICE inline std::uint16_t float_to_bf16_stochastic(float x, std::uint32_t b) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return float_to_bf16(x);
  return static_cast<std::uint16_t>((u + b) >> 16);
}

}  // namespace zeroshard::kernels
