// The vectorised, multi-threaded CPU kernels against their scalar references,
// element by element and bit for bit: every SIMD target this CPU has, 1 and 2
// threads, sizes around the vector widths, misaligned pointers, and special
// values (Inf, NaN, subnormals, rounding halfway cases, max). Arithmetic
// kernels may differ from the reference only in the payload of a NaN result
// ([Note: NaN payloads] in kernel_test_util.h); conversions not at all.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernels/cpu/update/adagrad.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/grad_check.h"
#include "kernels/cpu/update/lion.h"
#include "kernels/cpu/reduce_ops.h"
#include "kernels/cpu/update/sgd.h"
#include "kernel_test_util.h"
#include "optimizer/optimizer.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr DType kGradDtypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

// Inputs of one optimizer check: fp32 arrays (param, states) and a gradient
// in every dtype, all at the same misalignment.
struct OptimizerCase {
  OptimizerCase(std::size_t n_, std::size_t offset, std::uint64_t seed)
      : n(n_),
        param(test_floats(n_, seed, 1.0f, 23)),
        state0(test_floats(n_, seed + 1, 0.1f, 29)),
        state1(test_floats(n_, seed + 2, 0.01f, 31)),
        grad(test_floats(n_, seed + 3, 0.5f, 19)),
        offset_(offset) {
    for (auto& v : state1) v = std::fabs(v);  // exp_avg_sq >= 0 as in use
  }
  // grad as an array of dtype at this case's misalignment.
  std::vector<unsigned char> grad_bytes(DType dtype) const {
    std::vector<unsigned char> b((n + offset_ + 16) * 4);
    kernels::convert_reference(grad.data(), DType::f32, b.data() + offset_ * dtype_size(dtype),
                               dtype, n);
    return b;
  }
  const void* grad_ptr(const std::vector<unsigned char>& b, DType dtype) const {
    return b.data() + offset_ * dtype_size(dtype);
  }
  std::size_t n;
  std::vector<float> param, state0, state1, grad;
  std::size_t offset_;
};

// Runs `kernel` and `reference` on identical copies of the inputs and checks
// the fp32 arrays and the optional copy bit for bit. Each callable receives
// (param, grad, grad_dtype, state0, state1, copy, copy_dtype, n).
template <class K, class R>
void check_optimizer(const OptimizerCase& c, K&& kernel, R&& reference, std::size_t offset) {
  for (const DType gd : kGradDtypes) {
    for (const int copy_kind : {0, 1, 2}) {
      const DType cd = copy_kind == 2 ? DType::f16 : DType::bf16;
      const std::string dtype_s = std::string(dtype_name(gd));
      CAPTURE(dtype_s);
      CAPTURE(copy_kind);
      const auto gbytes = c.grad_bytes(gd);
      const void* g = c.grad_ptr(gbytes, gd);
      OffsetArray<float> p1(c.n, offset), p2(c.n, offset), a1(c.n, offset), a2(c.n, offset),
          b1(c.n, offset), b2(c.n, offset);
      OffsetArray<std::uint16_t> c1(c.n, offset), c2(c.n, offset);
      p1.assign(c.param), p2.assign(c.param), a1.assign(c.state0), a2.assign(c.state0);
      b1.assign(c.state1), b2.assign(c.state1);
      void* copy1 = copy_kind == 0 ? nullptr : c1.data();
      void* copy2 = copy_kind == 0 ? nullptr : c2.data();
      for (int step = 0; step < 2; ++step) {  // twice: states evolve through both paths
        kernel(p1.data(), g, gd, a1.data(), b1.data(), copy1, cd, c.n);
        reference(p2.data(), g, gd, a2.data(), b2.data(), copy2, cd, c.n);
      }
      check_bitwise(p1.data(), p2.data(), c.n, "param", true);
      check_bitwise(a1.data(), a2.data(), c.n, "state0", true);
      check_bitwise(b1.data(), b2.data(), c.n, "state1", true);
      check_bitwise(c1.data(), c2.data(), c.n, "param_copy", true, cd);
    }
  }
}

