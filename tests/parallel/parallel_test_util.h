// Helpers shared by the tensor-parallel tests: the world communicator, the
// mesh shapes of a world, seeded random data and the rounding-error bound
// the layers are checked against.
//
// [Note: tensor-parallel test tolerance]
// A split layer computes the same sums as the unsplit one in another order
// (each rank's partial GEMM, then the all-reduce over the group), so results
// are compared with a bound, not bitwise. The reference is computed in fp64
// together with the magnitude M = sum |a_k b_k| (+ |bias|, + |initial
// gradient|) of every output. For an fp32 dot product or sum of n terms in
// any order, |fl(s) - s| <= gamma_n * M with gamma_n = n u / (1 - n u),
// u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd
// ed., section 3.1); fused multiply-adds and blocked summation only lower
// it. A split layer's output takes n = K + tp + 2 terms (K products, tp
// partial sums, bias or initial gradient, final rounding), so the check is
// |got - want| <= 1.01 * (K + tp + 2) * u * M: a wrong slice, a missing
// all-reduce or a missed bias is off by O(M) and fails it.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "comm/communicator.h"
#include "comm/mesh.h"

namespace zeroshard::tptest {

/// The communicator over every rank of the test job (created once).
inline Communicator& world() {
  static std::unique_ptr<Communicator> comm = make_world_communicator();
  return *comm;
}

/// Every (dp, tp) with dp x tp == n, tp ascending (tp = 1 first, tp = n last).
inline std::vector<MeshShape> factorisations(int n) {
  std::vector<MeshShape> out;
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp == 0) out.push_back(MeshShape{n / tp, tp});
  }
  return out;
}

/// n values uniform in [-scale, scale] from a generator seeded with `seed`
/// (the same values on every rank that passes the same seed).
inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

/// n ids uniform in [0, vocab) from a generator seeded with `seed`.
inline std::vector<std::int32_t> random_ids(std::size_t n, std::size_t vocab, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab) - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

/// An fp64 reference value and its magnitude (sum of |terms|).
struct Ref {
  std::vector<double> value;
  std::vector<double> mag;
  explicit Ref(std::size_t n = 0) : value(n, 0.0), mag(n, 0.0) {}
};

/// Number of elements of `got` outside the [Note: tensor-parallel test
/// tolerance] bound for sums of `terms` terms around `want`; reports the
/// first one with its index and `what`.
inline int count_outside(const std::vector<float>& got, const Ref& want, std::size_t terms,
                         const std::string& what) {
  if (got.size() != want.value.size()) {
    FAIL_CHECK(what << ": size " << got.size() << " vs " << want.value.size());
    return 1;
  }
  const double u = std::ldexp(1.0, -24);
  const double gamma = 1.01 * static_cast<double>(terms) * u;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want.value[i]);
    if (!(err <= gamma * want.mag[i])) {
      if (bad == 0) {
        FAIL_CHECK(what << "[" << i << "]: got " << got[i] << ", want " << want.value[i]
                        << " (bound " << gamma * want.mag[i] << ")");
      }
      ++bad;
    }
  }
  return bad;
}

/// Columns [begin, begin + n) of a row-major [rows, cols] reference.
inline Ref ref_cols(const Ref& r, std::size_t rows, std::size_t cols, std::size_t begin,
                    std::size_t n) {
  Ref out(rows * n);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      out.value[i * n + j] = r.value[i * cols + begin + j];
      out.mag[i * n + j] = r.mag[i * cols + begin + j];
    }
  }
  return out;
}

/// Rows [begin, begin + n) of a row-major [rows, cols] reference.
inline Ref ref_rows(const Ref& r, std::size_t cols, std::size_t begin, std::size_t n) {
  Ref out(n * cols);
  for (std::size_t k = 0; k < n * cols; ++k) {
    out.value[k] = r.value[begin * cols + k];
    out.mag[k] = r.mag[begin * cols + k];
  }
  return out;
}

}  // namespace zeroshard::tptest
