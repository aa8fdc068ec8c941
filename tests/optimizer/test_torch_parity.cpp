// Adam / AdamW / SGD kernels against torch.optim's float32 numbers: values
// printed by torch for a small case and torch 2.15's 10-step AdamW run
// (data/torch-adamw-10steps.json; param, exp_avg and exp_avg_sq bitwise),
// and a float32 emulation of torch's single-tensor arithmetic written here,
// apart from the kernels, over 20 steps of odd-sized tensors (bitwise: the
// reference and the SIMD kernel on every target this CPU has).
#include "kernels/cpu/fp_strict.h"  // first: no FMA contraction in the emulation either

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/update/sgd.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/optimizer/torch_adamw_data.h"

using namespace zeroshard;

namespace {

float parse(const char* s) { return std::strtof(s, nullptr); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void check_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!same_bits(got[i], want[i])) {
      if (bad++ < 3) MESSAGE(std::string(what) << "[" << i << "] = " << got[i] << " want " << want[i]);
    }
  }
  CHECK_MESSAGE(bad == 0, std::string(what) << ": " << bad << " of " << got.size() << " elements differ");
}

struct State {
  std::vector<float> p, m, v;
};

using Update = void (*)(float*, const float*, float*, float*, std::size_t,
                        const kernels::AdamScalars&);

// The reproducer: torch 2.x, float32 CPU tensors, p0 = [0.25, -1.5, 3.0],
// lr 1e-2, betas (0.8, 0.9999), eps 1e-8, three steps.
State run_reproducer(Update update, bool decoupled, double wd) {
  State s{{0.25f, -1.5f, 3.0f}, std::vector<float>(3, 0.0f), std::vector<float>(3, 0.0f)};
  const float grads[3][3] = {{0.5f, -2.0f, 1e-3f}, {0.5f, 0.25f, -4.0f}, {1.0f, -1.0f, 2.0f}};
  for (int t = 1; t <= 3; ++t) {
    const auto k = kernels::make_adam_scalars(1e-2, 0.8, 0.9999, 1e-8, wd, t, decoupled);
    update(s.p.data(), grads[t - 1], s.m.data(), s.v.data(), 3, k);
  }
  return s;
}

void check_against_torch(const State& s, const char* const (&p)[3], const char* const (&m)[3],
                         const char* const (&v)[3]) {
  std::vector<float> wp, wm, wv;
  for (int i = 0; i < 3; ++i) {
    wp.push_back(parse(p[i]));
    wm.push_back(parse(m[i]));
    wv.push_back(parse(v[i]));
  }
  check_bits(s.p, wp, "param");
  check_bits(s.m, wm, "exp_avg");
  check_bits(s.v, wv, "exp_avg_sq");
}

void reference_f32(float* p, const float* g, float* m, float* v, std::size_t n,
                   const kernels::AdamScalars& s) {
  kernels::adam_update_reference(p, g, m, v, n, s);
}
void simd_f32(float* p, const float* g, float* m, float* v, std::size_t n,
              const kernels::AdamScalars& s) {
  kernels::adam_update(p, g, m, v, n, s);
}