// check_optimizer on every SIMD target and thread count, every size of
// kSizes at every offset of kOffsets; inputs seeded by seed_mul * n + off.
template <class K, class R>
void check_optimizer_everywhere(std::size_t seed_mul, K&& kernel, R&& reference) {
  for_each_target_and_threads([&] {
    for (const std::size_t n : kSizes) {
      for (const std::size_t off : kOffsets) {
        CAPTURE(n);
        CAPTURE(off);
        check_optimizer(OptimizerCase(n, off, seed_mul * n + off), kernel, reference, off);
      }
    }
  });
}

TEST_CASE("adam_update (AdamW and Adam) equals adam_update_reference bit for bit") {
  for (const bool decoupled : {true, false}) {
  for (const double beta1 : {0.9, 0.3}) {  // both branches of torch's lerp
    const kernels::AdamScalars s =
        kernels::make_adam_scalars(1e-2, beta1, 0.999, 1e-8, 0.1, 2, decoupled, 0.75f);
    CAPTURE(decoupled);
    CAPTURE(beta1);
    check_optimizer_everywhere(
        17,
        [&](float* p, const void* g, DType gd, float* m, float* v, void* cp, DType cd,
            std::size_t k) { kernels::adam_update(p, g, gd, m, v, cp, cd, k, s); },
        [&](float* p, const void* g, DType gd, float* m, float* v, void* cp, DType cd,
            std::size_t k) { kernels::adam_update_reference(p, g, gd, m, v, cp, cd, k, s); });
  }
  }
}

TEST_CASE("sgd_update equals sgd_update_reference bit for bit") {
  struct Mode {
    float momentum;
    bool nesterov, first;
  };
  for (const Mode mode : {Mode{0.0f, false, false}, Mode{0.9f, false, true},
                          Mode{0.9f, false, false}, Mode{0.9f, true, true}, Mode{0.9f, true, false}}) {
    kernels::SgdScalars s;
    s.lr = 0.05f;
    s.momentum = mode.momentum;
    s.one_minus_dampening = mode.nesterov ? 1.0f : static_cast<float>(1.0 - 0.1);
    s.weight_decay = 0.01f;
    s.grad_scale = 0.5f;
    s.nesterov = mode.nesterov;
    s.first_step = mode.first;
    CAPTURE(mode.momentum);
    CAPTURE(mode.nesterov);
    CAPTURE(mode.first);
    check_optimizer_everywhere(
        31,
        [&](float* p, const void* g, DType gd, float* b, float*, void* cp, DType cd,
            std::size_t k) { kernels::sgd_update(p, g, gd, b, cp, cd, k, s); },
        [&](float* p, const void* g, DType gd, float* b, float*, void* cp, DType cd,
            std::size_t k) { kernels::sgd_update_reference(p, g, gd, b, cp, cd, k, s); });
  }
}

TEST_CASE("lion_update equals lion_update_reference bit for bit") {
  kernels::LionScalars s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.decay_factor = static_cast<float>(1.0 - 1e-3 * 0.1);
  s.grad_scale = 2.0f;
  check_optimizer_everywhere(
      43,
      [&](float* p, const void* g, DType gd, float* m, float*, void* cp, DType cd,
          std::size_t k) { kernels::lion_update(p, g, gd, m, cp, cd, k, s); },
      [&](float* p, const void* g, DType gd, float* m, float*, void* cp, DType cd,
          std::size_t k) { kernels::lion_update_reference(p, g, gd, m, cp, cd, k, s); });
}

