// Engine values against closed forms, at this process group's world size and
// every stage: AdamW/Adam/SGD/Lion/Adagrad from the starting point, odd shapes
// and empty shards, the global gradient norm and clipping, parameter groups.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// Closed form, in double precision, of `steps` updates of p0 with a constant
// gradient g, following the torch.optim documentation.
std::vector<double> closed_form(const OptimizerHyper& h, std::vector<double> p, double g, int steps) {
  const double lr = h.lr, wd = h.weight_decay, b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  std::vector<double> m(p.size(), 0.0), v(p.size(), 0.0);
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      double gi = g;
      if (h.kind == OptimizerKind::lion) {  // Chen et al. 2023, Alg. 1, decoupled decay
        const double c = b1 * m[i] + (1 - b1) * gi;
        p[i] = p[i] * (1.0 - lr * wd) - lr * (c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0);
        m[i] = b2 * m[i] + (1 - b2) * gi;
        continue;
      }
      if (h.kind == OptimizerKind::adagrad) {  // torch.optim.Adagrad
        gi += wd * p[i];
        if (t == 1) v[i] = h.initial_accumulator_value;
        v[i] += gi * gi;
        p[i] -= lr / (1 + (t - 1) * h.lr_decay) * gi / (std::sqrt(v[i]) + eps);
        continue;
      }
      if (h.kind == OptimizerKind::adamw) p[i] *= 1.0 - lr * wd;
      if (h.kind != OptimizerKind::adamw) gi += wd * p[i];
      if (h.kind == OptimizerKind::sgd) {
        if (h.momentum != 0) {
          m[i] = t == 1 ? gi : h.momentum * m[i] + (1 - h.dampening) * gi;
          gi = h.nesterov ? gi + h.momentum * m[i] : m[i];
        }
        p[i] -= lr * gi;
        continue;
      }
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  return p;
}

}  // namespace

TEST_CASE("AdamW, Adam, SGD, Lion and Adagrad equal their closed forms when sharded") {
  OptimizerHyper adamw;
  adamw.kind = OptimizerKind::adamw;
  adamw.lr = 1e-3f;
  adamw.weight_decay = 0.01f;
  OptimizerHyper adam = adamw;
  adam.kind = OptimizerKind::adam;
  OptimizerHyper sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.lr = 1e-3f;
  sgd.weight_decay = 0.01f;
  sgd.momentum = 0.9f;
  OptimizerHyper nesterov = sgd;
  nesterov.nesterov = true;
  OptimizerHyper lion = adamw;
  lion.kind = OptimizerKind::lion;
  lion.beta2 = 0.99;
  OptimizerHyper adagrad;
  adagrad.kind = OptimizerKind::adagrad;
  adagrad.lr = 1e-2;
  adagrad.eps = 1e-10;
  adagrad.weight_decay = 0.01;
  adagrad.lr_decay = 0.1;
  adagrad.initial_accumulator_value = 0.1;
  for (const OptimizerHyper& h : {adamw, adam, sgd, nesterov, lion, adagrad}) {
    const std::vector<double> want = closed_form(h, {1.0, -2.0, 0.5}, 1e-6, 3);
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(optimizer_name(h.kind));
      CAPTURE(h.nesterov);
      CAPTURE(stage);
      Engine e(make_config(stage, h), world());
      const ParamId p = declare_single_parameter(e, {1.0f, -2.0f, 0.5f});
      for (int s = 0; s < 3; ++s) {
        for (float& g : e.grad(p)) g += 1e-6f;  // every rank: mean gradient 1e-6
        e.step();
      }
      const std::vector<float> got = e.gather_parameter(p);
      for (int i = 0; i < 3; ++i) CHECK(close(got[i], want[i], 1e-6));
    }
  }
}

namespace {

// Gradient element i of parameter p at step s on rank r: the mean over
// ranks is g(p, i, s) * (N + 1) / 2.
float rank_grad(int p, std::size_t i, int s, int r) {
  return std::sin(0.7f * static_cast<float>(i) + 1.3f * p + 0.4f * s) * static_cast<float>(r + 1);
}

// The engine at every stage against the scalar reference update applied to
// the mean gradient, unsharded; group 1 overrides lr and weight_decay.
void check_shapes_with(const OptimizerHyper& h, const std::vector<std::vector<std::int64_t>>& shapes,
                       const std::vector<int>& unit_of, const std::vector<int>& group_of) {
  const int n = world().world_size(), r = world().rank();
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(optimizer_name(h.kind));
    CAPTURE(stage);
    Engine e(make_config(stage, h), world());
    const GroupId g1 = e.add_param_group("second", {.lr = 5e-3f, .weight_decay = 0.0f});
    std::vector<UnitId> units;
    for (int u = 0; u <= *std::max_element(unit_of.begin(), unit_of.end()); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
    }
    std::vector<ParamId> ids;
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      ids.push_back(e.add_parameter(units[unit_of[p]], fmt::format("p{}", p), shapes[p], group_of[p] ? g1 : 0));
    }
    e.finalize();
    // Reference state, full and unsharded.
    std::vector<std::vector<float>> ref(shapes.size()), m(shapes.size()), v(shapes.size());
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      const std::size_t numel = e.layout().param(ids[p]).numel;
      for (std::size_t i = 0; i < numel; ++i) ref[p].push_back(0.1f * static_cast<float>(i % 7) - 0.3f);
      m[p].assign(numel, 0.0f);
      v[p].assign(numel, 0.0f);
      e.set_parameter(ids[p], ref[p]);
    }
    for (int s = 1; s <= 2; ++s) {
      for (std::size_t p = 0; p < shapes.size(); ++p) {
        auto g = e.grad(ids[p]);
        for (std::size_t i = 0; i < g.size(); ++i) g[i] += rank_grad(static_cast<int>(p), i, s, r);
        std::vector<float> mean(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) {
          float sum = 0;
          for (int q = 0; q < n; ++q) sum += rank_grad(static_cast<int>(p), i, s, q);
          mean[i] = sum;
        }
        float* st[2] = {m[p].data(), v[p].data()};
        const float lr = group_of[p] ? 5e-3f : h.lr, wd = group_of[p] ? 0.0f : h.weight_decay;
        optimizer_update_reference(h, lr, wd, s, 1.0f / static_cast<float>(n), ref[p].data(), mean.data(), st,
                                   ref[p].size());
      }
      e.step();
    }
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      CAPTURE(p);
      CHECK(e.layout().param(ids[p]).shape == shapes[p]);
      check_close(e.gather_parameter(ids[p]), ref[p], 1e-6, 1e-7, fmt::format("p{}", p));
    }
  }
}

