// AdamW with bf16 optimizer states (kernels/cpu/adam/adam_bf16_state.h,
// stochastic_round.h): the Highway kernel against the scalar reference bit
// for bit on every SIMD target at 1 and 2 threads, both roundings; against
// fp32 AdamW over one step (param identical, states within the stated
// rounding bounds); the stochastic stream reproducible across thread
// counts and chunkings and unbiased in mean.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "core/splitmix64.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam_bf16_state.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/adam/stochastic_round.h"
#include "kernel_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;
using kernels::Bf16StateRounding;
using kernels::StateRounding;

namespace {

const std::vector<std::size_t> kSizesBf = {0, 1, 7, 16, 17, 57, 10001};

// bf16 states rounded from random fp32 ones (exp_avg_sq >= 0).
struct StateBf {
  StateBf(std::size_t n, std::uint64_t seed) : m(n), v(n) {
    const std::vector<float> mf = test_floats(n, seed, 0.05f, 0);
    const std::vector<float> vf = test_floats(n, seed + 1, 0.03f, 0);
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = float_to_bf16(mf[i]);
      v[i] = float_to_bf16(vf[i] * vf[i]);
    }
  }
  std::vector<std::uint16_t> m, v;
};

// The bf16 value one ulp above |x|'s bf16 truncation, in magnitude.
float bf16_ulp(float x) {
  const std::uint32_t t = float_bits(std::fabs(x)) & 0xffff0000u;
  return bits_float(t + 0x10000u) - bits_float(t);
}

}  // namespace

TEST_CASE("stochastic_bits: fixed values, index halves, steps and seeds change the stream") {
  const auto k = kernels::stochastic_key(1234, 7);
  // The definition written out (stochastic_round.h).
  const std::uint64_t kk =
      splitmix64(1234ull ^ splitmix64(7ull ^ 0x632be59bd9b4e019ull));
  CHECK(k.lo == static_cast<std::uint32_t>(kk));
  CHECK(k.hi == static_cast<std::uint32_t>(kk >> 32));
  CHECK(kernels::fmix32(0) == 0);
  CHECK(splitmix64(0) == 0xe220a8397b1dcdafull);  // splitmix64's first output for seed 0
  const std::uint64_t i = (5ull << 32) | 9;
  CHECK(kernels::stochastic_bits(k, i) == kernels::fmix32(9u ^ k.lo ^ kernels::fmix32(5u ^ k.hi)));
  CHECK(kernels::stochastic_bits(k, 9) != kernels::stochastic_bits(k, i));
  CHECK(kernels::stochastic_bits(k, 9) != kernels::stochastic_bits(kernels::stochastic_key(1234, 8), 9));
  CHECK(kernels::stochastic_bits(k, 9) != kernels::stochastic_bits(kernels::stochastic_key(1235, 7), 9));
  // Rounding: NaN as float_to_bf16, Inf kept, exact values kept, one of the
  // two neighbours otherwise.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(kernels::float_to_bf16_stochastic(nan, 0xffff) == float_to_bf16(nan));
  CHECK(kernels::float_to_bf16_stochastic(std::numeric_limits<float>::infinity(), 0xffff) == 0x7f80);
  CHECK(kernels::float_to_bf16_stochastic(1.0f, 0xffff) == 0x3f80);
  CHECK(kernels::float_to_bf16_stochastic(bits_float(0x3f800001u), 0) == 0x3f80);
  CHECK(kernels::float_to_bf16_stochastic(bits_float(0x3f800001u), 0xffff) == 0x3f81);
  CHECK(kernels::float_to_bf16_stochastic(bits_float(0xbf800001u), 0xffff) == 0xbf81);  // magnitude up
}

