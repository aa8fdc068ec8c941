// Newton-Schulz orthogonalization on the GPU with cuBLAS: the fp32 form of
// kernels/cpu/muon/newton_schulz.h ([Note: Newton-Schulz iteration]), every
// product a cublasSgemm.
#pragma once

#include <cstddef>

#include "kernels/cpu/muon/newton_schulz.h"

struct cublasContext;
struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// g[rows x cols] (row-major fp32, device memory) becomes its Newton-Schulz
/// orthogonalization after `steps` iterations with `coefficients`, in fp32
/// as newton_schulz(..., NewtonSchulzPrecision::f32) computes it (the same
/// order of operations; not bitwise: cuBLAS sums in its own order). Runs
/// on `stream` with `handle` (its stream is set to `stream`); allocates
/// (2 m n + 2 m^2) floats of device workspace, m = min(rows, cols), n =
/// max, and returns after the work is enqueued and the Frobenius norm read
/// (one synchronisation). No transposes: a row-major rows x cols matrix is
/// cuBLAS's column-major cols x rows one. Throws InvariantError for a zero
/// dimension or negative steps, DeviceError when CUDA or cuBLAS fails.
/// Thread safety: one thread per handle.
void newton_schulz(cublasContext* handle, CUstream_st* stream, float* g, std::size_t rows, std::size_t cols, int steps,
                   NewtonSchulzCoefficients coefficients = {});

}  // namespace zeroshard::kernels::gpu
