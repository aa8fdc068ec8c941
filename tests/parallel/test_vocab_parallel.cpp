// VocabParallelEmbedding and VocabParallelCrossEntropy against the unsplit
// embedding and torch-style cross-entropy, for every (dp, tp) factorisation
// of the world (each tensor-parallel group on its own seeded data), with
// vocabularies of 1, 3, 7, 57 and 257 (uneven splits; empty slices at
// tp = 4), token counts 0, 1, 5, 57 and repeated ids; and the tied LM head
// (logits = H E^T from the embedding's own slice) end to end.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/mesh.h"
#include "core/error.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/partition.h"
#include "parallel/vocab_parallel_cross_entropy.h"
#include "parallel/vocab_parallel_embedding.h"
#include "parallel_test_util.h"

namespace zeroshard::parallel {
namespace {

using tptest::random_floats;
using tptest::random_ids;

struct VocabCase {
  std::size_t vocab, dim, tokens;
};

const std::vector<VocabCase> kVocabCases = {
    {7, 57, 5}, {57, 7, 57}, {257, 300, 57}, {3, 7, 5}, {1, 7, 3}, {57, 7, 0}, {257, 1, 1},
};

std::string label(const char* what, const Mesh& mesh, const VocabCase& c) {
  return fmt::format("{} dp={} tp={} (dp_rank {} tp_rank {}) vocab={} dim={} tokens={}", what,
                     mesh.dp_size(), mesh.tp_size(), mesh.dp_rank(), mesh.tp_rank(), c.vocab,
                     c.dim, c.tokens);
}

TEST_CASE("VocabParallelEmbedding equals the unsplit lookup bit for bit, forward and backward") {
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    for (std::size_t k = 0; k < kVocabCases.size(); ++k) {
      const VocabCase& c = kVocabCases[k];
      const std::string what = label("embedding", mesh, c);
      const auto seed = static_cast<std::uint32_t>(3000 + 1000 * k + 100 * mesh.dp_rank());
      const std::vector<float> e = random_floats(c.vocab * c.dim, seed + 1);
      const std::vector<std::int32_t> ids = random_ids(c.tokens, c.vocab, seed + 2);
      const std::vector<float> dout = random_floats(c.tokens * c.dim, seed + 3);
      const std::vector<float> de0 = random_floats(c.vocab * c.dim, seed + 4, 0.25f);

      VocabParallelEmbedding emb(mesh.tp_group(), c.vocab, c.dim);
      const Slice s = emb.vocab_slice();
      CHECK(s == split_slice(c.vocab, shape.tp, mesh.tp_rank()));
      const std::vector<float> e_local = take_rows(e, c.vocab, c.dim, s);
      std::vector<float> out(c.tokens * c.dim, -1.0f);
      emb.forward(ids, e_local, out);
      std::vector<float> de_local = take_rows(de0, c.vocab, c.dim, s);
      emb.backward(ids, dout, de_local);

      // One rank contributes each row, the others +0: exact.
      int bad_out = 0;
      for (std::size_t t = 0; t < c.tokens; ++t) {
        for (std::size_t d = 0; d < c.dim; ++d) {
          bad_out += out[t * c.dim + d] != e[static_cast<std::size_t>(ids[t]) * c.dim + d];
        }
      }
      CHECK_MESSAGE(bad_out == 0, what);
      // The unsplit backward, adding rows in token order as the layer does.
      std::vector<float> de = de0;
      for (std::size_t t = 0; t < c.tokens; ++t) {
        for (std::size_t d = 0; d < c.dim; ++d) {
          de[static_cast<std::size_t>(ids[t]) * c.dim + d] += dout[t * c.dim + d];
        }
      }
      CHECK_MESSAGE(de_local == take_rows(de, c.vocab, c.dim, s), what);
    }
  }
}

// torch.nn.functional.cross_entropy (mean) and its gradient in fp64.
struct CeRef {
  double loss = 0;
  std::vector<double> grad;
};

CeRef ce_reference(const std::vector<float>& logits, const std::vector<std::int32_t>& targets,
                   std::size_t vocab, double grad_scale) {
  const std::size_t T = targets.size();
  CeRef r;
  r.grad.resize(T * vocab);
  for (std::size_t i = 0; i < T; ++i) {
    double m = -INFINITY;
    for (std::size_t v = 0; v < vocab; ++v) {
      m = std::max(m, static_cast<double>(logits[i * vocab + v]));
    }
    double s = 0;
    for (std::size_t v = 0; v < vocab; ++v) s += std::exp(logits[i * vocab + v] - m);
    const auto y = static_cast<std::size_t>(targets[i]);
    r.loss += std::log(s) + m - logits[i * vocab + y];
    for (std::size_t v = 0; v < vocab; ++v) {
      const double p = std::exp(logits[i * vocab + v] - m) / s;
      r.grad[i * vocab + v] = (p - (v == y ? 1.0 : 0.0)) * grad_scale / static_cast<double>(T);
    }
  }
  if (T > 0) r.loss /= static_cast<double>(T);
  return r;
}

// Loss: fp64 throughout, only the summation order differs: relative 1e-12.
// Gradient: the fp64 value rounded once to fp32: relative 2^-24 (+ 1e-12 for
// the fp64 part and a floor far below any non-zero entry's size).
int count_grad_outside(const std::vector<float>& got, const std::vector<double>& want,
                       const std::string& what) {
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = (std::ldexp(1.0, -24) + 1e-12) * std::fabs(want[i]) + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (bad == 0) {
        FAIL_CHECK(what << " dlogits[" << i << "]: got " << got[i] << ", want " << want[i]);
      }
      ++bad;
    }
  }
  return bad;
}

