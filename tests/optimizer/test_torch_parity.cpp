// Adam / AdamW / SGD kernels against torch.optim's float32 numbers: values
// printed by torch for a small case (parameters and exp_avg_sq bitwise,
// exp_avg within 1 ulp per step: see ulp_distance), and a float32 emulation of
// torch's single-tensor arithmetic written here, apart from the kernels,
// over 20 steps of odd-sized tensors (bitwise, reference and SIMD kernel).
#include "kernels/cpu/fp_strict.h"  // first: no FMA contraction in the emulation either

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/sgd.h"

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

// exp_avg is not bitwise torch's: torch's CPU build contracts its lerp
// `self + weight * (end - self)` into one fused multiply-add (a float32
// emulation with std::fma there reproduces all six printed exp_avg values
// and the parameters bit for bit), while our kernels round the product
// first, because they are bitwise equal to the scalar reference on every
// Highway target and the fallback target has no fused multiply-add. Each
// lerp may differ by 1 ulp, and exp_avg carries the difference into the
// next step, so after `steps` steps it is within `steps` ulp.
std::int64_t ulp_distance(float a, float b) {
  std::int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT64_MAX;
  return std::llabs(static_cast<std::int64_t>(ia) - static_cast<std::int64_t>(ib));
}

void check_within_ulps(const std::vector<float>& got, const std::vector<float>& want, std::int64_t ulps,
                       const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    INFO(std::string(what));
    CHECK(ulp_distance(got[i], want[i]) <= ulps);
  }
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
  check_within_ulps(s.m, wm, 3, "exp_avg");  // three steps
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
// (lerp: |w| < 0.5 ? a + w*(b-a) : b - (b-a)*(1-w); addcmul: self + value*t1*t2;
// addcdiv: self + value*t1/t2), not from kernels/cpu/adam.cpp.
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
      m = m + weight * (g - m);
    } else {
      m = g - (g - m) * (1.0f - weight);
    }
    v = v * f(beta2);                 // exp_avg_sq.mul_(beta2)
    v = v + f(1 - beta2) * g * g;     // .addcmul_(grad, grad, value=1 - beta2)
    float denom = std::sqrt(v);       // exp_avg_sq.sqrt()
    denom = denom / f(bias_correction2_sqrt);
    denom = denom + f(eps);           // .add_(eps)
    p = p + f(-step_size) * m / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