TEST_CASE("adam_bf16_state_update equals adam_bf16_state_update_reference bit for bit") {
  for (const bool decoupled : {true, false}) {
    for (const StateRounding mode : {StateRounding::nearest_even, StateRounding::stochastic}) {
      for_each_target_and_threads([&] {
        for (const std::size_t n : kSizesBf) {
          for (const DType gd : {DType::f32, DType::bf16, DType::f16}) {
            for (const int copy_kind : {0, 1, 2}) {
              CAPTURE(decoupled);
              CAPTURE(mode == StateRounding::stochastic);
              CAPTURE(n);
              CAPTURE(copy_kind);
              const std::string gds(dtype_name(gd));
              CAPTURE(gds);
              const DType cd = copy_kind == 2 ? DType::f16 : DType::bf16;
              const std::vector<float> gf = test_floats(n, 5 + n, 0.5f, gd == DType::f32 ? 41 : 0);
              std::vector<unsigned char> g(n * 4 + 4);
              kernels::convert_reference(gf.data(), DType::f32, g.data(), gd, n);
              std::vector<float> p1 = test_floats(n, 9 + n, 1.0f, 0), p2 = p1;
              StateBf s1(n, 11 + n), s2 = s1;
              std::vector<std::uint16_t> c1(n + 1), c2(n + 1);
              for (int step = 1; step <= 3; ++step) {
                const kernels::AdamScalars sc = kernels::make_adam_scalars(
                    1e-2, step == 2 ? 0.3 : 0.9, 0.999, 1e-8, 0.1, step, decoupled, 0.75f);
                // Indices near 2^32 on step 3: the lanes' low halves wrap.
                const Bf16StateRounding r{mode, 99, static_cast<std::uint64_t>(step),
                                          step == 3 ? (1ull << 32) - 5 : 1000};
                kernels::adam_bf16_state_update(p1.data(), g.data(), gd, s1.m.data(), s1.v.data(),
                                                copy_kind ? c1.data() : nullptr, cd, n, sc, r);
                kernels::adam_bf16_state_update_reference(p2.data(), g.data(), gd, s2.m.data(),
                                                          s2.v.data(),
                                                          copy_kind ? c2.data() : nullptr, cd, n,
                                                          sc, r);
              }
              check_bitwise(p1.data(), p2.data(), n, "param", true);
              check_bitwise(s1.m.data(), s2.m.data(), n, "exp_avg", false, DType::bf16);
              check_bitwise(s1.v.data(), s2.v.data(), n, "exp_avg_sq", false, DType::bf16);
              if (copy_kind) check_bitwise(c1.data(), c2.data(), n, "param_copy", true, cd);
            }
          }
        }
      });
    }
  }
}

TEST_CASE("adam_bf16_state_update against fp32 AdamW: param exact, states within the rounding bound") {
  // One step from the same states (bf16 values widened for fp32): param is
  // the same operations on the same values; the new states are fp32's
  // rounded to nearest even exactly (so within half a bf16 ulp, <= 2^-8
  // relatively), or stochastically one of the two bf16 neighbours of fp32's
  // value (within one ulp, < 2^-7 relatively).
  for (const std::size_t n : kSizesBf) {
    for (const StateRounding mode : {StateRounding::nearest_even, StateRounding::stochastic}) {
      CAPTURE(n);
      CAPTURE(mode == StateRounding::stochastic);
      StateBf s(n, 3 + n);
      std::vector<float> p = test_floats(n, 4, 1.0f, 0), p32 = p, m(n), v(n);
      for (std::size_t i = 0; i < n; ++i) {
        m[i] = bf16_to_float(s.m[i]);
        v[i] = bf16_to_float(s.v[i]);
      }
      const std::vector<float> g = test_floats(n, 50, 0.02f, 0);
      const auto sc = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, 5, true);
      kernels::adam_update_reference(p32.data(), g.data(), m.data(), v.data(), n, sc);
      kernels::adam_bf16_state_update(p.data(), g.data(), DType::f32, s.m.data(), s.v.data(),
                                      nullptr, DType::bf16, n, sc, {mode, 5, 5, 0});
      check_bitwise(p.data(), p32.data(), n, "param vs fp32", false);
      for (std::size_t i = 0; i < n; ++i) {
        const float mb = bf16_to_float(s.m[i]), vb = bf16_to_float(s.v[i]);
        if (mode == StateRounding::nearest_even) {
          CHECK(s.m[i] == float_to_bf16(m[i]));
          CHECK(s.v[i] == float_to_bf16(v[i]));
          CHECK(std::fabs(mb - m[i]) <= std::ldexp(std::fabs(m[i]), -8));
          CHECK(std::fabs(vb - v[i]) <= std::ldexp(v[i], -8));
        } else {
          CHECK(std::fabs(mb - m[i]) < bf16_ulp(m[i]));
          CHECK(std::fabs(vb - v[i]) < bf16_ulp(v[i]));
          CHECK(std::fabs(mb - m[i]) < std::ldexp(std::fabs(m[i]), -7));
          CHECK((float_bits(mb) == (float_bits(m[i]) & 0xffff0000u) ||
                 float_bits(mb) == (float_bits(m[i]) & 0xffff0000u) + 0x10000u));
        }
      }
    }
  }
}

