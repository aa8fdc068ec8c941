// splitmix64 (Steele, Lea & Flood 2014, "Fast Splittable Pseudorandom
// Number Generators"): its output function, a bijective mix of 64 bits with
// full avalanche. Shared by the stochastic rounding stream
// (kernels/cpu/adam/stochastic_round.h, also in CUDA kernels), the hashed swap
// file names (offload/swap_naming.cpp) and deterministic test and example
// data. Pure functions; ZS_HOST_DEVICE (core/dtype.h) for nvcc.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zeroshard {

/// splitmix64's finaliser: x ^= x >> 30; x *= 0xbf58476d1ce4e5b9;
/// x ^= x >> 27; x *= 0x94d049bb133111eb; x ^= x >> 31 (modulo 2^64). Pure.
ZS_HOST_DEVICE inline std::uint64_t splitmix64_mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// splitmix64's output for state x: splitmix64_mix(x + 0x9e3779b97f4a7c15,
/// the golden-ratio increment); splitmix64(0) is 0xe220a8397b1dcdaf. Pure.
ZS_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
  return splitmix64_mix(x + 0x9e3779b97f4a7c15ull);
}

}  // namespace zeroshard
