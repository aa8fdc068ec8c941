// The multi-tensor SGD kernel against kernels/cpu/update/sgd.h's scalar reference,
// bitwise, for every gradient dtype and momentum variant, over the standard
// sizes and over one tensor long enough to need several launches.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/update/sgd.h"
#include "kernels/cuda/optimizers/sgd.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

struct Variant {
  const char* name;
  float momentum, dampening;
  bool nesterov;
};

constexpr Variant kVariants[] = {
    {"plain", 0.0f, 0.0f, false},
    {"momentum", 0.9f, 0.0f, false},
    {"momentum+dampening", 0.9f, 0.1f, false},
    {"nesterov", 0.9f, 0.0f, true},
};

kernels::SgdScalars scalars(const Variant& v, bool first_step) {
  kernels::SgdScalars s;
  s.lr = 0.05f;
  s.momentum = v.momentum;
  s.one_minus_dampening = static_cast<float>(1.0 - static_cast<double>(v.dampening));
  s.weight_decay = 1e-3f;
  s.grad_scale = 0.5f;
  s.nesterov = v.nesterov;
  s.first_step = first_step;
  return s;
}

void run_case(std::size_t n, DType grad_dtype, const Variant& variant, bool copy,
              DType copy_dtype, int steps) {
  std::vector<float> p = random_floats(n, 11 + n, 1.0f);
  std::vector<float> b = random_floats(n, 12 + n, 0.1f);
  const std::vector<std::uint8_t> g = gradient_bytes(random_floats(n, 13 + n, 2.0f), grad_dtype);
  std::vector<std::uint16_t> param_copy(copy ? n : 0);
  DeviceBuffer dg = upload(g);
  DeviceBuffer dp = upload(p);
  DeviceBuffer db = upload(b);
  DeviceBuffer dcopy(copy ? n * 2 : 0);
  const bool use_buf = variant.momentum != 0.0f;
  for (int step = 0; step < steps; ++step) {
    const kernels::SgdScalars s = scalars(variant, step == 0);
    kernels::gpu::SgdTensor t;
    t.param = dp.as<float>();
    t.grad = dg.data();
    t.momentum_buffer = use_buf ? db.as<float>() : nullptr;
    t.param_copy = copy ? dcopy.data() : nullptr;
    t.n = n;
    kernels::gpu::sgd_update(t, s, grad_dtype, copy_dtype, nullptr);
    kernels::sgd_update_reference(p.data(), g.data(), grad_dtype, use_buf ? b.data() : nullptr,
                                  copy ? param_copy.data() : nullptr, copy_dtype, n, s);
  }
  const std::string what = std::string("sgd ") + variant.name + " grad " +
                           std::string(dtype_name(grad_dtype)) + " n=" + std::to_string(n);
  check_bitwise(download<float>(dp.data(), n), p, what + " param");
  check_bitwise(download<float>(db.data(), n), b, what + " momentum_buffer");
  if (copy) {
    check_bitwise(download<std::uint16_t>(dcopy.data(), n), param_copy, what + " param_copy");
  }
}

}  // namespace

TEST_CASE("cuda sgd: bitwise equal to the scalar reference for every variant, dtype and size") {
  for (const Variant& variant : kVariants) {
    for (const DType grad_dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (const std::size_t n : kSizes) {
        run_case(n, grad_dtype, variant, false, DType::bf16, 3);
        run_case(n, grad_dtype, variant, true, DType::f16, 2);
      }
    }
  }
}

TEST_CASE("cuda sgd: one tensor of more chunks than one launch holds") {
  // 1030 chunks of 65536 elements > 1024 blocks per launch: the tensor
  // continues in a second launch.
  run_case(std::size_t{1030} * 65536 + 123, DType::f32, kVariants[0], false, DType::bf16, 1);
}

TEST_CASE("cuda sgd: momentum without a buffer is an error") {
  kernels::gpu::SgdTensor t;
  DeviceBuffer p(16);
  DeviceBuffer g(16);
  t.param = p.as<float>();
  t.grad = g.data();
  t.n = 4;
  CHECK_THROWS_AS(
      kernels::gpu::sgd_update(t, scalars(kVariants[1], true), DType::f32, DType::bf16, nullptr),
      InvariantError);
}
