// Which SIMD instruction sets the kernels are compiled for, and which one they
// use at run time.
//
// The *_simd.cpp kernels are compiled by Highway once per target in
// {AVX3 (AVX-512), AVX2, portable fallback}; every call dispatches to the
// best one the CPU supports (HWY_DYNAMIC_DISPATCH). The fallback is EMU128,
// or SCALAR (one lane) with GCC < 12.3, where Highway marks EMU128 broken.
// SSSE3/SSE4 are left out to keep build times down: an x86-64 CPU without
// AVX2 runs the fallback, which is correct but slower. Every target gives
// bitwise the same results (see fp_strict.h).
//
// Include this header right after fp_strict.h, before any Highway header.
#pragma once

// ZS_HWY_EXTRA_DISABLED_TARGETS: more targets to leave out (scripts/sanitize
// leaves out those the build machine cannot run).
#ifndef ZS_HWY_EXTRA_DISABLED_TARGETS
#define ZS_HWY_EXTRA_DISABLED_TARGETS 0
#endif
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | ZS_HWY_EXTRA_DISABLED_TARGETS)
#endif

#include <cstdint>
#include <vector>

namespace zeroshard::kernels {

/// Name of the target the kernels dispatch to now ("AVX3", "AVX2", "EMU128",
/// "SCALAR").
/// Thread safety: safe.
const char* simd_target_name();

/// Highway target bits (HWY_AVX3, HWY_AVX2, fallback) that the kernels are
/// compiled for and this CPU supports, best first.
std::vector<std::int64_t> simd_targets();

/// Makes every kernel dispatch to `target` (one of simd_targets()), or to the
/// best supported target again when target is 0. For tests and benchmarks;
/// not thread safe with respect to concurrently running kernels.
void force_simd_target(std::int64_t target);

}  // namespace zeroshard::kernels
