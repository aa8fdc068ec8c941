// The multi-tensor Adam / AdamW kernel against kernels/cpu/adam/adam.h's scalar
// reference, bitwise ([Note: bitwise GPU kernels]), for every gradient
// dtype, with and without the low-precision param copy, over the standard
// sizes and over tensor lists that overflow one launch's metadata.
#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/adam/adam.h"
#include "kernels/cuda/optimizers/adam.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

kernels::AdamScalars scalars(bool decoupled, int step) {
  // beta1 0.3 on odd steps takes torch's other lerp branch (weight >= 0.5).
  const double beta1 = step % 2 == 1 ? 0.3 : 0.9;
  return kernels::make_adam_scalars(1e-3, beta1, 0.999, 1e-8, 0.01, step, decoupled,
                                    1.0f / 64.0f);
}

// Host state of one tensor (what the reference updates) and its device copies.
struct Tensor {
  std::vector<float> p, m, v;
  std::vector<std::uint8_t> grad;       // n elements of the gradient dtype
  std::vector<std::uint16_t> copy;      // the reference's param_copy
  DeviceBuffer dp, dg, dm, dv, dcopy;
};

Tensor make_tensor(std::size_t n, std::uint64_t seed, DType grad_dtype, bool copy) {
  Tensor t;
  t.p = random_floats(n, seed, 1.0f);
  t.m = random_floats(n, seed + 1, 0.01f);
  t.v = random_positive(n, seed + 2, 1e-4f);
  t.grad = gradient_bytes(random_floats(n, seed + 3, 4.0f), grad_dtype);
  t.dp = upload(t.p);
  t.dg = upload(t.grad);
  t.dm = upload(t.m);
  t.dv = upload(t.v);
  if (copy) {
    t.copy.assign(n, 0);
    t.dcopy = DeviceBuffer(n * 2);
  }
  return t;
}

kernels::gpu::AdamTensor device_args(Tensor& t) {
  kernels::gpu::AdamTensor a;
  a.param = t.dp.as<float>();
  a.grad = t.dg.data();
  a.exp_avg = t.dm.as<float>();
  a.exp_avg_sq = t.dv.as<float>();
  a.param_copy = t.dcopy.data();
  a.n = t.p.size();
  return a;
}

// Runs `steps` updates of every tensor on the GPU (one multi-tensor call per
// step) and with the mixed-precision scalar reference, then compares
// everything bitwise.
void run_and_compare(std::vector<Tensor>& tensors, DType grad_dtype, bool copy, DType copy_dtype,
                     bool decoupled, int steps, const std::string& what) {
  for (int step = 1; step <= steps; ++step) {
    const kernels::AdamScalars s = scalars(decoupled, step);
    std::vector<kernels::gpu::AdamTensor> args;
    for (Tensor& t : tensors) args.push_back(device_args(t));
    kernels::gpu::adam_update_multi_tensor(args, s, grad_dtype, copy_dtype, nullptr);
    for (Tensor& t : tensors) {
      kernels::adam_update_reference(t.p.data(), t.grad.data(), grad_dtype, t.m.data(),
                                     t.v.data(), copy ? t.copy.data() : nullptr, copy_dtype,
                                     t.p.size(), s);
    }
  }
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    Tensor& t = tensors[k];
    const std::size_t n = t.p.size();
    const std::string name = what + " tensor " + std::to_string(k) + " n=" + std::to_string(n);
    check_bitwise(download<float>(t.dp.data(), n), t.p, name + " param");
    check_bitwise(download<float>(t.dm.data(), n), t.m, name + " exp_avg");
    check_bitwise(download<float>(t.dv.data(), n), t.v, name + " exp_avg_sq");
    if (copy) {
      check_bitwise(download<std::uint16_t>(t.dcopy.data(), n), t.copy, name + " param_copy");
    }
  }
}

}  // namespace

TEST_CASE("cuda adam: bitwise equal to the scalar reference for every dtype and size") {
  for (const DType grad_dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool decoupled : {true, false}) {
      for (const int copy_kind : {0, 1, 2}) {
        const bool copy = copy_kind != 0;
        const DType copy_dtype = copy_kind == 2 ? DType::f16 : DType::bf16;
        for (const std::size_t n : kSizes) {
          std::vector<Tensor> tensors;
          tensors.push_back(make_tensor(n, 100 + n, grad_dtype, copy));
          run_and_compare(tensors, grad_dtype, copy, copy_dtype, decoupled, 3,
                          std::string(decoupled ? "adamw" : "adam") + " grad " +
                              std::string(dtype_name(grad_dtype)) + " copy " +
                              (copy ? std::string(dtype_name(copy_dtype)) : "none"));
        }
      }
    }
  }
}

TEST_CASE("cuda adam: many tensors of ragged sizes in one call (metadata overflow)") {
  // 70 tensors exceed the 64 tensor slots of one launch; sizes straddle the
  // 65536-element chunk boundary, and zero-sized tensors are skipped.
  std::vector<Tensor> tensors;
  for (int k = 0; k < 70; ++k) {
    const std::size_t n = k % 10 == 0 ? 0 : static_cast<std::size_t>(65536 * (k % 3) + 37 * k + 1);
    tensors.push_back(make_tensor(n, 7000 + k, DType::bf16, true));
  }
  run_and_compare(tensors, DType::bf16, true, DType::bf16, true, 2, "adamw multi-tensor");
}

TEST_CASE("cuda adam: argument errors") {
  kernels::gpu::AdamTensor t;
  t.n = 5;  // null pointers with n > 0
  CHECK_THROWS_AS(kernels::gpu::adam_update(t, scalars(true, 1), DType::f32, DType::bf16, nullptr),
                  InvariantError);
}
