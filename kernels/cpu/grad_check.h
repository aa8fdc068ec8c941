// Fused gradient pass before an optimizer step: unscale (multiply by a
// scale), check for Inf/NaN and sum the squares for global-norm clipping, in
// one read of the gradient shard. Next to its scalar reference.
//
// Per element, y = x * scale in fp32 (x converted exactly from bf16/fp16
// first); found_inf_or_nan = any y is Inf or NaN; the sum of squares is
// sum(double(y)^2) (each square exact in double) in this fixed order, which
// makes the value depend on n and the data only, never on the thread count
// or the SIMD width:
//   - [0, n) is cut into kGradCheckParts parts at multiples of 64 elements:
//     part p = [B(p), B(p+1)), B(p) = min(n, 64 * floor(ceil(n/64) * p / P));
//   - within a part, element j (counted from the part's start) is added to
//     lane j mod 16 of 16 double accumulators, in order;
//   - the 16 lanes are combined pairwise: lane[i] += lane[i + w] for w = 1,
//     2, 4, 8 (i a multiple of 2w), giving lane[0];
//   - the parts' sums are added in order, starting from 0.
// Micikevicius et al. 2018, "Mixed Precision Training" (loss scaling and the
// overflow check); torch.nn.utils.clip_grad_norm_ (the norm).
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// Result of a gradient pass.
struct GradCheck {
  double sum_of_squares = 0;      ///< sum of y^2, in double (Inf/NaN when found_inf_or_nan)
  bool found_inf_or_nan = false;  ///< some y was Inf or NaN
};

/// Number of parts of the fixed summation order (see above).
inline constexpr std::size_t kGradCheckParts = 256;

/// In place: grad[i] = grad[i] * scale for i < n (fp32), and the statistics
/// of the scaled values. Vectorised (Highway, target chosen at run time) and
/// split over kernel_pool() threads; bitwise equal to the reference for any
/// thread count and target (a NaN sum may carry another payload, see
/// fp_strict.h). Thread safety: touches only grad. Allocates
/// nothing.
GradCheck unscale_and_check(float* grad, std::size_t n, float scale);

/// Read only: the statistics of grad[i] * scale for n elements of dtype
/// (f32, bf16 or f16); scale 1 gives those of the gradient itself. As
/// unscale_and_check otherwise. Throws InvariantError for f64.
GradCheck check_gradients(const void* grad, DType dtype, std::size_t n, float scale);

/// Scalar reference of both: when write_back, grad must be f32 and is
/// multiplied in place. Throws InvariantError for f64 or a non-f32 write_back.
GradCheck grad_check_reference(void* grad, DType dtype, std::size_t n, float scale,
                               bool write_back);

/// Number of the n elements of dtype (f32, bf16 or f16) that are Inf or NaN
/// (what a caller asks after found_inf_or_nan, e.g. to report how many).
/// Vectorised (Highway, target chosen at run time) and split over
/// kernel_pool() threads; the count does not depend on either. Throws
/// InvariantError for f64. Thread safety: read only. Allocates nothing.
std::size_t count_nonfinite(const void* data, DType dtype, std::size_t n);

/// Scalar reference of count_nonfinite.
std::size_t count_nonfinite_reference(const void* data, DType dtype, std::size_t n);

/// First element of part p (p <= kGradCheckParts) of an n-element array in
/// the fixed summation order above.
std::size_t grad_check_part_begin(std::size_t n, std::size_t p);

}  // namespace zeroshard::kernels
