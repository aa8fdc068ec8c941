// Fused Adam / AdamW with bf16 optimizer states (DeepSpeed's cpu_adam and
// torchao's low-precision optimizers offer the same): exp_avg and
// exp_avg_sq are stored as bf16 (2 bytes each), the parameter stays fp32
// (master weights). Per element: widen both states to fp32 (exact), run the
// fp32 kernel's arithmetic (kernels/cpu/adam/adam.h: torch's single-tensor
// order, make_adam_scalars' scalars), so param comes out bitwise equal to
// adam_update on the widened states, then round both states back to bf16:
// to nearest even (float_to_bf16) or stochastically (stochastic_round.h,
// [Note: stochastic rounding stream]), seeded and reproducible for any
// thread count and chunking.
//
// Error against fp32 states over one step from the same (bf16) states:
// param identical; each new state within half a bf16 ulp (<= 2^-8 of its
// magnitude) with round-to-nearest-even, within one ulp (< 2^-7 of its
// magnitude) and unbiased with stochastic rounding.
//
// Memory traffic per element (fp32 gradient, no copy): reads p, g (8 B) and
// two bf16 states (4 B), writes p (4 B) and two states (4 B): 20 B against
// 28 B for fp32 states.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam.h"

namespace zeroshard::kernels {

/// How new bf16 states are rounded.
enum class StateRounding : std::uint8_t {
  nearest_even,  ///< float_to_bf16: round to nearest, ties to even
  stochastic,    ///< float_to_bf16_stochastic with the seeded stream
};

/// Rounding of one call. For stochastic rounding, the random bits of
/// element j of the call are those of global index first_index + j at
/// (seed, step) ([Note: stochastic rounding stream]): a caller that updates
/// a tensor in pieces passes each piece's offset, and a shard its offset in
/// the flat buffer, so results do not depend on how the work is split.
struct Bf16StateRounding {
  StateRounding mode = StateRounding::nearest_even;
  std::uint64_t seed = 0;         ///< stochastic: the run's seed
  std::uint64_t step = 0;         ///< stochastic: the optimizer step (any counter that changes per step)
  std::uint64_t first_index = 0;  ///< stochastic: global index of element 0 (elements)
};

/// Scalar reference: element by element, widen, detail::adam_element,
/// round. param: n floats; grad: n elements of grad_dtype (f32, bf16, f16);
/// exp_avg, exp_avg_sq: n bf16 bit patterns each, updated in place;
/// param_copy, when not null, n elements of copy_dtype (bf16, f16) = the
/// updated param rounded to nearest even. Throws InvariantError on a bad
/// dtype or a null state array with n > 0. Thread safety: touches only its
/// arguments.
void adam_bf16_state_update_reference(float* param, const void* grad, DType grad_dtype,
                                      std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq,
                                      void* param_copy, DType copy_dtype, std::size_t n,
                                      const AdamScalars& s, const Bf16StateRounding& rounding);

/// The kernel an engine calls: vectorised with Highway (AVX-512 or AVX2
/// chosen at run time), split over kernel_pool() threads; bitwise equal to
/// adam_bf16_state_update_reference in param, param_copy and both states
/// for any thread count and target (NaN payloads of param aside, see
/// fp_strict.h). Arrays must not overlap. Errors as the reference.
void adam_bf16_state_update(float* param, const void* grad, DType grad_dtype,
                            std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq, void* param_copy,
                            DType copy_dtype, std::size_t n, const AdamScalars& s,
                            const Bf16StateRounding& rounding);

/// Bytes of both bf16 Adam states for n elements: 4 * n.
constexpr std::size_t adam_bf16_state_bytes(std::size_t n) { return 4 * n; }

namespace detail {
/// The argument checks of both entry points (`fn` names the caller).
void check_adam_bf16_state_args(const char* fn, const void* exp_avg, const void* exp_avg_sq,
                                DType grad_dtype, const void* param_copy, DType copy_dtype,
                                std::size_t n);
}  // namespace detail

}  // namespace zeroshard::kernels
