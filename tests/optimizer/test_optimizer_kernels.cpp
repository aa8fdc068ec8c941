// Optimizer kernels against their scalar references (bitwise) and against
// closed-form values computed here in double precision.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/reduce_ops.h"
#include "kernels/cpu/update/sgd.h"
#include "optimizer/optimizer.h"

using namespace zeroshard;

namespace {

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

OptimizerHyper hyper(OptimizerKind kind) {
  OptimizerHyper h;
  h.kind = kind;
  h.lr = 1e-2f;
  h.weight_decay = 0.05f;
  h.momentum = kind == OptimizerKind::sgd ? 0.9f : 0.0f;
  return h;
}

}  // namespace

TEST_CASE("optimizer_update equals the scalar reference bit for bit") {
  for (auto kind : {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::sgd, OptimizerKind::lion,
                    OptimizerKind::adagrad}) {
    for (bool nesterov : {false, true}) {
      // The second pass: SGD's Nesterov form; Adagrad's lr_decay and initial accumulator.
      if (nesterov && kind != OptimizerKind::sgd && kind != OptimizerKind::adagrad) continue;
      for (std::size_t n : {0, 1, 7, 57, 10001}) {
        CAPTURE(optimizer_name(kind));
        CAPTURE(n);
        OptimizerHyper h = hyper(kind);
        h.nesterov = nesterov && kind == OptimizerKind::sgd;
        if (nesterov && kind == OptimizerKind::adagrad) {
          h.lr_decay = 0.1;
          h.initial_accumulator_value = 0.5;
        }
        const int ns = optimizer_state_count(h);
        std::vector<float> p1 = random_vector(n, 1, 1.0f), p2 = p1;
        std::vector<std::vector<float>> s1(ns, std::vector<float>(n, 0.0f)), s2 = s1;
        for (std::int64_t step = 1; step <= 4; ++step) {
          const std::vector<float> g = random_vector(n, 100 + step, 0.5f);
          std::vector<float*> st1, st2;
          for (int k = 0; k < ns; ++k) {
            st1.push_back(s1[k].data());
            st2.push_back(s2[k].data());
          }
          optimizer_update(h, h.lr, h.weight_decay, step, 0.75f, p1.data(), g.data(), st1.data(), n);
          optimizer_update_reference(h, h.lr, h.weight_decay, step, 0.75f, p2.data(), g.data(),
                                     st2.data(), n);
        }
        CHECK(bitwise_equal(p1, p2));
        for (int k = 0; k < ns; ++k) CHECK(bitwise_equal(s1[k], s2[k]));
      }
    }
  }
}

TEST_CASE("AdamW reference matches the closed form of torch.optim.AdamW") {
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  std::vector<double> p = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  std::vector<float> pf = {1.0f, -2.0f, 0.5f}, mf(3, 0.0f), vf(3, 0.0f);
  const std::vector<float> g(3, 1e-6f);
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < 3; ++i) {
      const double gd = 1e-6;
      p[i] *= 1.0 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gd;
      v[i] = b2 * v[i] + (1 - b2) * gd * gd;
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
    float* st[2] = {mf.data(), vf.data()};
    optimizer_update_reference(h, h.lr, h.weight_decay, t, 1.0f, pf.data(), g.data(), st, 3);
  }
  for (int i = 0; i < 3; ++i) CHECK(pf[i] == doctest::Approx(p[i]).epsilon(1e-6));
}

TEST_CASE("sum_of_squares agrees with its reference") {
  for (std::size_t n : {0, 1, 7, 57, 10001}) {
    const auto x = random_vector(n, 7, 3.0f);
    CHECK(kernels::sum_of_squares(x.data(), n) ==
          doctest::Approx(kernels::sum_of_squares_reference(x.data(), n)).epsilon(1e-12));
  }
  const std::vector<float> x = {3, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2};
  CHECK(kernels::sum_of_squares(x.data(), x.size()) == 20.0);
}

TEST_CASE("optimizer state names and counts") {
  OptimizerHyper h;
  CHECK(optimizer_state_count(h) == 2);
  CHECK(optimizer_state_name(h, 0) == "exp_avg");
  CHECK(optimizer_state_name(h, 1) == "exp_avg_sq");
  h.kind = OptimizerKind::sgd;
  CHECK(optimizer_state_count(h) == 0);
  h.momentum = 0.9f;
  CHECK(optimizer_state_count(h) == 1);
  CHECK(optimizer_state_name(h, 0) == "momentum_buffer");
}