TEST_CASE("VocabParallelCrossEntropy matches the unsplit cross-entropy and its gradient") {
  Communicator& w = tptest::world();
  for (MeshShape shape : tptest::factorisations(w.world_size())) {
    Mesh mesh(w, shape);
    for (std::size_t k = 0; k < kVocabCases.size(); ++k) {
      const VocabCase& c = kVocabCases[k];
      const std::string what = label("cross-entropy", mesh, c);
      const auto seed = static_cast<std::uint32_t>(7000 + 1000 * k + 100 * mesh.dp_rank());
      // Spread of +-8 so the softmax is far from uniform and the max matters.
      const std::vector<float> logits = random_floats(c.tokens * c.vocab, seed + 1, 8.0f);
      const std::vector<std::int32_t> targets = random_ids(c.tokens, c.vocab, seed + 2);
      const float grad_scale = 1024.0f;  // a loss scale
      const CeRef r = ce_reference(logits, targets, c.vocab, grad_scale);

      VocabParallelCrossEntropy ce(mesh.tp_group(), c.vocab);
      const Slice s = ce.vocab_slice();
      CHECK(s == split_slice(c.vocab, shape.tp, mesh.tp_rank()));
      const std::vector<float> local = take_cols(logits, c.tokens, c.vocab, s);
      const CrossEntropyForward f = ce.forward(local, targets);
      std::vector<float> dlogits(local.size(), -1.0f);
      ce.backward(local, targets, f, grad_scale, dlogits);
      // In place gives the same gradient.
      std::vector<float> in_place = local;
      ce.backward(in_place, targets, f, grad_scale, in_place);

      // The loss is the same on every rank of the group.
      std::vector<double> losses(static_cast<std::size_t>(shape.tp));
      mesh.tp_group().all_gather(&f.loss, losses.data(), 1, DType::f64);
      for (double l : losses) CHECK_MESSAGE(l == f.loss, what);

      CHECK_MESSAGE(std::fabs(f.loss - r.loss) <= 1e-12 * std::fabs(r.loss) + 1e-15, what);
      if (c.vocab == 1) CHECK(f.loss == 0.0);
      std::vector<double> want(c.tokens * s.size);
      for (std::size_t i = 0; i < c.tokens; ++i) {
        for (std::size_t v = 0; v < s.size; ++v) {
          want[i * s.size + v] = r.grad[i * c.vocab + s.begin + v];
        }
      }
      CHECK(count_grad_outside(dlogits, want, what) == 0);
      CHECK_MESSAGE(in_place == dlogits, what);
    }
  }
}