// torch's _single_tensor_sgd on float32 CPU tensors, as above.
void torch_sgd_emulation(std::vector<float>& p, std::vector<float>& buf, const std::vector<float>& grad,
                         double lr, double momentum, double dampening, double wd, bool nesterov,
                         bool first) {
  auto f = [](double x) { return static_cast<float>(x); };
  for (std::size_t i = 0; i < grad.size(); ++i) {
    float g = grad[i];
    if (wd != 0) g = g + f(wd) * p[i];                 // grad.add(param, alpha=weight_decay)
    if (first) {
      buf[i] = g;                                      // torch.clone(grad)
    } else {
      buf[i] = buf[i] * f(momentum);                   // buf.mul_(momentum)
      buf[i] = buf[i] + f(1 - dampening) * g;          // .add_(grad, alpha=1 - dampening)
    }
    g = nesterov ? g + f(momentum) * buf[i] : buf[i];  // grad.add(buf, alpha=momentum)
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

TEST_CASE("AdamW matches torch.optim.AdamW's printed float32 values (exp_avg within 1 ulp per step)") {
  const char* const p[3] = {"0.220031187", "-1.47817504", "2.99975872"};
  const char* const m[3] = {"0.344000012", "-0.416000009", "-0.239871964"};
  const char* const v[3] = {"0.000149992498", "0.000506169337", "0.00199983991"};
  SUBCASE("reference") { check_against_torch(run_reproducer(reference_f32, true, 0.0), p, m, v); }
  SUBCASE("SIMD") { check_against_torch(run_reproducer(simd_f32, true, 0.0), p, m, v); }
}

TEST_CASE("Adam (L2 decay) matches torch.optim.Adam's printed float32 values (exp_avg within 1 ulp per step)") {
  const char* const p[3] = {"0.220011994", "-1.47697961", "2.9980824"};
  const char* const m[3] = {"0.355640024", "-0.488721818", "-0.0936855823"};
  const char* const v[3] = {"0.000159664749", "0.000595061865", "0.00190753816"};
  SUBCASE("reference") { check_against_torch(run_reproducer(reference_f32, false, 0.1), p, m, v); }
  SUBCASE("SIMD") { check_against_torch(run_reproducer(simd_f32, false, 0.1), p, m, v); }
}

TEST_CASE("Adam/AdamW equal the torch emulation after 20 steps on odd sizes") {
  struct Case {
    bool decoupled;
    double beta1, beta2, wd;
  };
  for (const Case c : {Case{true, 0.9, 0.999, 0.01}, Case{false, 0.8, 0.9999, 0.1},
                       Case{true, 0.3, 0.99, 0.0}}) {
    for (const std::size_t n : {0, 1, 7, 57, 10001}) {
      CAPTURE(c.decoupled);
      CAPTURE(c.beta1);
      CAPTURE(n);
      std::mt19937_64 rng(n * 31 + (c.decoupled ? 1 : 0));
      const auto p0 = random_vector(n, rng, 1.0f);
      State want{p0, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
      State ref = want, simd = want;
      for (int t = 1; t <= 20; ++t) {
        const auto g = random_vector(n, rng, t % 3 == 0 ? 1e-3f : 2.0f);
        torch_adam_emulation(want, g, 1e-3, c.beta1, c.beta2, 1e-8, c.wd, t, c.decoupled);
        const auto k = kernels::make_adam_scalars(1e-3, c.beta1, c.beta2, 1e-8, c.wd, t, c.decoupled);
        kernels::adam_update_reference(ref.p.data(), g.data(), ref.m.data(), ref.v.data(), n, k);
        kernels::adam_update(simd.p.data(), g.data(), simd.m.data(), simd.v.data(), n, k);
      }
      check_bits(ref.p, want.p, "reference param");
      check_bits(ref.m, want.m, "reference exp_avg");
      check_bits(ref.v, want.v, "reference exp_avg_sq");
      check_bits(simd.p, want.p, "SIMD param");
      check_bits(simd.m, want.m, "SIMD exp_avg");
      check_bits(simd.v, want.v, "SIMD exp_avg_sq");
    }
  }
}

TEST_CASE("SGD equals the torch emulation after 20 steps on odd sizes") {
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (const Case c : {Case{0.9, 0.1, 0.01, false}, Case{0.9, 0.0, 0.05, true}}) {
    for (const std::size_t n : {0, 1, 7, 57, 10001}) {
      CAPTURE(c.nesterov);
      CAPTURE(n);
      std::mt19937_64 rng(n * 7 + 3);
      const auto p0 = random_vector(n, rng, 1.0f);
      std::vector<float> wp = p0, wb(n, 0.0f), rp = p0, rb(n, 0.0f), sp = p0, sb(n, 0.0f);
      for (int t = 1; t <= 20; ++t) {
        const auto g = random_vector(n, rng, 2.0f);
        torch_sgd_emulation(wp, wb, g, 1e-2, c.momentum, c.dampening, c.wd, c.nesterov, t == 1);
        kernels::SgdScalars k;
        k.lr = static_cast<float>(1e-2);
        k.momentum = static_cast<float>(c.momentum);
        k.one_minus_dampening = static_cast<float>(1.0 - c.dampening);
        k.weight_decay = static_cast<float>(c.wd);
        k.nesterov = c.nesterov;
        k.first_step = t == 1;
        kernels::sgd_update_reference(rp.data(), g.data(), rb.data(), n, k);
        kernels::sgd_update(sp.data(), g.data(), sb.data(), n, k);
      }
      check_bits(rp, wp, "reference param");
      check_bits(rb, wb, "reference momentum_buffer");
      check_bits(sp, wp, "SIMD param");
      check_bits(sb, wb, "SIMD momentum_buffer");
    }
  }
}
