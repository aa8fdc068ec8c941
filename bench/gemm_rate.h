// The matrix-product rate of a decoder's own shapes, shared by the
// benchmarks that set a model's compute against its limit (bench/plan's
// bench_mesh_ranking, bench/infinity's bench_infinity). Header-only;
// needs parallel/gemm.h's OpenBLAS sgemm and a Communicator.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "parallel/gemm.h"
#include "runtime/cluster_plan/transformer_shape.h"

namespace zeroshard::bench {

/// One matrix product of the model: [tokens, k] x [k, n].
struct Gemm {
  std::size_t k, n;
};

/// The products a token goes through on one rank holding the whole model
/// (tp 1): per layer qkv, the attention's output, the MLP's two; then the
/// output head. The attention core (s x s) is left out, as the planner's
/// matmul_weight_count leaves it out of its weights. `t` resolved.
inline std::vector<Gemm> model_gemms(const TransformerShape& t) {
  const auto h = static_cast<std::size_t>(t.hidden), f = static_cast<std::size_t>(t.ffn),
             kv = static_cast<std::size_t>(t.hidden / t.heads * t.kv_heads);
  std::vector<Gemm> g;
  for (std::int64_t l = 0; l < t.layers; ++l) {
    g.push_back({h, h + 2 * kv});
    g.push_back({h, h});
    g.push_back({h, f});
    g.push_back({f, h});
  }
  g.push_back({h, static_cast<std::size_t>(t.vocab)});
  return g;
}

/// FLOP/s of the forward (X W) and backward (dX = dY W^T, dW = X^T dY)
/// products of `gemms` over `tokens` rows, fp32: 6 tokens k n FLOPs each,
/// over the best of 5 passes after one untimed, every rank of `comm` at
/// once; the slowest rank's rate, on every rank. Collective. Memory:
/// about (2 tokens + 2 widest) x widest floats.
inline double gemm_rate(const std::vector<Gemm>& gemms, std::size_t tokens, Communicator& comm) {
  std::size_t widest = 0;
  for (const Gemm& g : gemms) widest = std::max({widest, g.k, g.n});
  std::vector<float> x(tokens * widest, 0.5f), y(tokens * widest, 0.25f), w(widest * widest, 0.01f),
      dw(widest * widest, 0.f);
  double flops = 0;
  for (const Gemm& g : gemms) flops += 6.0 * static_cast<double>(tokens * g.k * g.n);
  using parallel::Trans;
  double best = 1e30;
  for (int pass = 0; pass < 6; ++pass) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (const Gemm& g : gemms) {
      parallel::sgemm(Trans::no, Trans::no, tokens, g.n, g.k, 1.f, x.data(), w.data(), 0.f, y.data());
      parallel::sgemm(Trans::no, Trans::yes, tokens, g.k, g.n, 1.f, y.data(), w.data(), 0.f, x.data());
      parallel::sgemm(Trans::yes, Trans::no, g.k, g.n, tokens, 1.f, x.data(), y.data(), 0.f, dw.data());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0) best = std::min(best, s);
  }
  double rate = flops / best;
  comm.all_reduce(&rate, 1, DType::f64, ReduceOp::min);  // the slowest rank's
  return rate;
}

}  // namespace zeroshard::bench
