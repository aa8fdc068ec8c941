// The bandwidth limit of an AdamW step, measured rather than assumed: one
// pass that reads four fp32 arrays and writes three (AdamW's memory pattern,
// 28 bytes per parameter) with almost no arithmetic, vectorised with Highway
// (the same run-time target choice as the kernels) and split over the same
// kernel thread pool.
#pragma once

#include <cstddef>

namespace zeroshard::bench {

/// For i < n: a[i] += g[i]; b[i] += g[i]; c[i] += g[i] * g[i]. Reads a, g, b,
/// c and writes a, b, c: 16 bytes read + 12 written per element. Split over
/// kernels::kernel_pool() like the optimizer kernels. Arrays must not overlap.
void limit_pass_4r3w(float* a, const float* g, float* b, float* c, std::size_t n);

}  // namespace zeroshard::bench
