// cuda_adam: how close the fused multi-tensor AdamW kernel (kernels/cuda/
// adam.h) gets to the device's memory bandwidth.
//
// The limit is measured in the same process by a plain copy kernel (reads
// and writes 8 bytes per float). AdamW moves 28 bytes per parameter (reads
// param, grad, exp_avg, exp_avg_sq; writes param, exp_avg, exp_avg_sq, all
// fp32); with bf16 gradients and a bf16 param copy it is 14 read + 14
// written, also 28. GB/s = bytes moved / median time; ratio = GB/s / copy
// GB/s. The last line, "bandwidth_ratio R", is what scripts/gpu-check
// records. Exits 77 ("no CUDA device: skipped") without a GPU.
// The other optimizer-state formats and ZeRO++'s quantization kernels get
// rows of their own, each with the bytes it must move per element:
// AdamW8bit (kernels/cuda/optimizers/adam8bit.h: param and grad fp32, two code bytes
// read and written, two absmax floats per 256-element block each way),
// AdamW with bf16 states (kernels/cuda/optimizers/adam_bf16_state.h: 20 bytes), and
// symmetric block quantization (kernels/cuda/symmetric_quant.h: bf16 in,
// int8 codes out; int8 codes in, bf16 out; int4 codes accumulated into
// fp32), one fp32 scale per 2048-element block.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cuda_adam/copy_kernel.h"
#include "core/cuda_check.h"
#include "core/cuda_stream.h"
#include "core/device_buffer.h"
#include "kernels/cuda/optimizers/adam.h"
#include "kernels/cuda/optimizers/adam8bit.h"
#include "kernels/cuda/optimizers/adam_bf16_state.h"
#include "kernels/cuda/symmetric_quant.h"

using namespace zeroshard;

