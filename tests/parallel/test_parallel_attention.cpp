// ParallelSelfAttention (heads split across the tensor-parallel group)
// against an fp64 reference of causal multi-head attention (forward), the
// same layer on one rank (a SelfCommunicator: the unsplit layer) for the
// backward, and a central finite-difference check of its gradients, for
// every (dp, tp) factorisation of the world (each tensor-parallel group on
// its own seeded data). 3 heads leave a rank without heads at tp = 4 and 5
// heads split unevenly over 2, 3 and 4 ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/mesh.h"
#include "comm/self/self_communicator.h"
#include "core/error.h"
#include "parallel/parallel_attention.h"
#include "parallel/partition.h"
#include "parallel_test_util.h"

namespace zeroshard::parallel {
namespace {

using tptest::random_floats;

struct AttnCase {
  std::size_t dim, heads, batch, seq;
};

const std::vector<AttnCase> kAttentionCases = {{12, 3, 2, 5}, {20, 5, 1, 7}, {8, 1, 2, 3}};

// The full (unsplit) weights, in the head-major layout of [Note: attention
// head layout].
struct FullWeights {
  std::vector<float> wqkv, bqkv, wo, bo;
};

FullWeights make_weights(const AttnCase& c, std::uint32_t seed) {
  return FullWeights{random_floats(3 * c.dim * c.dim, seed + 1, 0.5f),
                     random_floats(3 * c.dim, seed + 2, 0.2f),
                     random_floats(c.dim * c.dim, seed + 3, 0.5f),
                     random_floats(c.dim, seed + 4, 0.2f)};
}

// fp64 causal multi-head attention straight from the definition.
std::vector<double> reference_forward(const AttnCase& c, const std::vector<float>& x,
                                      const FullWeights& w) {
  const std::size_t D = c.dim, hd = c.dim / c.heads, T = c.batch * c.seq;
  std::vector<double> qkv(T * 3 * D);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t o = 0; o < 3 * D; ++o) {
      double s = w.bqkv[o];
      for (std::size_t i = 0; i < D; ++i) {
        s += static_cast<double>(x[t * D + i]) * w.wqkv[o * D + i];
      }
      qkv[t * 3 * D + o] = s;
    }
  }
  std::vector<double> ctx(T * D, 0.0);
  for (std::size_t b = 0; b < c.batch; ++b) {
    for (std::size_t h = 0; h < c.heads; ++h) {
      const auto at = [&](std::size_t s, std::size_t part, std::size_t d) {
        return qkv[(b * c.seq + s) * 3 * D + h * 3 * hd + part * hd + d];
      };
      for (std::size_t i = 0; i < c.seq; ++i) {
        std::vector<double> p(i + 1);
        double m = -INFINITY, sum = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::size_t d = 0; d < hd; ++d) s += at(i, 0, d) * at(j, 1, d);
          p[j] = s / std::sqrt(static_cast<double>(hd));
          m = std::max(m, p[j]);
        }
        for (double& v : p) sum += (v = std::exp(v - m));
        for (std::size_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (std::size_t j = 0; j <= i; ++j) acc += p[j] / sum * at(j, 2, d);
          ctx[(b * c.seq + i) * D + h * hd + d] = acc;
        }
      }
    }
  }
  std::vector<double> y(T * D);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t o = 0; o < D; ++o) {
      double s = w.bo[o];
      for (std::size_t i = 0; i < D; ++i) s += ctx[t * D + i] * w.wo[o * D + i];
      y[t * D + o] = s;
    }
  }
  return y;
}

// This rank's slices of the full weights.
struct LocalWeights {
  std::vector<float> wqkv, bqkv, wo, bo;
  AttentionWeights view() const { return {wqkv, bqkv, wo, bo}; }
};

LocalWeights slice_weights(const ParallelSelfAttention& a, const FullWeights& w) {
  const std::size_t D = a.dim();
  const Slice rows = a.qkv().out_slice();
  const Slice cols = a.proj().in_slice();
  return LocalWeights{take_rows(w.wqkv, 3 * D, D, rows),
                      std::vector<float>(w.bqkv.begin() + static_cast<std::ptrdiff_t>(rows.begin),
                                         w.bqkv.begin() + static_cast<std::ptrdiff_t>(rows.end())),
                      take_cols(w.wo, D, D, cols), w.bo};
}

struct LocalGrads {
  std::vector<float> dx, wqkv, bqkv, wo, bo;
  AttentionGrads view() { return {wqkv, bqkv, wo, bo}; }
};

