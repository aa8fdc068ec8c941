// The fused gradient pass before an optimizer step, on the GPU: unscale
// (multiply by a scale), check for Inf/NaN and sum the squares for
// global-norm clipping, in one read of the gradient shard. The GPU form of
// kernels/cpu/grad_check.h, whose grad_check_reference is the reference
// and whose GradCheck is the result type.
//
// Per element, y = x * scale in fp32 (x widened exactly from bf16/fp16
// first); found_inf_or_nan = some y is Inf or NaN; sum_of_squares adds
// double(y)^2. The unscaled values are bitwise the reference's, except NaN
// payloads (the GPU's multiply returns the canonical NaN where x86 keeps the
// operand's). The sum is reduced in double in a fixed order that depends
// only on n: contiguous blocks of at least 4096 elements (at most 1024
// blocks), a strided per-thread sum and a CUB BlockReduce within a block,
// and one more block that reduces the block sums the same way. So it is the
// same bits on every run and every GPU, but not the CPU's order: it differs
// from the reference by double rounding only (relative error well below
// n * 2^-52). The header needs no CUDA headers.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "kernels/cpu/grad_check.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// Bytes of device workspace a gradient pass needs (a constant, 12 KiB).
std::size_t grad_check_workspace_bytes();

/// Enqueues, on `stream` (null: legacy default stream), grad[i] *= scale for
/// i < n (fp32, in place) and writes the statistics of the scaled values to
/// *result (device memory; zeros and false for n == 0); returns without
/// waiting. workspace: grad_check_workspace_bytes() of device memory, 8-byte
/// aligned, not used by concurrent work. Errors: InvariantError for null
/// pointers; DeviceError if a launch fails. Thread safety: touches only its
/// arguments.
void unscale_and_check(float* grad, std::size_t n, float scale, GradCheck* result,
                       void* workspace, CUstream_st* stream);

/// Read only: as unscale_and_check for n elements of dtype (f32, bf16 or
/// f16) without writing them back; scale 1 gives the statistics of the
/// gradient itself. Errors: InvariantError for f64 or null pointers;
/// DeviceError if a launch fails.
void check_gradients(const void* grad, DType dtype, std::size_t n, float scale,
                     GradCheck* result, void* workspace, CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