// Emulation of torch's _single_tensor_adam on float32 CPU tensors, one tensor
// op per line; Python floats are doubles, rounded to float (f) where they
// meet the tensor. Written from torch/optim/adam.py and aten's CPU kernels
// (addcmul: self + value*t1*t2; addcdiv: self + value*t1/t2), not from
// kernels/cpu/adam/adam.cpp.
// The lerp is aten's (native/Lerp.h): |w| < 0.5 ? a + w*(b-a) : b - (b-a)*(1-w),
// evaluated as torch's CPU kernel does (native/cpu/LerpKernel.cpp), with one
// rounding of the multiply-add: its vector loop is
// fmadd(|w| < 0.5 ? w : w - 1, b - a, |w| < 0.5 ? a : b), and its scalar loop
// (the elements after the last full vector; all of them for the 3-element
// reproducer) is the expression above, contracted to the same FMA in torch's
// AVX2/AVX-512 builds. That form reproduces the six exp_avg values torch
// printed for the reproducer; the unfused form misses four of them by 1 ulp.
// addcmul's `self + value * t1 * t2` is contracted the same way:
// fma(value * t1, t2, self). That form reproduces all 97 exp_avg_sq values
// of torch 2.15's 10-step run (data/torch-adamw-10steps.json); the unfused
// one 61 (the three-element reproducer cannot tell them apart).
void torch_adam_emulation(State& st, const std::vector<float>& grad, double lr, double beta1,
                          double beta2, double eps, double wd, int step, bool decoupled) {
  auto f = [](double x) { return static_cast<float>(x); };
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const float weight = f(1 - beta1);
  for (std::size_t i = 0; i < grad.size(); ++i) {
    float g = grad[i];
    float& p = st.p[i];
    float& m = st.m[i];
    float& v = st.v[i];
    if (wd != 0) {
      if (decoupled) {
        p = p * f(1 - lr * wd);       // param.mul_(1 - lr * weight_decay)
      } else {
        g = g + f(wd) * p;            // grad.add(param, alpha=weight_decay)
      }
    }
    if (std::abs(weight) < 0.5f) {    // exp_avg.lerp_(grad, 1 - beta1)
      m = std::fma(weight, g - m, m);
    } else {
      m = std::fma(weight - 1.0f, g - m, g);
    }
    v = v * f(beta2);                 // exp_avg_sq.mul_(beta2)
    v = std::fma(f(1 - beta2) * g, g, v);  // .addcmul_(grad, grad, value=1 - beta2)
    float denom = std::sqrt(v);       // exp_avg_sq.sqrt()
    denom = denom / f(bias_correction2_sqrt);
    denom = denom + f(eps);           // .add_(eps)
    p = p + f(-step_size) * m / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

// torch's _single_tensor_sgd on float32 CPU tensors, as above (torch/optim/sgd.py:
// the momentum buffer is created on the first step as a clone of the
// gradient, and only when momentum != 0; weight decay only when wd != 0).
void torch_sgd_emulation(std::vector<float>& p, std::vector<float>& buf, const std::vector<float>& grad,
                         double lr, double momentum, double dampening, double wd, bool nesterov,
                         bool first) {
  auto f = [](double x) { return static_cast<float>(x); };
  for (std::size_t i = 0; i < grad.size(); ++i) {
    float g = grad[i];
    if (wd != 0) g = g + f(wd) * p[i];                 // grad.add(param, alpha=weight_decay)
    if (momentum != 0) {
      if (first) {
        buf[i] = g;                                    // torch.clone(grad)
      } else {
        buf[i] = buf[i] * f(momentum);                 // buf.mul_(momentum)
        buf[i] = buf[i] + f(1 - dampening) * g;        // .add_(grad, alpha=1 - dampening)
      }
      g = nesterov ? g + f(momentum) * buf[i] : buf[i];  // grad.add(buf, alpha=momentum)
    }
    p[i] = p[i] + f(-lr) * g;                          // param.add_(grad, alpha=-lr)
  }
}

std::vector<float> random_vector(std::size_t n, std::mt19937_64& rng, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("AdamW matches torch.optim.AdamW's printed float32 values bitwise") {
  const char* const p[3] = {"0.220031187", "-1.47817504", "2.99975872"};
  const char* const m[3] = {"0.344000012", "-0.416000009", "-0.239871964"};
  const char* const v[3] = {"0.000149992498", "0.000506169337", "0.00199983991"};
  SUBCASE("reference") { check_against_torch(run_reproducer(reference_f32, true, 0.0), p, m, v); }
  SUBCASE("SIMD, every target") {
    testing::for_each_target_and_threads(
        [&] { check_against_torch(run_reproducer(simd_f32, true, 0.0), p, m, v); });
  }
}

TEST_CASE("Adam (L2 decay) matches torch.optim.Adam's printed float32 values bitwise") {
  const char* const p[3] = {"0.220011994", "-1.47697961", "2.9980824"};
  const char* const m[3] = {"0.355640024", "-0.488721818", "-0.0936855823"};
  const char* const v[3] = {"0.000159664749", "0.000595061865", "0.00190753816"};
  SUBCASE("reference") { check_against_torch(run_reproducer(reference_f32, false, 0.1), p, m, v); }
  SUBCASE("SIMD, every target") {
    testing::for_each_target_and_threads(
        [&] { check_against_torch(run_reproducer(simd_f32, false, 0.1), p, m, v); });
  }
}

TEST_CASE("AdamW equals torch 2.15's 10 steps bitwise: emulation, reference, every SIMD target") {
  const testing::TorchAdamwRun torch = testing::load_torch_adamw_10steps();
  auto scalars = [&](int t) {
    return kernels::make_adam_scalars(torch.lr, torch.beta1, torch.beta2, torch.eps, torch.weight_decay,
                                      t, true);
  };
  // Runs all steps of tensor k through update and checks the three states.
  auto run = [&](std::size_t k, Update update, const std::string& what) {
    const std::size_t n = torch.p0[k].size();
    State st{torch.p0[k], std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
    for (std::size_t t = 0; t < torch.steps(); ++t) {
      update(st.p.data(), torch.grads[t][k].data(), st.m.data(), st.v.data(), n,
             scalars(static_cast<int>(t) + 1));
    }
    check_bits(st.p, torch.param[k], (what + " param").c_str());
    check_bits(st.m, torch.exp_avg[k], (what + " exp_avg").c_str());
    check_bits(st.v, torch.exp_avg_sq[k], (what + " exp_avg_sq").c_str());
  };
  for (std::size_t k = 0; k < torch.tensors(); ++k) {
    CAPTURE(k);
    // The emulation of torch's arithmetic in this file, then the kernels.
    State st{torch.p0[k], std::vector<float>(torch.p0[k].size(), 0.0f),
             std::vector<float>(torch.p0[k].size(), 0.0f)};
    for (std::size_t t = 0; t < torch.steps(); ++t) {
      torch_adam_emulation(st, torch.grads[t][k], torch.lr, torch.beta1, torch.beta2, torch.eps,
                           torch.weight_decay, static_cast<int>(t) + 1, true);
    }
    check_bits(st.p, torch.param[k], "emulation param");
    check_bits(st.m, torch.exp_avg[k], "emulation exp_avg");
    check_bits(st.v, torch.exp_avg_sq[k], "emulation exp_avg_sq");
    run(k, reference_f32, "reference");
    testing::for_each_target_and_threads([&] { run(k, simd_f32, "SIMD"); });
  }
}

TEST_CASE("Adam/AdamW equal the torch emulation after 20 steps on odd sizes") {
  struct Case {
    bool decoupled;
    double beta1, beta2, wd;
  };
  // beta1 0.3 and 0.45: lerp weight >= 0.5, torch's second lerp branch.
  for (const Case c : {Case{true, 0.9, 0.999, 0.01}, Case{false, 0.8, 0.9999, 0.1},
                       Case{true, 0.3, 0.99, 0.0}, Case{false, 0.45, 0.999, 0.05}}) {
    for (const std::size_t n : {0, 1, 7, 57, 10001}) {
      CAPTURE(c.decoupled);
      CAPTURE(c.beta1);
      CAPTURE(n);
      std::mt19937_64 rng(n * 31 + (c.decoupled ? 1 : 0));
      const auto p0 = random_vector(n, rng, 1.0f);
      std::vector<std::vector<float>> grads;
      for (int t = 1; t <= 20; ++t) grads.push_back(random_vector(n, rng, t % 3 == 0 ? 1e-3f : 2.0f));
      auto scalars = [&](int t) {
        return kernels::make_adam_scalars(1e-3, c.beta1, c.beta2, 1e-8, c.wd, t, c.decoupled);
      };
      State want{p0, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
      State ref = want;
      for (int t = 1; t <= 20; ++t) {
        const auto& g = grads[static_cast<std::size_t>(t - 1)];
        torch_adam_emulation(want, g, 1e-3, c.beta1, c.beta2, 1e-8, c.wd, t, c.decoupled);
        kernels::adam_update_reference(ref.p.data(), g.data(), ref.m.data(), ref.v.data(), n, scalars(t));
      }
      check_bits(ref.p, want.p, "reference param");
      check_bits(ref.m, want.m, "reference exp_avg");
      check_bits(ref.v, want.v, "reference exp_avg_sq");
      testing::for_each_target_and_threads([&] {
        State simd{p0, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
        for (int t = 1; t <= 20; ++t) {
          const auto& g = grads[static_cast<std::size_t>(t - 1)];
          kernels::adam_update(simd.p.data(), g.data(), simd.m.data(), simd.v.data(), n, scalars(t));
        }
        check_bits(simd.p, want.p, "SIMD param");
        check_bits(simd.m, want.m, "SIMD exp_avg");
        check_bits(simd.v, want.v, "SIMD exp_avg_sq");
      });
    }
  }
}

TEST_CASE("SGD equals the torch emulation after 20 steps on odd sizes") {
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  // Momentum with dampening, Nesterov, momentum without weight decay, and
  // plain SGD (no momentum buffer) with and without weight decay.
  for (const Case c : {Case{0.9, 0.1, 0.01, false}, Case{0.9, 0.0, 0.05, true},
                       Case{0.5, 0.5, 0.0, false}, Case{0.0, 0.0, 0.02, false},
                       Case{0.0, 0.0, 0.0, false}}) {
    for (const std::size_t n : {0, 1, 7, 57, 10001}) {
      CAPTURE(c.momentum);
      CAPTURE(c.dampening);
      CAPTURE(c.wd);
      CAPTURE(c.nesterov);
      CAPTURE(n);
      std::mt19937_64 rng(n * 7 + 3);
      const auto p0 = random_vector(n, rng, 1.0f);
      std::vector<std::vector<float>> grads;
      for (int t = 1; t <= 20; ++t) grads.push_back(random_vector(n, rng, 2.0f));
      auto scalars = [&](int t) {
        kernels::SgdScalars k;
        k.lr = static_cast<float>(1e-2);
        k.momentum = static_cast<float>(c.momentum);
        k.one_minus_dampening = static_cast<float>(1.0 - c.dampening);
        k.weight_decay = static_cast<float>(c.wd);
        k.nesterov = c.nesterov;
        k.first_step = t == 1;
        return k;
      };
      std::vector<float> wp = p0, wb(n, 0.0f), rp = p0, rb(n, 0.0f);
      for (int t = 1; t <= 20; ++t) {
        const auto& g = grads[static_cast<std::size_t>(t - 1)];
        torch_sgd_emulation(wp, wb, g, 1e-2, c.momentum, c.dampening, c.wd, c.nesterov, t == 1);
        kernels::sgd_update_reference(rp.data(), g.data(), rb.data(), n, scalars(t));
      }
      check_bits(rp, wp, "reference param");
      check_bits(rb, wb, "reference momentum_buffer");
      testing::for_each_target_and_threads([&] {
        std::vector<float> sp = p0, sb(n, 0.0f);
        for (int t = 1; t <= 20; ++t) {
          kernels::sgd_update(sp.data(), grads[static_cast<std::size_t>(t - 1)].data(), sb.data(), n,
                              scalars(t));
        }
        check_bits(sp, wp, "SIMD param");
        check_bits(sb, wb, "SIMD momentum_buffer");
      });
    }
  }
}
