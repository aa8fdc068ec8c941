// Newton-Schulz orthogonalization, Muon's core (Jordan et al. 2024,
// "Muon: An optimizer for hidden layers in neural networks"; the reference
// implementation is KellerJordan/Muon's zeropower_via_newtonschulz5).
//
// [Note: Newton-Schulz iteration]
// For a matrix G (rows x cols) it approximates the orthogonal factor U V^T
// of G = U S V^T. With m = min(rows, cols) and n = max(rows, cols), X is G
// (or G^T when rows > cols, so that X is m x n and X X^T the smaller
// product) divided by its Frobenius norm + 1e-7, so that every singular
// value is at most 1; then `steps` times
//     A = X X^T,  B = b A + c A A,  X = a X + B X
// with the quintic coefficients (a, b, c) = (3.4445, -4.7750, 2.0315) of
// the reference, chosen for the slope at zero rather than convergence:
// each singular value s (of the normalized X, so s <= 1) goes through
// p(s) = a s + b s^3 + c s^5. After 5 steps every s >= 0.01 lands in
// [0.68, 1.14] (computed from p; not 1: the reference calls the result
// "US'V^T" with S' roughly in (0.5, 1.5)); s below 0.01 grows at most by
// a^5 = 487 and may stay below the band. The singular vectors are G's.
// X is transposed back at the end.
//  - fp32: every product is an OpenBLAS sgemm in fp32;
//  - bf16: as the reference runs it (X = G.bfloat16()): every product is
//    computed with fp32 accumulation and every tensor the reference holds
//    (X, A, A A, b A, c A A, B, a X, B X and each sum) is rounded to bf16
//    (round to nearest even) when it is formed;
//  - the double reference (tests) runs the fp32 order in double.
#pragma once

#include <cstddef>
#include <vector>

namespace zeroshard::kernels {

/// The quintic coefficients of the reference implementation.
struct NewtonSchulzCoefficients {
  float a = 3.4445f;
  float b = -4.7750f;
  float c = 2.0315f;
};

/// How the iteration stores its matrices (see the note).
enum class NewtonSchulzPrecision { f32, bf16 };

/// out[rows x cols] (row-major) = the Newton-Schulz orthogonalization of
/// g[rows x cols] (row-major, fp32) after `steps` iterations, computed in
/// `precision`. out may alias g. rows, cols >= 1; steps >= 0 (0: the
/// normalized G). Allocates (2 m n + 2 m^2) floats of workspace, m =
/// min(rows, cols), n = max(rows, cols). Throws InvariantError for a zero
/// dimension or negative steps. Thread safety: touches only its arguments;
/// OpenBLAS may use its own threads. Source: [Note: Newton-Schulz
/// iteration].
void newton_schulz(const float* g, float* out, std::size_t rows, std::size_t cols, int steps,
                   NewtonSchulzPrecision precision = NewtonSchulzPrecision::f32,
                   NewtonSchulzCoefficients coefficients = {});

/// The same iteration in double with plain loops (the fp32 order), for
/// tests. Returns rows x cols, row-major. Throws as newton_schulz.
std::vector<double> newton_schulz_reference(const std::vector<double>& g, std::size_t rows, std::size_t cols,
                                            int steps, NewtonSchulzCoefficients coefficients = {});

}  // namespace zeroshard::kernels