TEST_CASE("stochastic rounding: the same bits for any thread count and chunking") {
  const std::size_t n = 10001;
  const std::vector<float> g = test_floats(n, 60, 0.02f, 0);
  const auto sc = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, 3, true);
  const std::uint64_t base = 123456789;  // this tensor's offset in a larger flat buffer
  const Bf16StateRounding r{StateRounding::stochastic, 42, 3, base};
  StateBf want(n, 70);
  std::vector<float> pw = test_floats(n, 71, 1.0f, 0);
  kernels::adam_bf16_state_update_reference(pw.data(), g.data(), DType::f32, want.m.data(),
                                            want.v.data(), nullptr, DType::bf16, n, sc, r);
  for_each_target_and_threads([&] {
    // Whole, and in three pieces of uneven sizes, each given its offset.
    for (const std::vector<std::size_t>& cuts :
         {std::vector<std::size_t>{0, n}, std::vector<std::size_t>{0, 13, 5000, n}}) {
      StateBf s(n, 70);
      std::vector<float> p = test_floats(n, 71, 1.0f, 0);
      for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
        const std::size_t b = cuts[k], e = cuts[k + 1];
        Bf16StateRounding rk = r;
        rk.first_index = base + b;
        kernels::adam_bf16_state_update(p.data() + b, g.data() + b, DType::f32, s.m.data() + b,
                                        s.v.data() + b, nullptr, DType::bf16, e - b, sc, rk);
      }
      CAPTURE(cuts.size());
      check_bitwise(p.data(), pw.data(), n, "param", false);
      check_bitwise(s.m.data(), want.m.data(), n, "exp_avg", false, DType::bf16);
      check_bitwise(s.v.data(), want.v.data(), n, "exp_avg_sq", false, DType::bf16);
    }
  });
  // Another step or seed draws other bits: some elements round differently.
  for (const Bf16StateRounding other : {Bf16StateRounding{StateRounding::stochastic, 42, 4, base},
                                        Bf16StateRounding{StateRounding::stochastic, 43, 3, base}}) {
    StateBf s(n, 70);
    std::vector<float> p = test_floats(n, 71, 1.0f, 0);
    kernels::adam_bf16_state_update(p.data(), g.data(), DType::f32, s.m.data(), s.v.data(),
                                    nullptr, DType::bf16, n, sc, other);
    CHECK(first_difference(s.m.data(), want.m.data(), n, false, DType::bf16) >= 0);
  }
}

TEST_CASE("stochastic rounding is unbiased in mean") {
  // n elements with the same inputs: fp32 AdamW gives one exp_avg value x
  // (and exp_avg_sq y) between two bf16 neighbours. Rounded up with
  // probability q = (x - lo) / ulp, the mean of the n rounded values has
  // expectation x and standard deviation ulp * sqrt(q (1 - q) / n) <=
  // ulp / (2 sqrt(n)) = 0.0011 ulp for n = 2e5; the tolerance is 0.01 ulp
  // (about 9 standard deviations). Round to nearest, by contrast, is off by
  // min(q, 1 - q) ulp, checked to exceed 0.1 ulp for these inputs.
  const std::size_t n = 200000;
  std::vector<float> p(n, 0.5f), g(n, 0.02f);
  std::vector<std::uint16_t> m(n, float_to_bf16(0.011f)), v(n, float_to_bf16(2e-4f));
  const auto sc = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.0, 2, true);
  float x = bf16_to_float(m[0]), y = bf16_to_float(v[0]), p32 = 0.5f;
  kernels::adam_update_reference(&p32, g.data(), &x, &y, 1, sc);
  kernels::adam_bf16_state_update(p.data(), g.data(), DType::f32, m.data(), v.data(), nullptr,
                                  DType::bf16, n, sc, {StateRounding::stochastic, 7, 2, 0});
  for (const auto& entry : {std::pair{x, &m}, std::pair{y, &v}}) {
    // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
    const auto& want = entry.first;
    const auto& got = entry.second;
    double sum = 0;
    for (const std::uint16_t h : *got) sum += bf16_to_float(h);
    const double mean = sum / n, ulp = bf16_ulp(want);
    const double lo = bits_float(float_bits(want) & 0xffff0000u);
    const double q = (want - lo) / ulp;
    CAPTURE(want);
    CAPTURE(mean);
    CAPTURE(q);
    CHECK(std::min(q, 1 - q) > 0.1);
    CHECK(std::fabs(mean - want) <= 0.01 * ulp);
  }
}

TEST_CASE("adam_bf16_state_update rejects bad arguments") {
  float p = 0, g = 0;
  std::uint16_t m = 0, v = 0;
  const auto sc = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0, 1, true);
  CHECK_THROWS_AS(kernels::adam_bf16_state_update(&p, &g, DType::f32, nullptr, &v, nullptr,
                                                  DType::bf16, 1, sc, {}),
                  InvariantError);
  CHECK_THROWS_AS(kernels::adam_bf16_state_update(&p, &g, DType::f64, &m, &v, nullptr,
                                                  DType::bf16, 1, sc, {}),
                  InvariantError);
  CHECK_THROWS_AS(kernels::adam_bf16_state_update(&p, &g, DType::f32, &m, &v, &m, DType::f32, 1,
                                                  sc, {}),
                  InvariantError);
  CHECK_THROWS_AS(kernels::adam_bf16_state_update_reference(&p, &g, DType::f32, &m, nullptr,
                                                            nullptr, DType::bf16, 1, sc, {}),
                  InvariantError);
  kernels::adam_bf16_state_update(&p, &g, DType::f32, nullptr, nullptr, nullptr, DType::bf16, 0,
                                  sc, {});  // n == 0: nothing to do
}