LocalGrads run_backward(const ParallelSelfAttention& a, const AttnCase& c,
                        const std::vector<float>& x, const std::vector<float>& dy,
                        const LocalWeights& lw) {
  const std::size_t T = c.batch * c.seq;
  std::vector<float> y(T * c.dim);
  AttentionSaved saved;
  a.forward(x, c.batch, c.seq, lw.view(), y, saved);
  LocalGrads g{std::vector<float>(T * c.dim), std::vector<float>(lw.wqkv.size()),
               std::vector<float>(lw.bqkv.size()), std::vector<float>(lw.wo.size()),
               std::vector<float>(lw.bo.size())};
  a.backward(x, dy, c.batch, c.seq, lw.view(), saved, g.dx, g.view());
  return g;
}

// Normwise check: |got - want| <= rel * max|want|. See the test case for rel.
int count_normwise(const std::vector<float>& got, const std::vector<float>& want, double rel,
                   const std::string& what) {
  if (got.size() != want.size()) {
    FAIL_CHECK(what << ": size " << got.size() << " vs " << want.size());
    return 1;
  }
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= rel * scale + 1e-30)) {
      if (bad == 0) FAIL_CHECK(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
      ++bad;
    }
  }
  return bad;
}

TEST_CASE("ParallelSelfAttention matches causal multi-head attention, forward and backward") {
  // Tolerance: the split and unsplit runs differ only in summation order
  // (the partial projections and the two all-reduces), each contributing at
  // most (D + tp + 2) u relative to the operand magnitudes ([Note:
  // tensor-parallel test tolerance]); through the softmax (Lipschitz 1) and
  // the two projections that is below 1e-5 of the largest entry at D <= 20,
  // so 1e-4 normwise leaves a tenfold margin while any wrong slice, head or
  // mask is off by O(1).
  const double rel = 1e-4;
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    for (std::size_t k = 0; k < kAttentionCases.size(); ++k) {
      const AttnCase& c = kAttentionCases[k];
      const std::string what =
          fmt::format("attention dp={} tp={} (tp_rank {}) dim={} heads={} batch={} seq={}",
                      shape.dp, shape.tp, mesh.tp_rank(), c.dim, c.heads, c.batch, c.seq);
      const auto seed = static_cast<std::uint32_t>(20000 + 1000 * k + 100 * mesh.dp_rank());
      const std::size_t T = c.batch * c.seq, D = c.dim;
      const std::vector<float> x = random_floats(T * D, seed + 10);
      const std::vector<float> dy = random_floats(T * D, seed + 11);
      const FullWeights fw = make_weights(c, seed);

      ParallelSelfAttention attn(mesh.tp_group(), c.dim, c.heads);
      const Slice heads = attn.head_slice();
      CHECK(heads == split_slice(c.heads, shape.tp, mesh.tp_rank()));
      CHECK(attn.qkv().out_slice() == Slice{3 * attn.head_dim() * heads.begin,
                                            3 * attn.head_dim() * heads.size});
      CHECK(attn.proj().in_slice() == Slice{attn.head_dim() * heads.begin,
                                            attn.head_dim() * heads.size});
      const LocalWeights lw = slice_weights(attn, fw);
      std::vector<float> y(T * D);
      AttentionSaved saved;
      attn.forward(x, c.batch, c.seq, lw.view(), y, saved);
      const LocalGrads g = run_backward(attn, c, x, dy, lw);

      // The unsplit layer (one rank) gives the reference gradients.
      SelfCommunicator self;
      ParallelSelfAttention full(self, c.dim, c.heads);
      const LocalWeights all = slice_weights(full, fw);
      const LocalGrads ref = run_backward(full, c, x, dy, all);

      const std::vector<double> want_y = reference_forward(c, x, fw);
      CHECK(count_normwise(y, std::vector<float>(want_y.begin(), want_y.end()), rel,
                           what + " y") == 0);
      // The causal mask: probabilities above the diagonal are 0, rows sum to 1.
      int mask_bad = 0;
      for (std::size_t b = 0; b < c.batch * heads.size; ++b) {
        for (std::size_t i = 0; i < c.seq; ++i) {
          double sum = 0;
          for (std::size_t j = 0; j < c.seq; ++j) {
            const float p = saved.probs[(b * c.seq + i) * c.seq + j];
            if (j > i) mask_bad += p != 0.0f;
            sum += p;
          }
          mask_bad += !(std::fabs(sum - 1.0) <= 1e-6);
        }
      }
      CHECK_MESSAGE(mask_bad == 0, what);
      CHECK(count_normwise(g.dx, ref.dx, rel, what + " dx") == 0);
      CHECK(count_normwise(g.wqkv, take_rows(ref.wqkv, 3 * D, D, attn.qkv().out_slice()), rel,
                           what + " dW_qkv") == 0);
      const Slice r = attn.qkv().out_slice();
      const std::vector<float> ref_bqkv(ref.bqkv.begin() + static_cast<std::ptrdiff_t>(r.begin),
                                        ref.bqkv.begin() + static_cast<std::ptrdiff_t>(r.end()));
      CHECK(count_normwise(g.bqkv, ref_bqkv, rel, what + " db_qkv") == 0);
      CHECK(count_normwise(g.wo, take_cols(ref.wo, D, D, attn.proj().in_slice()), rel,
                           what + " dW_o") == 0);
      CHECK(count_normwise(g.bo, ref.bo, rel, what + " db_o") == 0);
    }
  }
}

