// The GPU kernels with 8-bit blockwise and bf16 optimizer states
// (kernels/cuda/optimizers/adam8bit.h, adam_bf16_state.h) against the CPU scalar
// references (kernels/cpu/adam/adam8bit.h, adam_bf16_state.h), bitwise ([Note:
// bitwise GPU kernels]): param, param copy, codes and absmax, bf16 states
// with both roundings (the stochastic stream included), every gradient
// dtype, sizes 0, 1, 7, 57, 10001 and block boundaries, several steps.
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam8bit.h"
#include "kernels/cpu/adam/adam_bf16_state.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cuda/optimizers/adam8bit.h"
#include "kernels/cuda/optimizers/adam_bf16_state.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::vector<std::size_t> kStateSizes = {0, 1, 7, 57, 255, 256, 257, 2048, 2049, 10001};

kernels::AdamScalars scalars(bool decoupled, int step) {
  const double beta1 = step % 2 == 1 ? 0.3 : 0.9;  // both lerp branches
  return kernels::make_adam_scalars(1e-3, beta1, 0.999, 1e-8, 0.01, step, decoupled, 0.5f);
}

}  // namespace

TEST_CASE("cuda adam8bit: bitwise equal to adam8bit_update_reference") {
  for (const std::size_t block : {std::size_t{64}, std::size_t{256}, std::size_t{4096}}) {
    for (const DType gd : {DType::f32, DType::bf16, DType::f16}) {
      for (const int copy_kind : {0, 1, 2}) {
        for (const std::size_t n : kStateSizes) {
          const bool decoupled = copy_kind != 1;
          const DType cd = copy_kind == 2 ? DType::f16 : DType::bf16;
          const std::string what = "block " + std::to_string(block) + " grad " +
                                   std::string(dtype_name(gd)) + " copy " +
                                   std::to_string(copy_kind) + " n=" + std::to_string(n);
          const std::size_t nb = kernels::quant_block_count(n, block);
          std::vector<float> p = random_floats(n, 10 + n, 1.0f);
          std::vector<std::uint8_t> grad = gradient_bytes(random_floats(n, 11 + n, 2.0f), gd);
          // States quantized from fp32 ones; one block of zeros.
          std::vector<float> m0 = random_floats(n, 12 + n, 0.05f), v0 = random_positive(n, 13 + n, 1e-3f);
          for (std::size_t i = 0; i < n && i < block; ++i) m0[i] = v0[i] = 0.0f;
          std::vector<std::uint8_t> cm(n), cv(n);
          std::vector<float> am(nb), av(nb);
          kernels::quantize_blockwise_reference(m0.data(), n, block, kernels::QuantMap::signed_dynamic,
                                                cm.data(), am.data());
          kernels::quantize_blockwise_reference(v0.data(), n, block,
                                                kernels::QuantMap::unsigned_dynamic, cv.data(),
                                                av.data());
          std::vector<std::uint16_t> copy(n, 0);
          DeviceBuffer dp = upload(p), dg = upload(grad), dcm = upload(cm), dcv = upload(cv),
                       dam = upload(am), dav = upload(av), dcopy(n * 2);
          kernels::gpu::Adam8bitTensor t;
          t.param = dp.as<float>();
          t.grad = dg.data();
          t.state = {dcm.as<std::uint8_t>(), dam.as<float>(), dcv.as<std::uint8_t>(), dav.as<float>()};
          t.param_copy = copy_kind != 0 ? dcopy.data() : nullptr;
          t.n = n;
          const kernels::Adam8bitState host{cm.data(), am.data(), cv.data(), av.data()};
          for (int step = 1; step <= 3; ++step) {
            const auto s = scalars(decoupled, step);
            kernels::gpu::adam8bit_update(t, block, s, gd, cd, nullptr);
            kernels::adam8bit_update_reference(p.data(), grad.data(), gd, host,
                                               copy_kind != 0 ? copy.data() : nullptr, cd, n,
                                               block, s);
          }
          check_bitwise(download<float>(dp.data(), n), p, what + " param");
          check_bitwise(download<std::uint8_t>(dcm.data(), n), cm, what + " exp_avg codes");
          check_bitwise(download<std::uint8_t>(dcv.data(), n), cv, what + " exp_avg_sq codes");
          check_bitwise(download<float>(dam.data(), nb), am, what + " exp_avg absmax");
          check_bitwise(download<float>(dav.data(), nb), av, what + " exp_avg_sq absmax");
          if (copy_kind != 0) {
            check_bitwise(download<std::uint16_t>(dcopy.data(), n), copy, what + " param_copy");
          }
        }
      }
    }
  }
}