TEST_CASE("tied LM head: embedding slice, column-parallel logits and the parallel loss agree") {
  // logits = H E^T with E [vocab, dim] the embedding's weight: each rank
  // multiplies by its own vocabulary rows and feeds its logit columns to the
  // loss; compared with the unsplit fp64 pipeline.
  const std::size_t V = 257, D = 57, T = 9;
  Communicator& w = tptest::world();
  for (MeshShape shape : tptest::factorisations(w.world_size())) {
    Mesh mesh(w, shape);
    const auto seed = static_cast<std::uint32_t>(50000 + 100 * mesh.dp_rank());
    const std::vector<float> e = random_floats(V * D, seed + 1, 0.5f);
    const std::vector<float> h = random_floats(T * D, seed + 2);
    const std::vector<std::int32_t> targets = random_ids(T, V, seed + 3);

    VocabParallelEmbedding emb(mesh.tp_group(), V, D);
    ColumnParallelLinear head(mesh.tp_group(), D, V, /*bias=*/false);
    VocabParallelCrossEntropy ce(mesh.tp_group(), V);
    CHECK(emb.vocab_slice() == head.out_slice());
    CHECK(emb.vocab_slice() == ce.vocab_slice());
    const Slice s = emb.vocab_slice();
    const std::vector<float> e_local = take_rows(e, V, D, s);
    std::vector<float> logits(T * s.size);
    head.forward(h, T, e_local, {}, logits);
    const CrossEntropyForward f = ce.forward(logits, targets);

    // fp64 reference from fp64 logits. Each fp32 logit is within
    // g = 1.01 (D + 2) u sum_d |h e| of its fp64 value ([Note:
    // tensor-parallel test tolerance]); a token's loss has gradient
    // softmax - onehot (sum of |entries| <= 2) in its logits, so the mean
    // loss moves by at most 2 max g.
    double loss = 0, max_mag = 0;
    for (std::size_t i = 0; i < T; ++i) {
      std::vector<double> l(V);
      double m = -INFINITY;
      for (std::size_t v = 0; v < V; ++v) {
        double mag = 0;
        for (std::size_t d = 0; d < D; ++d) {
          l[v] += static_cast<double>(h[i * D + d]) * e[v * D + d];
          mag += std::fabs(static_cast<double>(h[i * D + d]) * e[v * D + d]);
        }
        m = std::max(m, l[v]);
        max_mag = std::max(max_mag, mag);
      }
      double sum = 0;
      for (double x : l) sum += std::exp(x - m);
      loss += std::log(sum) + m - l[static_cast<std::size_t>(targets[i])];
    }
    loss /= T;
    const double tol = 2 * 1.01 * (D + 2) * std::ldexp(1.0, -24) * max_mag + 1e-12;
    CHECK_MESSAGE(std::fabs(f.loss - loss) <= tol,
                  fmt::format("tied head dp={} tp={}: {} vs {} (bound {})", shape.dp, shape.tp,
                              f.loss, loss, tol));
  }
}

TEST_CASE("vocabulary-parallel layers refuse ids outside the vocabulary on every rank") {
  Communicator& w = tptest::world();
  VocabParallelEmbedding emb(w, 57, 7);
  std::vector<float> e(emb.weight_elements()), out(3 * 7), de(emb.weight_elements());
  const std::vector<std::int32_t> bad = {0, 57, 3};
  const std::vector<std::int32_t> negative = {0, 1, -1};
  std::string msg;
  try {
    emb.forward(bad, e, out);
  } catch (const InvariantError& err) {
    msg = err.what();
  }
  CHECK(msg.find("token 1 has id 57, outside the vocabulary [0, 57)") != std::string::npos);
  CHECK_THROWS_AS(emb.backward(negative, out, de), InvariantError);
  VocabParallelCrossEntropy ce(w, 57);
  std::vector<float> logits(3 * ce.local_vocab());
  msg.clear();
  try {
    ce.forward(logits, negative);
  } catch (const InvariantError& err) {
    msg = err.what();
  }
  CHECK(msg.find("token 2 has target -1") != std::string::npos);
  CHECK_THROWS_AS(VocabParallelEmbedding(w, 0, 7), ConfigError);
  CHECK_THROWS_AS(VocabParallelEmbedding(w, 7, 0), ConfigError);
  CHECK_THROWS_AS(VocabParallelCrossEntropy(w, 0), ConfigError);
  // Nobody communicated: the world still pairs up.
  double one = 1.0;
  w.all_reduce(&one, 1, DType::f64, ReduceOp::sum);
  CHECK(one == w.world_size());
}

}  // namespace
}  // namespace zeroshard::parallel
