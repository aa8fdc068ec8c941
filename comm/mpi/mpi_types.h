// Mapping from zeroshard element types and reduction operators to MPI.
//
// f32 and f64 map to MPI_FLOAT and MPI_DOUBLE with MPI's built-in MPI_SUM,
// MPI_MAX and MPI_MIN.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"
#include "core/dtype.h"

// [Note: 16-bit reductions]
// MPI has no 16-bit floating-point types, so bf16 and f16 each get their own
// committed contiguous MPI datatype of 2 bytes, and each (type, operator)
// pair a user-defined, commutative MPI_Op. The reduction of two 16-bit
// operands a and b is DEFINED as
//
//     sum:  round16(float(a) + float(b))
//     max:  round16(float(b) > float(a) ? float(b) : float(a))
//     min:  round16(float(b) < float(a) ? float(b) : float(a))
//
// where float() is the exact widening of core/dtype.h (bf16_to_float,
// f16_to_float) and round16 is its round-to-nearest-even narrowing
// (float_to_bf16, float_to_f16: overflow becomes Inf, NaN stays NaN). If
// either operand is NaN, every operator returns NaN (computed as
// float(a) + float(b)), so overflow checks see it. For max/min the result
// is always one of the operands (round16 of a widened 16-bit value is exact).
//
// A reduction over N ranks applies this pairwise combination N-1 times in an
// order MPI chooses; because the rounded sum is not associative, a 16-bit
// sum over more than two ranks may differ in the last bit between MPI
// algorithms (world sizes, message sizes). MPI advises, but does not
// require, that every rank of one all-reduce gets the same bits. Sums whose
// partial sums are all representable in the 16-bit type are exact in any
// order; users who need order-independent sums reduce in fp32.
//
// The datatypes and ops are created once, lazily, on first use after
// MPI_Init, and freed inside MPI_Finalize (before MPI shuts down) by the
// delete callback of an attribute cached on MPI_COMM_SELF, the standard hook
// that runs first in MPI_Finalize whoever calls it.

namespace zeroshard {

/// The MPI datatype of one element of `dtype` (MPI_FLOAT, MPI_DOUBLE, or
/// the 2-byte bf16/f16 types described in [Note: 16-bit reductions]).
/// Creates the 16-bit types on first use. Throws CommError if MPI is not
/// initialised or already finalised. Thread safety: safe from any thread.
MPI_Datatype mpi_datatype(DType dtype);

/// The MPI_Op that reduces `dtype` elements with `op`: MPI_SUM/MPI_MAX/
/// MPI_MIN for f32/f64, the user-defined ops of [Note: 16-bit reductions]
/// for bf16/f16. Throws CommError as mpi_datatype. Thread safety: safe from
/// any thread.
MPI_Op mpi_op(DType dtype, ReduceOp op);

/// The 16-bit reduction itself, as the MPI ops apply it: inout[i] =
/// combine(in[i], inout[i]) for i < count, following [Note: 16-bit
/// reductions]. `in` and `inout` hold raw bf16 or f16 bits; dtype must be
/// DType::bf16 or DType::f16 (else InvariantError). Thread safety: pure
/// function of its buffers.
void reduce_16bit(DType dtype, ReduceOp op, const std::uint16_t* in, std::uint16_t* inout,
                  std::size_t count);

}  // namespace zeroshard