TEST_CASE("cuda adam bf16 states: bitwise equal to adam_bf16_state_update_reference") {
  using kernels::StateRounding;
  for (const StateRounding mode : {StateRounding::nearest_even, StateRounding::stochastic}) {
    for (const DType gd : {DType::f32, DType::bf16, DType::f16}) {
      for (const int copy_kind : {0, 1, 2}) {
        const bool decoupled = copy_kind != 1;
        const DType cd = copy_kind == 2 ? DType::f16 : DType::bf16;
        // Every size as one tensor of one multi-tensor call, each with its
        // own first global index (one near 2^32: the low half wraps).
        struct Host {
          std::vector<float> p;
          std::vector<std::uint8_t> grad;
          std::vector<std::uint16_t> m, v, copy;
          std::uint64_t first;
          DeviceBuffer dp, dg, dm, dv, dcopy;
        };
        std::vector<Host> hs;
        std::uint64_t first = 0;
        for (const std::size_t n : kStateSizes) {
          Host h;
          h.p = random_floats(n, 20 + n, 1.0f);
          h.grad = gradient_bytes(random_floats(n, 21 + n, 2.0f), gd);
          const std::vector<float> m0 = random_floats(n, 22 + n, 0.05f);
          const std::vector<float> v0 = random_positive(n, 23 + n, 1e-3f);
          for (std::size_t i = 0; i < n; ++i) {
            h.m.push_back(float_to_bf16(m0[i]));
            h.v.push_back(float_to_bf16(v0[i]));
          }
          h.copy.assign(n, 0);
          h.first = n == 2049 ? (1ull << 32) - 100 : first;
          first += n;
          h.dp = upload(h.p);
          h.dg = upload(h.grad);
          h.dm = upload(h.m);
          h.dv = upload(h.v);
          h.dcopy = DeviceBuffer(n * 2);
          hs.push_back(std::move(h));
        }
        for (int step = 1; step <= 3; ++step) {
          const auto s = scalars(decoupled, step);
          std::vector<kernels::gpu::AdamBf16StateTensor> ts;
          for (Host& h : hs) {
            kernels::gpu::AdamBf16StateTensor t;
            t.param = h.dp.as<float>();
            t.grad = h.dg.data();
            t.exp_avg = h.dm.as<std::uint16_t>();
            t.exp_avg_sq = h.dv.as<std::uint16_t>();
            t.param_copy = copy_kind != 0 ? h.dcopy.data() : nullptr;
            t.n = h.p.size();
            t.first_index = h.first;
            ts.push_back(t);
            kernels::adam_bf16_state_update_reference(
                h.p.data(), h.grad.data(), gd, h.m.data(), h.v.data(),
                copy_kind != 0 ? h.copy.data() : nullptr, cd, h.p.size(), s,
                {mode, 1234, static_cast<std::uint64_t>(step), h.first});
          }
          kernels::gpu::adam_bf16_state_update_multi_tensor(ts, s, mode, 1234,
                                                            static_cast<std::uint64_t>(step), gd,
                                                            cd, nullptr);
        }
        for (Host& h : hs) {
          const std::size_t n = h.p.size();
          const std::string what = std::string(mode == StateRounding::stochastic ? "sr" : "rne") +
                                   " grad " + std::string(dtype_name(gd)) + " copy " +
                                   std::to_string(copy_kind) + " n=" + std::to_string(n);
          check_bitwise(download<float>(h.dp.data(), n), h.p, what + " param");
          check_bitwise(download<std::uint16_t>(h.dm.data(), n), h.m, what + " exp_avg");
          check_bitwise(download<std::uint16_t>(h.dv.data(), n), h.v, what + " exp_avg_sq");
          if (copy_kind != 0) {
            check_bitwise(download<std::uint16_t>(h.dcopy.data(), n), h.copy, what + " param_copy");
          }
        }
      }
    }
  }
}

TEST_CASE("cuda adam8bit / bf16 states: argument errors") {
  kernels::gpu::Adam8bitTensor t;
  t.n = 5;  // null pointers with n > 0
  CHECK_THROWS_AS(kernels::gpu::adam8bit_update(t, 256, scalars(true, 1), DType::f32, DType::bf16,
                                                nullptr),
                  InvariantError);
  CHECK_THROWS_AS(kernels::gpu::adam8bit_update(kernels::gpu::Adam8bitTensor{}, 100,
                                                scalars(true, 1), DType::f32, DType::bf16, nullptr),
                  InvariantError);
  kernels::gpu::AdamBf16StateTensor b;
  b.n = 3;
  CHECK_THROWS_AS(kernels::gpu::adam_bf16_state_update(b, scalars(true, 1),
                                                       kernels::StateRounding::nearest_even, 0, 1,
                                                       DType::f32, DType::bf16, nullptr),
                  InvariantError);
}
