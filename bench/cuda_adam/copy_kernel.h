// The bandwidth limit of bench/cuda_adam: a device-to-device copy kernel.
#pragma once

#include <cstddef>

struct CUstream_st;

namespace zeroshard::bench {

/// Enqueues dst[i] = src[i] for n floats (16-byte vector loads and stores
/// with a grid-stride loop over all SMs) on `stream`. src and dst must be
/// 16-byte aligned and must not overlap. Returns the cudaError_t of the
/// launch as an int (0 on success), so that callers need no CUDA headers.
int launch_copy(const float* src, float* dst, std::size_t n, CUstream_st* stream);

}  // namespace zeroshard::bench