TEST_CASE("adagrad_update equals adagrad_update_reference bit for bit") {
  // Later steps with and without L2 decay, and a first step that starts the
  // sum at initial_accumulator_value (kernels/cpu/update/adagrad.h).
  struct Case {
    double weight_decay, lr_decay, initial;
    long long step;
  };
  for (const Case& k : {Case{0.0, 0.0, 0.0, 3}, Case{0.1, 0.2, 0.0, 4}, Case{0.05, 0.0, 0.3, 1}}) {
    const auto s = kernels::make_adagrad_scalars(1e-2, k.lr_decay, 1e-10, k.weight_decay, k.initial, k.step, 0.75f);
    CAPTURE(k.weight_decay);
    CAPTURE(k.step);
    // The sum is state1 (non-negative, as a sum of squares is).
    check_optimizer_everywhere(
        47,
        [&](float* p, const void* g, DType gd, float*, float* sum, void* cp, DType cd, std::size_t e) {
          kernels::adagrad_update(p, g, gd, sum, cp, cd, e, s);
        },
        [&](float* p, const void* g, DType gd, float*, float* sum, void* cp, DType cd, std::size_t e) {
          kernels::adagrad_update_reference(p, g, gd, sum, cp, cd, e, s);
        });
  }
}

TEST_CASE("make_adagrad_scalars rounds torch's Python floats once") {
  const auto s = kernels::make_adagrad_scalars(1e-2, 0.5, 1e-10, 0.1, 0.25, 3, 2.0f);
  CHECK(s.neg_clr == static_cast<float>(-(1e-2 / (1.0 + 2 * 0.5))));
  CHECK(s.eps == 1e-10f);
  CHECK(s.weight_decay == 0.1f);
  CHECK(s.initial_sum == 0.25f);
  CHECK(s.grad_scale == 2.0f);
  CHECK_FALSE(s.first_step);
  CHECK(kernels::make_adagrad_scalars(1e-2, 0.5, 1e-10, 0.0, 0.0, 1).first_step);
  CHECK(kernels::make_adagrad_scalars(1e-2, 0.5, 1e-10, 0.0, 0.0, 1).neg_clr == -1e-2f);
  CHECK_THROWS_AS(kernels::make_adagrad_scalars(1e-2, 0.0, 1e-10, 0.0, 0.0, 0), InvariantError);
}

TEST_CASE("lion_update_reference follows Chen et al. 2023 on one element") {
  kernels::LionScalars s;
  s.lr = 0.1f;
  s.beta1 = 0.9f;
  s.beta2 = 0.99f;
  s.weight_decay = 0.5f;
  s.decay_factor = static_cast<float>(1.0 - 0.1 * 0.5);
  float p[3] = {1.0f, 1.0f, 1.0f}, m[3] = {0.0f, 0.0f, 1.0f};
  const float g[3] = {2.0f, -2.0f, -9.0f};  // c = 0.2, -0.2, 0.9 - 0.9 = 0
  kernels::lion_update_reference(p, g, DType::f32, m, nullptr, DType::bf16, 3, s);
  CHECK(p[0] == doctest::Approx(0.95 - 0.1));
  CHECK(p[1] == doctest::Approx(0.95 + 0.1));
  CHECK(m[0] == doctest::Approx(0.01 * 2.0));
  CHECK(m[2] == doctest::Approx(0.99 - 0.09));
}

TEST_CASE("unscale_and_check and check_gradients equal grad_check_reference bit for bit") {
  for (const float scale : {1.0f, 0.125f, 3.0e-5f, 1e30f}) {
    for (const std::size_t every : {0, 97}) {  // without / with Inf, NaN and friends
      CAPTURE(scale);
      CAPTURE(every);
      for_each_target_and_threads([&] {
        for (const std::size_t n : kSizes) {
          for (const std::size_t off : kOffsets) {
            CAPTURE(n);
            CAPTURE(off);
            const auto x = test_floats(n, 7 * n + off, 3.0f, every);
            OffsetArray<float> a(n, off), b(n, off);
            a.assign(x), b.assign(x);
            const auto r1 = kernels::unscale_and_check(a.data(), n, scale);
            const auto r2 = kernels::grad_check_reference(b.data(), DType::f32, n, scale, true);
            check_bitwise(a.data(), b.data(), n, "unscaled grad", false);
            check_bitwise(&r1.sum_of_squares, &r2.sum_of_squares, 1, "sum_of_squares", true);
            CHECK(r1.found_inf_or_nan == r2.found_inf_or_nan);
            for (const DType dt : kGradDtypes) {
              const std::string dtype_s = std::string(dtype_name(dt));
      CAPTURE(dtype_s);
              std::vector<unsigned char> bytes((n + off + 1) * 4);
              void* g = bytes.data() + off * dtype_size(dt);
              kernels::convert_reference(x.data(), DType::f32, g, dt, n);
              const auto s1 = kernels::check_gradients(g, dt, n, scale);
              const auto s2 = kernels::grad_check_reference(g, dt, n, scale, false);
              check_bitwise(&s1.sum_of_squares, &s2.sum_of_squares, 1, "read-only sum", true);
              CHECK(s1.found_inf_or_nan == s2.found_inf_or_nan);
            }
          }
        }
      });
    }
  }
}