TEST_CASE("ParallelSelfAttention gradients pass a finite-difference check on the split layer") {
  // L = sum r * y in fp64 with y from the split layer (every rank runs every
  // forward together). Each full-tensor entry is perturbed on every rank and
  // re-sliced; the rank holding the entry compares the central difference
  // with its analytic gradient. Tolerance as [Note: finite-difference
  // tolerance] in test_layer_norm_gelu.cpp: h = 1e-2, |fd - analytic| <=
  // 2e-3 |analytic| + 1e-4.
  const AttnCase c{12, 3, 2, 4};
  const std::size_t T = c.batch * c.seq, D = c.dim;
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    const auto seed = static_cast<std::uint32_t>(60000 + 100 * mesh.dp_rank());
    std::vector<float> x = random_floats(T * D, seed + 10);
    const std::vector<float> r = random_floats(T * D, seed + 11);
    FullWeights fw = make_weights(c, seed);
    ParallelSelfAttention attn(mesh.tp_group(), c.dim, c.heads);
    const LocalGrads g = run_backward(attn, c, x, r, slice_weights(attn, fw));
    const Slice rows = attn.qkv().out_slice();
    const Slice cols = attn.proj().in_slice();

    const auto loss = [&] {
      const LocalWeights lw = slice_weights(attn, fw);
      std::vector<float> y(T * D);
      AttentionSaved saved;
      attn.forward(x, c.batch, c.seq, lw.view(), y, saved);
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r[i]) * y[i];
      return s;
    };
    int bad = 0;
    // owner(i) gives the index of entry i in this rank's gradient, or -1.
    const auto check = [&](std::vector<float>& param, const std::vector<float>& grad,
                           const auto& owner, const char* name) {
      for (std::size_t n = 0; n < 12; ++n) {
        const std::size_t i = (n * 7919 + 13) % param.size();
        const float saved = param[i];
        param[i] = saved + 1e-2f;
        const double up = loss();
        param[i] = saved - 1e-2f;
        const double down = loss();
        param[i] = saved;
        const long j = owner(i);
        if (j < 0) continue;
        const double fd = (up - down) / 2e-2, an = grad[static_cast<std::size_t>(j)];
        if (!(std::fabs(fd - an) <= 2e-3 * std::fabs(an) + 1e-4)) {
          if (bad == 0) {
            FAIL_CHECK(std::string(name) << "[" << i << "] dp=" << shape.dp << " tp=" << shape.tp
                            << ": analytic " << an << ", fd " << fd);
          }
          ++bad;
        }
      }
    };
    const auto everyone = [](std::size_t i) { return static_cast<long>(i); };
    check(x, g.dx, everyone, "dx");
    check(fw.wqkv, g.wqkv, [&](std::size_t i) {
      const std::size_t row = i / D;
      return rows.contains(row) ? static_cast<long>((row - rows.begin) * D + i % D) : -1L;
    }, "dW_qkv");
    check(fw.bqkv, g.bqkv, [&](std::size_t i) {
      return rows.contains(i) ? static_cast<long>(i - rows.begin) : -1L;
    }, "db_qkv");
    check(fw.wo, g.wo, [&](std::size_t i) {
      const std::size_t row = i / D, col = i % D;
      return cols.contains(col) ? static_cast<long>(row * cols.size + col - cols.begin) : -1L;
    }, "dW_o");
    check(fw.bo, g.bo, everyone, "db_o");
    CHECK(bad == 0);
  }
}

TEST_CASE("ParallelSelfAttention refuses a width its heads do not divide") {
  Communicator& w = tptest::world();
  CHECK_THROWS_AS(ParallelSelfAttention(w, 10, 3), ConfigError);
  CHECK_THROWS_AS(ParallelSelfAttention(w, 0, 1), ConfigError);
  CHECK_THROWS_AS(ParallelSelfAttention(w, 8, 0), ConfigError);
}

}  // namespace
}  // namespace zeroshard::parallel
