// Lion and Adagrad through optimizer_update_reference (the scalars derived
// from OptimizerHyper's doubles included) against values computed here by
// hand: Lion's step moves p by exactly lr * sign(c), Adagrad's first step is
// lr * g / (|g| + eps) as torch's float32 ops round it, and several steps
// against the closed forms in double (Chen et al. 2023, Alg. 1;
// torch.optim.Adagrad's documented algorithm); the mixed-precision entry
// point against the fp32 one.
#include <cmath>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include "core/dtype.h"
#include "optimizer/optimizer.h"

using namespace zeroshard;

namespace {

OptimizerHyper lion(double lr, double wd) {
  OptimizerHyper h;
  h.kind = OptimizerKind::lion;
  h.lr = lr;
  h.weight_decay = wd;
  h.beta1 = 0.9;
  h.beta2 = 0.99;
  return h;
}

OptimizerHyper adagrad(double lr, double wd) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adagrad;
  h.lr = lr;
  h.weight_decay = wd;
  h.eps = 1e-10;
  return h;
}

}  // namespace

TEST_CASE("Lion: p moves by exactly lr * sign(beta1 * m + (1 - beta1) * g), 0 where c is 0") {
  const OptimizerHyper h = lion(1e-2, 0.0);
  std::vector<float> p = {1.0f, -0.5f, 0.25f, 3.0f}, m = {0.0f, 0.0f, 1.0f, 0.0f};
  // c = 0.1 * 2 > 0, 0.1 * -3 < 0, 0.9 * 1 + 0.1 * -1 > 0, 0.
  const std::vector<float> g = {2.0f, -3.0f, -1.0f, 0.0f};
  float* st[1] = {m.data()};
  optimizer_update_reference(h, h.lr, h.weight_decay, 1, 1.0f, p.data(), g.data(), st, 4);
  const float lr = 1e-2f;
  CHECK(p[0] == 1.0f - lr);   // c > 0: down by lr
  CHECK(p[1] == -0.5f + lr);  // c < 0: up by lr
  CHECK(p[2] == 0.25f - lr);  // c = 0.9 - 0.1 > 0
  CHECK(p[3] == 3.0f);        // c = 0: sign 0, p unchanged (wd = 0)
  // m = beta2 * m + (1 - beta2) * g in float, 1 - beta2 in float (lion.h).
  const float b2 = 0.99f, omb2 = 1.0f - b2;
  CHECK(m[0] == b2 * 0.0f + omb2 * 2.0f);
  CHECK(m[2] == b2 * 1.0f + omb2 * -1.0f);
  CHECK(m[3] == 0.0f);
}

TEST_CASE("Lion: decoupled weight decay p * f(1 - lr * wd) and the closed form over 5 steps") {
  const double lr = 3e-3, wd = 0.2, b1 = 0.9, b2 = 0.99;
  const OptimizerHyper h = lion(lr, wd);
  std::vector<double> pd = {1.0, -2.0, 0.5}, md(3, 0.0);
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, m(3, 0.0f);
  for (int t = 1; t <= 5; ++t) {
    const std::vector<float> g = {0.5f / t, t % 2 ? -0.25f : 0.75f, 1e-3f * t};
    for (int i = 0; i < 3; ++i) {
      const double c = b1 * md[i] + (1 - b1) * g[i];
      pd[i] = pd[i] * (1 - lr * wd) - lr * (c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0);
      md[i] = b2 * md[i] + (1 - b2) * g[i];
    }
    float* st[1] = {m.data()};
    optimizer_update_reference(h, h.lr, h.weight_decay, t, 1.0f, p.data(), g.data(), st, 3);
    if (t == 1) CHECK(p[0] == 1.0f * static_cast<float>(1.0 - lr * wd) - static_cast<float>(lr));
  }
  for (int i = 0; i < 3; ++i) {
    CHECK(p[i] == doctest::Approx(pd[i]).epsilon(1e-6));
    CHECK(m[i] == doctest::Approx(md[i]).epsilon(1e-5));
  }
}

TEST_CASE("Adagrad: the first step is lr * g / (|g| + eps), torch's float32 ops") {
  const OptimizerHyper h = adagrad(1e-2, 0.0);
  std::vector<float> p = {1.0f, -2.0f, 0.5f, 0.0f}, sum(4, 0.0f);
  const std::vector<float> g = {0.5f, -3.0f, 1e-3f, 0.0f};
  float* st[1] = {sum.data()};
  optimizer_update_reference(h, h.lr, h.weight_decay, 1, 1.0f, p.data(), g.data(), st, 4);
  const float neg_lr = -1e-2f, eps = 1e-10f;
  const float p0[4] = {1.0f, -2.0f, 0.5f, 0.0f};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    const float s = g[i] * g[i];
    CHECK(sum[i] == s);
    CHECK(p[i] == p0[i] + (neg_lr * g[i]) / (std::sqrt(s) + eps));  // bit for bit
  }
  CHECK(p[0] == doctest::Approx(1.0 - 1e-2).epsilon(1e-7));  // |g| >> eps: a step of exactly lr
  CHECK(p[1] == doctest::Approx(-2.0 + 1e-2).epsilon(1e-7));
  CHECK(p[3] == 0.0f);  // g = 0: 0 / eps
}

