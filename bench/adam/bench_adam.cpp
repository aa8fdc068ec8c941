// bench_adam: throughput of the CPU AdamW kernels against the memory
// bandwidth limit of the same machine, measured in the same run.
//
// For each size (10M, 100M, 400M parameters; --quick: 1M, 4M) and thread
// count (1, 2) it times, interleaved, iteration by iteration:
//   - the limit pass: reads four fp32 arrays and writes three (limit_pass.h);
//   - AdamW, fp32 gradient (kernels::adam_update);
//   - AdamW, bf16 gradient + bf16 copy of the updated parameter;
//   - AdamW with 8-bit states (block 256, 2048) and with bf16 states
//     (round to nearest even, stochastic rounding);
//   - the scalar reference (kernels::adam_update_reference), run per chunk
//     on the same threads;
// over the same buffers (allocated once, pre-faulted), after one warm-up
// call each, and prints one table: median time, params/s, bytes/s under the
// row's bytes model, and the ratio to the limit pass's bytes/s.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include <hwy/targets.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/adam/limit_pass.h"
#include "bench/median.h"
#include "core/aligned_buffer.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam8bit.h"
#include "kernels/cpu/adam/adam_bf16_state.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"

namespace {

using namespace zeroshard;
using bench::median;

// One row of the table: a kernel over the first n elements of the buffers.
struct Kernel {
  std::string name;
  double bytes_per_param;  // the row's bytes model
  std::function<void(std::size_t n)> run;
};

// The 8-bit states (codes and absmax of exp_avg and exp_avg_sq) of n
// parameters at one block size.
struct State8 {
  State8() = default;
  State8(std::size_t n, std::size_t block)
      : n(n), block(block), cm(n), cv(n), am(kernels::quant_block_count(n, block)),
        av(kernels::quant_block_count(n, block)) {}
  // Quantizes fp32 states m and v (n elements each).
  void quantize(const float* m, const float* v) {
    kernels::quantize_blockwise(m, n, block, kernels::QuantMap::signed_dynamic, cm.data(),
                                am.data());
    kernels::quantize_blockwise(v, n, block, kernels::QuantMap::unsigned_dynamic, cv.data(),
                                av.data());
  }
  kernels::Adam8bitState state() { return {cm.data(), am.data(), cv.data(), av.data()}; }
  std::size_t n = 0, block = 0;
  AlignedBuffer<std::uint8_t> cm, cv;
  AlignedBuffer<float> am, av;
};

double seconds_of(const std::function<void(std::size_t)>& f, std::size_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  f(n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Deterministic values without a sequential generator (filled in parallel):
// a hash of i mapped to [-scale, scale].
void fill(float* x, std::size_t n, std::uint64_t seed, float scale) {
  kernels::parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      std::uint64_t h = (i + seed) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 29;
      x[i] = scale * (static_cast<float>(h % 2000001) / 1000000.0f - 1.0f);
    }
  });
}

