// bench_infinity: the GPT example (examples/gpt) trained with its state in
// swap files, set against the limits of this machine measured in the same
// run (ZeRO-Infinity's setting: Rajbhandari et al., SC 2021).
//
//   mpirun -np N bench_infinity --config CONFIG.json [--layers 48 --dim 1600 --heads 25 ...]
//
// CONFIG is a ds_config with offload_param and offload_optimizer on nvme
// (bench/infinity/gpt2_xl_nvme.json). Every rank, at once:
//   1. the disk: a swap file of the size of one sub-group's fp32 array,
//      written and read through the swap files' own code (O_DIRECT, the
//      temporary file, fdatasync and rename: runtime/plan/calibrate.h), the
//      slowest rank's time, so the figure is each rank's share of the disk;
//   2. the cores: the fp32 GEMM rate of the loop's own products (the
//      micro-batch's tokens through a layer's qkv, output and MLP
//      projections and the head, forward and backward: bench/gemm_rate.h;
//      every layer has the same shapes);
//   3. the steps: the GPT at stage 3, activation checkpointing on, `--warmup`
//      untimed steps then `--steps` timed ones, with their swap bytes read
//      and written (Engine::offload_stats, totals over the timed steps) and
//      each one's loss; `--overlap-optimizer-step` runs each optimizer step
//      behind the next forward (zeroshard.overlap_optimizer_step).
// It prints the median step time beside the I/O-bound time (the step's
// bytes over the disk's read and write rates) and the compute-bound time
// (the step's FLOPs, TransformerShape::hardware_flops_per_token with full
// recomputation, over the GEMM rate), and the ratio of the step to the
// larger of the two (issue 40's goal: at most 1.5).
//
// Memory: each rank's peak RSS (VmHWM) beside what explains it: the RSS
// before the engine (MPI, libraries, the text), the ledger's peak device
// bytes and the larger of its peak host bytes and the host pool's buffers
// (leased or cached, resident from their first use: Engine::host_pool_bytes),
// and the loop's own working set (the
// GPT's kept activations beyond the store's, and one unit's fp32 values
// and gradients, 8 bytes an element of the largest unit). With
// `--save-dir` a checkpoint is saved and loaded back, each with its time
// and its peak RSS (VmHWM reset through /proc/self/clear_refs first).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench/gemm_rate.h"
#include "bench/median.h"
#include "bench/mpi_main.h"
#include "comm/communicator.h"
#include "comm/mesh.h"
#include "core/error.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_corpus.h"
#include "examples/report/process_memory.h"
#include "kernels/cpu/simd_targets.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"
#include "runtime/plan/calibrate.h"

#if ZS_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace {

using namespace zeroshard;
using examples::Gpt;
using examples::GptShape;
using examples::process_status_bytes;
using examples::reset_peak_rss;