TEST_CASE("grad check: flags, plain-sum agreement, sum_of_squares and accumulate") {
  std::vector<float> x = test_floats(10001, 3, 2.0f, 0);
  const double plain = kernels::sum_of_squares_reference(x.data(), x.size());
  CHECK(kernels::sum_of_squares(x.data(), x.size()) == doctest::Approx(plain).epsilon(1e-12));
  CHECK_FALSE(kernels::check_gradients(x.data(), DType::f32, x.size(), 1.0f).found_inf_or_nan);
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    x[4321] = bad;
    CHECK(kernels::check_gradients(x.data(), DType::f32, x.size(), 1.0f).found_inf_or_nan);
    x[4321] = 1.0f;
  }
  x[10] = 3e38f;  // finite, but times 10 overflows fp32: the scaled value counts
  CHECK(kernels::check_gradients(x.data(), DType::f32, x.size(), 10.0f).found_inf_or_nan);
  for_each_target_and_threads([&] {
    for (const std::size_t n : kSizes) {
      const auto a = test_floats(n, n, 1.0f, 0), b = test_floats(n, n + 1, 1.0f, 0);
      auto d1 = a, d2 = a;
      kernels::accumulate(d1.data(), b.data(), n);
      kernels::accumulate_reference(d2.data(), b.data(), n);
      check_bitwise(d1.data(), d2.data(), n, "accumulate", false);
    }
  });
}

namespace {

// Every conversion kernel against core/dtype.h on every target and thread
// count, misaligned, at the test sizes and on long special inputs.
void check_conversions() {
  // fp32 inputs: specials, every exponent with mantissas at the rounding
  // points of bf16 (bit 15), fp16 normals (bit 12) and fp16 subnormals
  // (every shift), both signs, then random bit patterns.
  std::vector<float> in = special_floats();
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t sh = 0; sh < 23; ++sh) {
        for (std::uint32_t m : {1u << sh, (1u << sh) - 1, (1u << sh) + 1, 3u << sh}) {
          in.push_back(bits_float(sign | e << 23 | (m & 0x7fffffu)));
        }
      }
    }
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200000; ++i) in.push_back(bits_float(static_cast<std::uint32_t>(rng())));
  // 16-bit inputs: all 65536 patterns.
  std::vector<std::uint16_t> halves(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) halves[i] = static_cast<std::uint16_t>(i);

  for_each_target_and_threads([&] {
    for (const DType low : {DType::bf16, DType::f16}) {
      const std::string dtype_s = std::string(dtype_name(low));
      CAPTURE(dtype_s);
      for (const std::size_t off : kOffsets) {
        CAPTURE(off);
        for (std::size_t n : kSizes) {
          n = std::min(n, in.size());
          CAPTURE(n);
          OffsetArray<float> src(n, off);
          OffsetArray<std::uint16_t> d1(n, off), d2(n, off);
          src.assign(std::vector<float>(in.end() - static_cast<long>(n), in.end()));
          kernels::convert(src.data(), DType::f32, d1.data(), low, n);
          kernels::convert_reference(src.data(), DType::f32, d2.data(), low, n);
          check_bitwise(d1.data(), d2.data(), n, "f32 -> low", false, low);
        }
        const std::size_t n = in.size();
        OffsetArray<float> src(n, off);
        OffsetArray<std::uint16_t> d1(n, off);
        src.assign(in);
        if (low == DType::bf16) kernels::f32_to_bf16(src.data(), d1.data(), n);
        if (low == DType::f16) kernels::f32_to_f16(src.data(), d1.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint16_t want = low == DType::bf16 ? float_to_bf16(in[i]) : float_to_f16(in[i]);
          if (d1[i] != want) {
            CAPTURE(float_bits(in[i]));
            CHECK(d1[i] == want);
            break;
          }
        }
        OffsetArray<std::uint16_t> h(halves.size(), off);
        OffsetArray<float> back(halves.size(), off);
        h.assign(halves);
        if (low == DType::bf16) kernels::bf16_to_f32(h.data(), back.data(), halves.size());
        if (low == DType::f16) kernels::f16_to_f32(h.data(), back.data(), halves.size());
        std::vector<float> want(halves.size());
        for (std::size_t i = 0; i < halves.size(); ++i) {
          want[i] = low == DType::bf16 ? bf16_to_float(halves[i]) : f16_to_float(halves[i]);
        }
        check_bitwise(back.data(), want.data(), halves.size(), "low -> f32 (all 65536)", false);
        // bf16 <-> f16 goes through fp32 in both kernel and reference.
        const DType other = low == DType::bf16 ? DType::f16 : DType::bf16;
        OffsetArray<std::uint16_t> x1(halves.size(), off), x2(halves.size(), off);
        kernels::convert(h.data(), low, x1.data(), other, halves.size());
        kernels::convert_reference(h.data(), low, x2.data(), other, halves.size());
        check_bitwise(x1.data(), x2.data(), halves.size(), "bf16 <-> f16", false, other);
      }
    }
  });
}

}  // namespace