TEST_CASE("Adagrad: lr_decay, L2 weight decay, initial_accumulator_value against the closed form") {
  const double lr = 5e-2, wd = 0.1, lr_decay = 0.3, iav = 0.25, eps = 1e-10;
  OptimizerHyper h = adagrad(lr, wd);
  h.lr_decay = lr_decay;
  h.initial_accumulator_value = iav;
  std::vector<double> pd = {1.0, -2.0, 0.5}, sd(3, iav);
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, sum(3, 0.0f);  // the engine's states start at zero
  for (int t = 1; t <= 4; ++t) {
    const std::vector<float> g = {0.5f / t, t % 2 ? -0.25f : 0.75f, 2.0f};
    const double clr = lr / (1 + (t - 1) * lr_decay);
    for (int i = 0; i < 3; ++i) {
      const double gi = g[i] + wd * pd[i];
      sd[i] += gi * gi;
      pd[i] -= clr * gi / (std::sqrt(sd[i]) + eps);
    }
    float* st[1] = {sum.data()};
    optimizer_update_reference(h, h.lr, h.weight_decay, t, 1.0f, p.data(), g.data(), st, 3);
    if (t == 1) {
      // torch: state_sum = full(iav) + g * g, exactly as float.
      const float g0 = g[0] + static_cast<float>(wd) * 1.0f;
      CHECK(sum[0] == static_cast<float>(iav) + g0 * g0);
    }
  }
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(p[i] == doctest::Approx(pd[i]).epsilon(1e-6));
    CHECK(sum[i] == doctest::Approx(sd[i]).epsilon(1e-6));
  }
}

TEST_CASE("Lion and Adagrad: grad_scale multiplies the gradient first") {
  for (const OptimizerHyper& h : {lion(1e-2, 0.1), adagrad(1e-2, 0.1)}) {
    CAPTURE(optimizer_name(h.kind));
    std::vector<float> p1 = {1.0f, -2.0f}, p2 = p1, s1(2, 0.0f), s2(2, 0.0f);
    const std::vector<float> g = {0.75f, -1.5f}, half = {0.375f, -0.75f};
    float* a[1] = {s1.data()};
    float* b[1] = {s2.data()};
    optimizer_update_reference(h, h.lr, h.weight_decay, 1, 0.5f, p1.data(), g.data(), a, 2);
    optimizer_update_reference(h, h.lr, h.weight_decay, 1, 1.0f, p2.data(), half.data(), b, 2);
    CHECK(p1 == p2);
    CHECK(s1 == s2);
  }
}

TEST_CASE("Lion and Adagrad: the mixed-precision update equals the fp32 one on widened gradients") {
  for (const OptimizerHyper& h : {lion(1e-3, 0.05), adagrad(1e-2, 0.05)}) {
    for (const DType gd : {DType::bf16, DType::f16}) {
      CAPTURE(optimizer_name(h.kind));
      CAPTURE(dtype_name(gd));
      const std::size_t n = 57;
      std::vector<std::uint16_t> g16(n), copy(n);
      std::vector<float> gw(n), p1(n), p2(n), s1(n, 0.0f), s2(n, 0.0f);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = std::sin(0.37f * static_cast<float>(i)) * 0.8f;
        g16[i] = gd == DType::bf16 ? float_to_bf16(v) : float_to_f16(v);
        gw[i] = gd == DType::bf16 ? bf16_to_float(g16[i]) : f16_to_float(g16[i]);
        p1[i] = p2[i] = std::cos(0.11f * static_cast<float>(i));
      }
      for (std::int64_t t = 1; t <= 3; ++t) {
        float* a[1] = {s1.data()};
        float* b[1] = {s2.data()};
        optimizer_update_mixed(h, h.lr, h.weight_decay, t, 0.5f, p1.data(), g16.data(), gd, a, copy.data(),
                               DType::bf16, n);
        optimizer_update_reference(h, h.lr, h.weight_decay, t, 0.5f, p2.data(), gw.data(), b, n);
      }
      CHECK(p1 == p2);
      CHECK(s1 == s2);
      for (std::size_t i = 0; i < n; ++i) CHECK(copy[i] == float_to_bf16(p2[i]));
    }
  }
}

TEST_CASE("Lion and Adagrad: one state each, named as torch / DeepSpeed do") {
  CHECK(optimizer_name(OptimizerKind::lion) == "Lion");
  CHECK(optimizer_name(OptimizerKind::adagrad) == "Adagrad");
  const OptimizerHyper l = lion(1e-4, 0.0), a = adagrad(1e-2, 0.0);
  CHECK(optimizer_state_count(l) == 1);
  CHECK(optimizer_state_name(l, 0) == "exp_avg");
  CHECK(optimizer_state_count(a) == 1);
  CHECK(optimizer_state_name(a, 0) == "sum");
  CHECK_THROWS(optimizer_state_name(a, 1));
  float p = 1.0f, s = 0.0f, g = 1.0f;
  float* st[1] = {&s};
  CHECK_THROWS(optimizer_update_reference(a, 1e-2, 0.0, 0, 1.0f, &p, &g, st, 1));
  CHECK_THROWS(optimizer_update(l, 1e-2, 0.0, 0, 1.0f, &p, &g, st, 1));
}