struct Options {
  std::string config_path;
  GptShape shape{.layers = 48, .heads = 25, .dim = 1600, .context = 64, .vocab = 256};
  int seq = 64;
  int steps = 5, warmup = 1;
  std::string data_dir = "/usr/share/games/fortunes";
  std::uint64_t seed = 1234;
  std::string save_dir;
  bool overlap = false;  ///< --overlap-optimizer-step
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double gib(double b) { return b / (1024.0 * 1024 * 1024); }

/// Every rank's `v`, in rank order, on every rank. Collective.
std::vector<double> gather(Communicator& comm, double v) {
  std::vector<double> all(static_cast<std::size_t>(comm.world_size()));
  comm.all_gather(&v, all.data(), 1, DType::f64);
  return all;
}

std::string per_rank(const std::vector<double>& v, double scale, const char* fmt_spec) {
  std::string out;
  for (std::size_t r = 0; r < v.size(); ++r)
    out += fmt::format(fmt::runtime(" r{}=" + std::string(fmt_spec)), r, v[r] * scale);
  return out;
}

int run(const Options& o) {
  auto world = make_world_communicator();
  const int n = world->world_size(), rank = world->rank();
#if ZS_BENCH_OPENBLAS
  if (n > 1) openblas_set_num_threads(1);  // as examples/gpt: one BLAS thread a rank
#endif
  Mesh mesh(*world, MeshShape{n, 1, 1});
  ConfigOptions co;
  co.world_size = n;
  co.hidden_size = o.shape.dim;
  EngineConfig config = EngineConfig::from_file(o.config_path, co);
  if (config.offload.param.device != OffloadDevice::nvme || config.offload.optimizer.device != OffloadDevice::nvme ||
      config.zero.stage != 3) {
    throw ConfigError(
        fmt::format("{}: bench_infinity wants zero_optimization.stage 3 with offload_param and "
                    "offload_optimizer on nvme",
                    o.config_path));
  }
  if (config.gradient_accumulation_steps != 1) {
    throw ConfigError(fmt::format("{}: gradient_accumulation_steps must be 1 here", o.config_path));
  }
  config.observe.wall_clock_breakdown = true;  // each step's parts, printed beside it
  if (o.overlap) config.overlap_optimizer_step = true;
  const int micro_batch = static_cast<int>(config.train_micro_batch_size_per_gpu);
  if (o.seq > o.shape.context) throw ConfigError(fmt::format("--seq {} exceeds --context {}", o.seq, o.shape.context));
  const examples::TextCorpus corpus = examples::load_text_corpus(o.data_dir, 0.05);
  const double baseline_rss = process_status_bytes("VmRSS");

  // 1. The disk, at the swap files' size: one sub-group's fp32 array.
  CalibrateOptions probe;
  probe.nvme_path = config.offload.optimizer.nvme_path;
  probe.optimizer_elements = std::size_t{1} << 20;
  probe.max_collective_bytes = std::size_t{1} << 20;
  const auto sub_group = static_cast<std::size_t>(config.offload.sub_group_size);
  probe.disk_bytes = (std::min<std::size_t>(sub_group, std::size_t{1} << 28) * 4 + 4095) / 4096 * 4096;
  const MachineRates rates = calibrate(*world, probe);

  // 2. The cores, with the loop's products.
  TransformerShape t;
  t.kind = TransformerKind::gpt;
  t.layers = o.shape.layers, t.hidden = o.shape.dim, t.heads = o.shape.heads, t.seq = o.seq;
  t.vocab = o.shape.vocab, t.positions = o.shape.context, t.tied = 1;
  t = t.resolved();
  const auto tokens = static_cast<std::size_t>(micro_batch) * static_cast<std::size_t>(o.seq);
  // Every layer has the same four products: one layer and the head give the
  // rate (the whole model's 48 layers would take minutes a pass).
  TransformerShape one_layer = t;
  one_layer.layers = 1;
  const double gemm = bench::gemm_rate(bench::model_gemms(one_layer), tokens, *world);
  const double step_flops = static_cast<double>(tokens) * t.hardware_flops_per_token(Recompute::full);

  // 3. The steps.
  Engine engine(config, mesh);
  Gpt gpt(engine, mesh, o.shape);
  gpt.set_activation_checkpointing(true);
  engine.finalize();
  if (gpt.full_parameter_count() != t.parameter_count()) {
    throw InvariantError(fmt::format("the GPT has {} parameters, its TransformerShape {}", gpt.full_parameter_count(),
                                     t.parameter_count()));
  }
  auto t0 = std::chrono::steady_clock::now();
  gpt.initialize(o.seed);
  world->barrier();
  const double init_s = seconds_since(t0);
  std::mt19937_64 gen(o.seed * 1000003ULL);
  const std::size_t row = static_cast<std::size_t>(o.seq + 1) * static_cast<std::size_t>(micro_batch);
  std::vector<double> step_s, losses;
  // The timed steps' swap bytes, from the totals before the first and after
  // the last: reading them waits for a deferred optimizer step
  // (zeroshard.overlap_optimizer_step), so not between steps.
  OffloadStats first{};
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) first = engine.offload_stats();
    const auto global = examples::sample_windows(corpus.train, micro_batch * n, o.seq, gen);
    const std::vector<std::int32_t> mine(
        global.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(rank)),
        global.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(rank + 1)));
    world->barrier();
    t0 = std::chrono::steady_clock::now();
    double loss = gpt.train_micro_batch(mine, micro_batch, o.seq, engine.loss_scale());
    engine.step();
    world->barrier();
    const double sec = seconds_since(t0);
    world->all_reduce(&loss, 1, DType::f64, ReduceOp::sum);
    losses.push_back(loss / n);
    if (rank == 0) {
      const StepFigures& f = engine.last_step_figures();
      fmt::print(
          "step {:3d}  loss {:.4f}  {:.2f} s  (rank 0: compute {:.1f} s, comm wait {:.1f} s, optimizer {:.1f} s, "
          "I/O wait {:.1f} s, other {:.1f} s){}\n",
          s + 1, losses.back(), sec, f.compute / 1e3, f.comm_wait / 1e3, f.optimizer / 1e3, f.io_wait / 1e3,
          f.other / 1e3, s < o.warmup ? " (warm-up)" : "");
    }
    std::fflush(stdout);
    if (s < o.warmup) continue;
    step_s.push_back(sec);
  }
  const OffloadStats last = engine.offload_stats();
  const double step = bench::median(step_s);
  const double reads = static_cast<double>(last.bytes_read - first.bytes_read) / o.steps;
  const double writes = static_cast<double>(last.bytes_written - first.bytes_written) / o.steps;
  const double io_s = reads / rates.disk_read + writes / rates.disk_write;
  const double compute_s = step_flops / gemm;

  // Memory.
  const MemoryLedger& ledger = engine.ledger();
  const double peak_rss = process_status_bytes("VmHWM");
  const double ledger_host = static_cast<double>(ledger.peak_total(MemTier::host));
  const double ledger_device = static_cast<double>(ledger.peak_total(MemTier::device));
  // The host pool's buffers (leased at the host peak, cached since) are
  // resident from their first use on: the larger of the two.
  const double pool = static_cast<double>(engine.host_pool_bytes());
  std::size_t unit_elements = 0;
  for (UnitId u = 0; u < static_cast<UnitId>(engine.layout().units().size()); ++u) {
    std::size_t e = 0;
    for (ParamId p : engine.layout().unit(u).params) e += engine.layout().param(p).numel;
    unit_elements = std::max(unit_elements, e);
  }
  const double loop = static_cast<double>(gpt.peak_activation_bytes()) -
                      static_cast<double>(ledger.peak(MemCategory::activations)) +
                      8.0 * static_cast<double>(unit_elements);
  const double explained = baseline_rss + std::max(ledger_host, pool) + ledger_device + loop;

  // Save and load.
  double save_s = 0, load_s = 0, save_rss = 0, load_rss = 0, before_save_rss = 0;
  if (!o.save_dir.empty()) {
    before_save_rss = process_status_bytes("VmRSS");
    reset_peak_rss();
    world->barrier();
    t0 = std::chrono::steady_clock::now();
    engine.save_checkpoint(o.save_dir, {{"bench", "bench_infinity"}}, 1, "bench");
    save_s = seconds_since(t0);
    save_rss = process_status_bytes("VmHWM");
    reset_peak_rss();
    world->barrier();
    t0 = std::chrono::steady_clock::now();
    engine.load_checkpoint(o.save_dir, "bench");
    load_s = seconds_since(t0);
    load_rss = process_status_bytes("VmHWM");
  }

  const auto all_rss = gather(*world, peak_rss), all_explained = gather(*world, explained),
             all_host = gather(*world, ledger_host), all_device = gather(*world, ledger_device),
             all_base = gather(*world, baseline_rss), all_pool = gather(*world, pool), all_loop = gather(*world, loop),
             all_save = gather(*world, save_rss), all_load = gather(*world, load_rss),
             all_before_save = gather(*world, before_save_rss);
  const double nvme = static_cast<double>(ledger.current_total(MemTier::nvme));
  double nvme_all = nvme;
  world->all_reduce(&nvme_all, 1, DType::f64, ReduceOp::sum);
  if (rank != 0) return 0;
  fmt::print(
      "\nbench_infinity: {} ranks, {} ({} kernel threads), GPT {} layers x width {} x {} heads, {} parameters, "
      "micro-batch {} x {} tokens per rank, stage 3, {} parameters, params and optimizer state on nvme\n",
      n, kernels::simd_target_name(), rates.threads, o.shape.layers, o.shape.dim, o.shape.heads,
      gpt.full_parameter_count(), micro_batch, o.seq, dtype_name(config.compute_dtype));
  fmt::print("nvme: {:.2f} GiB of swap files in all ({:.2f} GiB a rank); initialize {:.1f} s\n", gib(nvme_all),
             gib(nvme), init_s);
  fmt::print("disk (a {} MiB swap file, every rank at once): read {:.0f} MB/s, write {:.0f} MB/s a rank\n",
             probe.disk_bytes >> 20, rates.disk_read / 1e6, rates.disk_write / 1e6);
  fmt::print("cores: the loop's GEMMs at {:.1f} GFLOP/s a rank (fp32, {} tokens)\n", gemm / 1e9, tokens);
  fmt::print("loss:");
  for (double l : losses) fmt::print(" {:.4f}", l);
  fmt::print("\nstep (median of {}): {:.2f} s; reads {:.2f} GB, writes {:.2f} GB, {:.3g} FLOPs a rank\n", step_s.size(),
             step, reads / 1e9, writes / 1e9, step_flops);
  fmt::print("I/O-bound {:.2f} s, compute-bound {:.2f} s, both in turn {:.2f} s\n", io_s, compute_s, io_s + compute_s);
  fmt::print("step / max(I/O, compute) = {:.2f} (goal <= 1.5)\n", step / std::max(io_s, compute_s));
  auto in_gib = [](const std::vector<double>& v) { return per_rank(v, 1.0 / 1073741824.0, "{:.3f}"); };
  std::vector<double> ratio;
  for (std::size_t i = 0; i < all_rss.size(); ++i) ratio.push_back(all_explained[i] / all_rss[i]);
  fmt::print(
      "\nmemory a rank (GiB):\n  peak RSS            {}\n  before the engine   {}\n  ledger host peak    {}\n"
      "  ledger device peak  {}\n  host pool (all)     {}\n  loop working set    {}\n  explained           {}\n"
      "  explained / RSS     {}\n",
      in_gib(all_rss), in_gib(all_base), in_gib(all_host), in_gib(all_device), in_gib(all_pool), in_gib(all_loop),
      in_gib(all_explained), per_rank(ratio, 1.0, "{:.3f}"));
  if (!o.save_dir.empty()) {
    fmt::print(
        "\ncheckpoint: save {:.1f} s, load {:.1f} s; RSS (GiB) before the save {}\n  peak during the save {}\n"
        "  peak during the load {}\n",
        save_s, load_s, in_gib(all_before_save), in_gib(all_save), in_gib(all_load));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The GPT with its state on nvme against the disk's and the cores' limits (zeroshard)"};
  app.add_option("--config", o.config_path, "ds_config with offload_param and offload_optimizer on nvme")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--layers", o.shape.layers, "decoder blocks")->check(CLI::Range(1, 1 << 20));
  app.add_option("--heads", o.shape.heads, "attention heads")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dim", o.shape.dim, "model width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--context", o.shape.context, "rows of the position table")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seq", o.seq, "tokens per sequence")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::Range(0, 1000));
  app.add_option("--data-dir", o.data_dir, "folder of fortune text files");
  app.add_option("--seed", o.seed, "seed of the initialisation and the data");
  app.add_option("--save-dir", o.save_dir, "save a checkpoint here after the steps and load it back");
  app.add_flag("--overlap-optimizer-step", o.overlap,
               "zeroshard.overlap_optimizer_step on: the optimizer's swap behind the next forward");
  CLI11_PARSE(app, argc, argv);
  return zeroshard::bench::run_or_abort("bench_infinity", [&] { return run(o); });
}