// check_shapes_with for AdamW, Lion (one state, sign update) and Adagrad
// (one state, lr_decay and an initial accumulator).
void check_shapes(const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<int>& unit_of,
                  const std::vector<int>& group_of) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  check_shapes_with(h, shapes, unit_of, group_of);
  h.kind = OptimizerKind::lion;
  check_shapes_with(h, shapes, unit_of, group_of);
  h.kind = OptimizerKind::adagrad;
  h.eps = 1e-10;
  h.lr_decay = 0.05;
  h.initial_accumulator_value = 0.1;
  check_shapes_with(h, shapes, unit_of, group_of);
}

}  // namespace

TEST_CASE("odd shapes: [8], [0, 8], [24] and a separate group [1]") {
  check_shapes({{8}, {0, 8}, {24}, {1}}, {0, 0, 1, 2}, {0, 0, 0, 1});
}

TEST_CASE("odd shapes: [7, 5], [11], [3], [8] (57 elements) in one unit and in four") {
  check_shapes({{7, 5}, {11}, {3}, {8}}, {0, 0, 0, 0}, {0, 1, 0, 1});
  check_shapes({{7, 5}, {11}, {3}, {8}}, {0, 1, 2, 3}, {0, 0, 1, 1});
}

TEST_CASE("global norm is sqrt(20) at every stage; max norm 1 scales by 1/sqrt(20)") {
  OptimizerHyper sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.lr = 1.0f;
  const std::vector<std::vector<float>> g = {{3, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1}, {2}};
  for (double clip : {0.0, 1.0}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(stage);
      CAPTURE(clip);
      Engine e(make_config(stage, sgd, 1, clip), world());
      const UnitId u0 = e.add_unit("a"), u1 = e.add_unit("b");
      const ParamId p1 = e.add_parameter(u0, "g1", {5}), p2 = e.add_parameter(u0, "g2", {7}),
                    p3 = e.add_parameter(u1, "g3", {1});
      e.finalize();
      const ParamId ids[3] = {p1, p2, p3};
      for (int k = 0; k < 3; ++k) std::copy(g[k].begin(), g[k].end(), e.grad(ids[k]).begin());
      const StepResult res = e.step();
      CHECK(res.grad_norm == doctest::Approx(std::sqrt(20.0)).epsilon(1e-12));
      const double scale = clip > 0 ? 1.0 / (std::sqrt(20.0) + 1e-6) : 1.0;
      CHECK(res.clip_coef == doctest::Approx(scale).epsilon(1e-12));
      for (int k = 0; k < 3; ++k) {
        const std::vector<float> got = e.gather_parameter(ids[k]);
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(-g[k][i] * scale).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("parameter groups: zero gradient decays weights exactly, no-decay biases unchanged") {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 0.1f;
  h.weight_decay = 0.01f;
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    Engine e(make_config(stage, h), world());
    const GroupId no_decay = e.add_param_group("no_decay", {.weight_decay = 0.0f});
    const UnitId u = e.add_unit("layer");
    const ParamId w = e.add_parameter(u, "layer.weight", {3, 4});
    const ParamId b = e.add_parameter(u, "layer.bias", {3}, no_decay);
    e.finalize();
    std::vector<float> wv(12), bv(3);
    for (int i = 0; i < 12; ++i) wv[i] = 0.37f * static_cast<float>(i) - 1.9f;
    for (int i = 0; i < 3; ++i) bv[i] = 0.11f * static_cast<float>(i) + 0.123f;
    e.set_parameter(w, wv);
    e.set_parameter(b, bv);
    e.step();
    const float factor = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
    const std::vector<float> w1 = e.gather_parameter(w), b1 = e.gather_parameter(b);
    for (int i = 0; i < 12; ++i) CHECK(w1[i] == wv[i] * factor);
    CHECK(std::memcmp(b1.data(), bv.data(), 3 * sizeof(float)) == 0);
  }
}
