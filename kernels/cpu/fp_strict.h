// [Note: strict floating point in kernels]
//
// Every kernel in kernels/cpu is bitwise equal to its scalar reference. That
// holds only if the compiler evaluates each +, *, /, sqrt exactly as written:
// no fused multiply-add, no reassociation. GCC contracts a*b+c into an FMA by
// default (-ffp-contract=fast) wherever FMA instructions are enabled, which
// includes Highway's AVX2/AVX-512 target functions (its Mul/Add intrinsics are
// plain vector operators in GCC) and any build with -march=native. Including
// this header first in a kernel translation unit turns contraction off for
// every function defined after it. Clang contracts only within one source
// expression, which Highway's separate Mul/Add calls never form, and its
// `fp contract(off)` pragma makes the scalar references safe too.
//
// One thing stays open: which NaN comes out when two NaNs meet in one
// operation (IEEE 754 leaves the payload choice to the implementation; x86
// returns the first operand's, and compilers commute + and * freely). So a
// kernel and its reference agree bit for bit on every non-NaN result and on
// where NaNs are, but a NaN result may carry another payload or sign. The
// conversions (integer operations) agree on every bit, NaNs included.
//
// Include this header before any other header in kernels/cpu/*.cpp.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