TEST_CASE("conversions equal the scalar functions of core/dtype.h bit for bit") {
  check_conversions();
}

#if defined(__x86_64__) || defined(__i386__)
TEST_CASE("conversions do not depend on MXCSR flush-to-zero / denormals-are-zero") {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ, inherited by pool threads created below
  check_conversions();
  _mm_setcsr(saved);
  zeroshard::kernels::set_num_threads(1);  // new workers, with the restored MXCSR
  zeroshard::kernels::set_num_threads(0);
}
#endif

TEST_CASE("optimizer_update_mixed equals its reference; unsupported dtypes are refused") {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.weight_decay = 0.01f;
  const std::size_t n = 1037;
  const OptimizerCase c(n, 1, 5);
  for (const DType gd : kGradDtypes) {
    auto p1 = c.param, p2 = c.param, m1 = c.state0, m2 = c.state0, v1 = c.state1, v2 = c.state1;
    std::vector<std::uint16_t> cp1(n), cp2(n);
    const auto gb = c.grad_bytes(gd);
    float* s1[2] = {m1.data(), v1.data()};
    float* s2[2] = {m2.data(), v2.data()};
    optimizer_update_mixed(h, h.lr, h.weight_decay, 3, 0.5f, p1.data(), c.grad_ptr(gb, gd), gd, s1,
                           cp1.data(), DType::bf16, n);
    optimizer_update_mixed_reference(h, h.lr, h.weight_decay, 3, 0.5f, p2.data(),
                                     c.grad_ptr(gb, gd), gd, s2, cp2.data(), DType::bf16, n);
    check_bitwise(p1.data(), p2.data(), n, "param", true);
    check_bitwise(cp1.data(), cp2.data(), n, "param_copy", true, DType::bf16);
  }
  float p = 0, m = 0, v = 0;
  const double g = 0;
  CHECK_THROWS_AS(kernels::adam_update(&p, &g, DType::f64, &m, &v, nullptr, DType::bf16, 1, {}),
                  InvariantError);
  CHECK_THROWS_AS(kernels::adam_update(&p, &p, DType::f32, &m, &v, &v, DType::f32, 1, {}),
                  InvariantError);
  CHECK_THROWS_AS(kernels::check_gradients(&g, DType::f64, 1, 1.0f), InvariantError);
}