namespace {

// Median milliseconds of `iters` timed runs of `run` on `stream`, after two
// untimed ones.
double median_ms(const std::function<void()>& run, int iters, CUstream_st* stream) {
  CudaEvent start = CudaEvent::create(true);
  CudaEvent stop = CudaEvent::create(true);
  run();
  run();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    run();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string kernel;
  std::size_t params;
  double bytes_per_param;
  double ms;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"AdamW on the GPU against the copy bandwidth measured in the same run"};
  std::size_t params = std::size_t{1} << 28;
  int iters = 20;
  int tensors = 64;
  app.add_option("--params", params, "parameters updated per step")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed steps (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--tensors", tensors, "tensors the parameters are split into for the "
                                       "multi-tensor row")
      ->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  if (cuda_device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  try {
    int device = 0;
    ZS_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    ZS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    CudaStream stream = CudaStream::create();
    const std::size_t n = params;
    DeviceBuffer p(n * 4), g(n * 4), m(n * 4), v(n * 4), g16(n * 2), copy16(n * 2);
    for (DeviceBuffer* b : {&p, &g, &m, &v, &g16, &copy16}) {
      ZS_CUDA_CHECK(cudaMemset(b->data(), 0, b->bytes()));
    }

    const kernels::AdamScalars s =
        kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, 1, true);

    kernels::gpu::AdamTensor whole;
    whole.param = p.as<float>();
    whole.grad = g.data();
    whole.exp_avg = m.as<float>();
    whole.exp_avg_sq = v.as<float>();
    whole.n = n;
    kernels::gpu::AdamTensor mixed = whole;
    mixed.grad = g16.data();
    mixed.param_copy = copy16.data();
    std::vector<kernels::gpu::AdamTensor> pieces;
    const std::size_t piece = (n + static_cast<std::size_t>(tensors) - 1) / tensors;
    for (std::size_t begin = 0; begin < n; begin += piece) {
      kernels::gpu::AdamTensor t = whole;
      t.param += begin;
      t.grad = g.as<float>() + begin;
      t.exp_avg += begin;
      t.exp_avg_sq += begin;
      t.n = std::min(piece, n - begin);
      pieces.push_back(t);
    }

    std::vector<Row> rows;
    rows.push_back({"copy (limit)", n, 8.0, median_ms([&] {
                      ZS_CUDA_CHECK(static_cast<cudaError_t>(
                          bench::launch_copy(p.as<float>(), m.as<float>(), n, stream.get())));
                    }, iters, stream.get())});
    rows.push_back({"adamw f32 grad", n, 28.0, median_ms([&] {
                      kernels::gpu::adam_update(whole, s, DType::f32, DType::bf16, stream.get());
                    }, iters, stream.get())});
    rows.push_back({"adamw bf16 grad + bf16 copy", n, 28.0, median_ms([&] {
                      kernels::gpu::adam_update(mixed, s, DType::bf16, DType::bf16, stream.get());
                    }, iters, stream.get())});
    rows.push_back({"adamw f32 grad, " + std::to_string(pieces.size()) + " tensors", n, 28.0,
                    median_ms([&] {
                      kernels::gpu::adam_update_multi_tensor(pieces, s, DType::f32, DType::bf16,
                                                             stream.get());
                    }, iters, stream.get())});

    // 8-bit states: codes and absmax of exp_avg and exp_avg_sq (zeros: a
    // zero absmax is a valid state).
    const std::size_t block8 = 256, blocks8 = (n + block8 - 1) / block8;
    DeviceBuffer c1(n), c2(n), a1(blocks8 * 4), a2(blocks8 * 4);
    for (DeviceBuffer* b : {&c1, &c2, &a1, &a2}) ZS_CUDA_CHECK(cudaMemset(b->data(), 0, b->bytes()));
    kernels::gpu::Adam8bitTensor eight;
    eight.param = p.as<float>();
    eight.grad = g.data();
    eight.state = kernels::Adam8bitState{.exp_avg_code = c1.as<std::uint8_t>(), .exp_avg_absmax = a1.as<float>(),
                                         .exp_avg_sq_code = c2.as<std::uint8_t>(),
                                         .exp_avg_sq_absmax = a2.as<float>()};
    eight.n = n;
    rows.push_back({"adamw8bit f32 grad", n, 16.0 + 16.0 / static_cast<double>(block8), median_ms([&] {
                      kernels::gpu::adam8bit_update(eight, block8, s, DType::f32, DType::bf16, stream.get());
                    }, iters, stream.get())});
    // bf16 states: the moments as bf16 bits (the halves of m and v).
    kernels::gpu::AdamBf16StateTensor half_states;
    half_states.param = p.as<float>();
    half_states.grad = g.data();
    half_states.exp_avg = m.as<std::uint16_t>();
    half_states.exp_avg_sq = v.as<std::uint16_t>();
    half_states.n = n;
    rows.push_back({"adamw bf16 states f32 grad", n, 20.0, median_ms([&] {
                      kernels::gpu::adam_bf16_state_update(half_states, s, kernels::StateRounding::nearest_even, 0,
                                                           1, DType::f32, DType::bf16, stream.get());
                    }, iters, stream.get())});
    // ZeRO++'s wire format: chunks of n elements, block 2048.
    const kernels::SymQuantFormat q8{kernels::QuantBits::int8, 2048}, q4{kernels::QuantBits::int4, 2048};
    DeviceBuffer chunk8(kernels::sym_quant_chunk_bytes(n, q8)), chunk4(kernels::sym_quant_chunk_bytes(n, q4));
    ZS_CUDA_CHECK(cudaMemset(chunk4.data(), 0, chunk4.bytes()));
    const double scale_bytes = 4.0 / 2048.0;
    rows.push_back({"quantize bf16 -> int8", n, 3.0 + scale_bytes, median_ms([&] {
                      kernels::gpu::quantize_symmetric(g16.data(), DType::bf16, n, q8, chunk8.data(), stream.get());
                    }, iters, stream.get())});
    rows.push_back({"dequantize int8 -> bf16", n, 3.0 + scale_bytes, median_ms([&] {
                      kernels::gpu::dequantize_symmetric(chunk8.data(), n, q8, copy16.data(), DType::bf16,
                                                         stream.get());
                    }, iters, stream.get())});
    rows.push_back({"dequantize-accumulate int4 + f32", n, 8.5 + scale_bytes, median_ms([&] {
                      kernels::gpu::dequantize_accumulate(chunk4.data(), n, q4, m.as<float>(), stream.get());
                    }, iters, stream.get())});

    const double limit = rows[0].bytes_per_param * static_cast<double>(n) / (rows[0].ms * 1e6);
    std::printf("# cuda_adam on %s (%d SMs), %zu parameters, median of %d steps\n", prop.name,
                prop.multiProcessorCount, n, iters);
    std::printf("%-34s %12s %11s %10s %9s %7s\n", "kernel", "params", "bytes/param", "time_ms",
                "GB/s", "ratio");
    for (const Row& r : rows) {
      const double gbs = r.bytes_per_param * static_cast<double>(r.params) / (r.ms * 1e6);
      std::printf("%-34s %12zu %11.0f %10.3f %9.1f %7.3f\n", r.kernel.c_str(), r.params,
                  r.bytes_per_param, r.ms, gbs, gbs / limit);
    }
    const double adam_gbs = rows[1].bytes_per_param * static_cast<double>(n) / (rows[1].ms * 1e6);
    std::printf("bandwidth_ratio %.3f\n", adam_gbs / limit);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "cuda_adam: %s\n", e.what());
    return 1;
  }
}