std::string count_name(std::size_t n) {
  if (n % 1000000 == 0) return fmt::format("{}M", n / 1000000);
  return fmt::format("{}", n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_adam: CPU AdamW params/s vs. the 4-read/3-write bandwidth limit"};
  bool quick = false;
  int iters = 5;
  std::vector<std::size_t> sizes;
  std::vector<int> thread_counts = {1, 2};
  app.add_flag("--quick", quick, "small run: 1M and 4M parameters, 3 iterations");
  app.add_option("--iters", iters, "timed iterations per row (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--sizes", sizes, "parameter counts (default: 10000000 100000000 400000000)");
  app.add_option("--threads", thread_counts, "thread counts (default: 1 2)");
  std::string target;
  app.add_option("--target", target,
                 "SIMD target to run (AVX3 = AVX-512, AVX2, EMU128/SCALAR); default: the best "
                 "this CPU supports");
  CLI11_PARSE(app, argc, argv);
  if (!target.empty()) {
    std::int64_t chosen = 0;
    std::string known;
    for (const std::int64_t t : kernels::simd_targets()) {
      known += std::string(known.empty() ? "" : ", ") + hwy::TargetName(t);
      if (target == hwy::TargetName(t)) chosen = t;
    }
    if (chosen == 0) {
      std::fprintf(stderr, "bench_adam: --target %s is not one of this CPU's targets (%s)\n",
                   target.c_str(), known.c_str());
      return 1;
    }
    kernels::force_simd_target(chosen);
  }
  if (sizes.empty()) {
    sizes = quick ? std::vector<std::size_t>{1000000, 4000000}
                  : std::vector<std::size_t>{10000000, 100000000, 400000000};
  }
  if (quick) iters = std::min(iters, 3);
  const std::size_t nmax = *std::max_element(sizes.begin(), sizes.end());

  // Allocate once; AlignedBuffer asks for huge pages and zero-fills (pre-faults) every page.
  const auto t_alloc = std::chrono::steady_clock::now();
  AlignedBuffer<float> p, g, m, v;
  AlignedBuffer<std::uint16_t> g16, copy16, m16, v16;
  State8 s256, s2048;
  try {
    p = AlignedBuffer<float>(nmax), g = AlignedBuffer<float>(nmax);
    m = AlignedBuffer<float>(nmax), v = AlignedBuffer<float>(nmax);
    g16 = AlignedBuffer<std::uint16_t>(nmax), copy16 = AlignedBuffer<std::uint16_t>(nmax);
    m16 = AlignedBuffer<std::uint16_t>(nmax), v16 = AlignedBuffer<std::uint16_t>(nmax);
    s256 = State8(nmax, 256), s2048 = State8(nmax, 2048);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_adam: cannot allocate %.1f GiB for %zu parameters; use --sizes\n",
                 nmax * 28.0 / (1u << 30), nmax);
    return 1;
  }
  fill(p.data(), nmax, 1, 1.0f);
  fill(g.data(), nmax, 2, 1e-3f);
  kernels::f32_to_bf16(g.data(), g16.data(), nmax);
  // 8-bit states quantized from fp32 ones (m in [-0.01, 0.01], v = m^2 / 10),
  // one set per block size: a row that read the other's absmax would scale
  // its codes wrongly (and push blocks off the vector encoder).
  {
    AlignedBuffer<float> tm(nmax), tv(nmax);
    fill(tm.data(), nmax, 3, 1e-2f);
    kernels::parallel_for_elements(nmax, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) tv[i] = tm[i] * tm[i] * 0.1f;
    });
    s256.quantize(tm.data(), tv.data());
    s2048.quantize(tm.data(), tv.data());
  }
  // bf16 states rounded from fp32 ones of the same ranges.
  {
    AlignedBuffer<float> tmp(nmax);
    fill(tmp.data(), nmax, 3, 1e-2f);
    kernels::parallel_for_elements(nmax, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        m16[i] = float_to_bf16(tmp[i]);
        v16[i] = float_to_bf16(tmp[i] * tmp[i] * 0.1f);
      }
    });
  }
  const double alloc_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_alloc).count();

  const kernels::AdamScalars s = kernels::make_adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, 4, true);

  const std::vector<Kernel> kernels_list = {
      {"limit: 4 reads + 3 writes fp32", 28.0,
       [&](std::size_t n) { bench::limit_pass_4r3w(p.data(), g.data(), m.data(), v.data(), n); }},
      {"AdamW fp32 (SIMD)", 28.0,
       [&](std::size_t n) { kernels::adam_update(p.data(), g.data(), m.data(), v.data(), n, s); }},
      {"AdamW bf16 grad + bf16 copy", 28.0,
       [&](std::size_t n) {
         kernels::adam_update(p.data(), g16.data(), DType::bf16, m.data(), v.data(),
                              copy16.data(), DType::bf16, n, s);
       }},
      {"AdamW 8-bit states, block 256", 16.0 + 16.0 / 256,
       [&](std::size_t n) {
         kernels::adam8bit_update(p.data(), g.data(), DType::f32, s256.state(), nullptr,
                                  DType::bf16, n, 256, s);
       }},
      {"AdamW 8-bit states, block 2048", 16.0 + 16.0 / 2048,
       [&](std::size_t n) {
         kernels::adam8bit_update(p.data(), g.data(), DType::f32, s2048.state(), nullptr,
                                  DType::bf16, n, 2048, s);
       }},
      {"AdamW bf16 states, nearest", 20.0,
       [&](std::size_t n) {
         kernels::adam_bf16_state_update(p.data(), g.data(), DType::f32, m16.data(), v16.data(),
                                         nullptr, DType::bf16, n, s, {});
       }},
      {"AdamW bf16 states, stochastic", 20.0,
       [&](std::size_t n) {
         kernels::adam_bf16_state_update(
             p.data(), g.data(), DType::f32, m16.data(), v16.data(), nullptr, DType::bf16, n, s,
             {kernels::StateRounding::stochastic, 1, 4, 0});
       }},
      {"AdamW scalar reference fp32", 28.0,
       [&](std::size_t n) {
         kernels::parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
           kernels::adam_update_reference(p.data() + b, g.data() + b, m.data() + b, v.data() + b,
                                          e - b, s);
         });
       }},
  };

  fmt::print("bench_adam: AdamW on the CPU; SIMD target {}; {} hardware threads; "
             "{:.1f} GiB allocated and pre-faulted in {:.1f} s; median of {} iterations "
             "after 1 warm-up, rows interleaved\n",
             kernels::simd_target_name(), kernels::default_num_threads(),
             nmax * 28.0 / (1u << 30), alloc_s, iters);
  fmt::print("bytes model (per parameter): fp32 AdamW reads p,g,m,v (16 B) and writes p,m,v "
             "(12 B) = 28 B; bf16 row reads p,m,v + bf16 g (14 B) and writes p,m,v + bf16 copy "
             "(14 B) = 28 B; 8-bit states read p,g (8 B) + 2 codes (2 B) + 2 absmax/block and "
             "write p (4 B) + 2 codes (2 B) + 2 absmax/block = 16 + 16/block B; bf16 states read "
             "p,g (8 B) + 2 bf16 states (4 B) and write p (4 B) + 2 states (4 B) = 20 B; scalar "
             "reference = 28 B; limit pass reads 4 and writes 3 fp32 arrays = 28 B\n");
  fmt::print("ratio = (params/s x B/param) / (limit pass bytes/s, same size and threads); "
             "vs fp32 = params/s / AdamW fp32 (SIMD) params/s\n\n");
  fmt::print("{:>6} {:>7}  {:<32} {:>7} {:>10} {:>11} {:>8} {:>10} {:>6} {:>8}\n", "params",
             "threads", "kernel", "B/param", "median ms", "Mparams/s", "GB/s", "limit GB/s",
             "ratio", "vs fp32");
  for (const std::size_t n : sizes) {
    for (const int threads : thread_counts) {
      kernels::set_num_threads(threads);
      std::vector<std::vector<double>> times(kernels_list.size());
      for (const auto& k : kernels_list) k.run(n);  // warm-up
      for (int it = 0; it < iters; ++it) {
        for (std::size_t r = 0; r < kernels_list.size(); ++r) {
          times[r].push_back(seconds_of(kernels_list[r].run, n));
        }
      }
      const double limit_bps = kernels_list[0].bytes_per_param * n / median(times[0]);
      const double fp32_pps = n / median(times[1]);
      for (std::size_t r = 0; r < kernels_list.size(); ++r) {
        const double t = median(times[r]);
        const double pps = n / t;
        const double bps = pps * kernels_list[r].bytes_per_param;
        fmt::print(
            "{:>6} {:>7}  {:<32} {:>7.2f} {:>10.2f} {:>11.0f} {:>8.1f} {:>10.1f} {:>6.2f} {:>8.2f}\n",
            count_name(n), threads, kernels_list[r].name, kernels_list[r].bytes_per_param, t * 1e3,
            pps / 1e6, bps / 1e9, limit_bps / 1e9, bps / limit_bps, pps / fp32_pps);
      }
    }
  }
  kernels::set_num_threads(0);
  return 0;
}
