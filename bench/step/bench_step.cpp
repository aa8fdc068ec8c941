// bench_step: training-step time of a synthetic model at ZeRO stages 0-3,
// with overlap_comm on and off, and how the time splits into compute,
// waiting on communication, and the step() call (bench/step/README.md).
//
// Model: --units units, each one fp32 parameter W of --rows x --cols
// elements (default 16 units of 2048 x 4096 = 8M). Per unit and direction
// the "compute" is one real matrix multiply (OpenBLAS cblas_sgemm):
// forward Y = X W (X: batch x rows), backward dW += X^T dY (the weight
// gradient, accumulated into engine.grad()). The batch is chosen at start
// so that one unit's multiply takes about as long as one unit's all-gather
// measured in the same run (the regime where overlap can hide
// communication). Every rank runs the same calls (SPMD).
//
// Per stage and overlap setting: --warmup steps, then --steps timed steps;
// each step is forward over the units (unshard, gemm, reshard), backward in
// reverse (unshard, gemm, reduce_gradients, reshard), step(). Timed from
// outside the engine: compute = time in cblas_sgemm; comm wait = time inside
// unshard/reshard/reduce_gradients; step() = time inside step(), of which
// "optimizer" is the AdamW pass over this rank's shard measured alone on the
// same sizes (so step() - optimizer = the reductions, norm all-reduce and
// all-gathers step() waits for). Figures are the mean over ranks of each
// rank's median over steps; ratio = step time / stage 0's at the same
// overlap setting.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "comm/communicator.h"
#include "core/aligned_buffer.h"
#include "optimizer/optimizer.h"
#include "runtime/engine/engine.h"
#include "zs_config.h"

using namespace zeroshard;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  int units = 16;
  int rows = 2048;
  int cols = 4096;
  int batch = 0;  // 0: calibrate against one unit's all-gather
  int warmup = 1;
  int steps = 3;
  std::int64_t bucket = 0;  // 0: one unit's elements
  std::vector<int> stages{0, 1, 2, 3};
};

// Time split of one step on this rank (seconds).
struct Split {
  double total = 0, compute = 0, comm = 0, step = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Mean over ranks.
double rank_mean(Communicator& comm, double x) {
  comm.all_reduce(&x, 1, DType::f64, ReduceOp::sum);
  return x / comm.world_size();
}

double rank_max(Communicator& comm, double x) {
  comm.all_reduce(&x, 1, DType::f64, ReduceOp::max);
  return x;
}

void gemm_forward(const float* x, const float* w, float* y, int batch, int rows, int cols) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, cols, rows, 1.0f, x, rows, w, cols, 0.0f, y, cols);
}

void gemm_weight_grad(const float* x, const float* dy, float* dw, int batch, int rows, int cols) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, cols, batch, 1.0f, x, rows, dy, cols, 1.0f, dw, cols);
}

// Median seconds of one unit's all-gather (blocking), max over ranks.
double time_all_gather(Communicator& comm, std::size_t unit_elems) {
  const std::size_t shard = unit_elems / static_cast<std::size_t>(comm.world_size());
  AlignedBuffer<float> full(shard * static_cast<std::size_t>(comm.world_size()));
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    comm.all_gather(full.data() + static_cast<std::size_t>(comm.rank()) * shard, full.data(), shard, DType::f32);
    t.push_back(seconds_since(t0));
  }
  return rank_max(comm, median(t));
}

// Median seconds of one forward gemm at `batch`, max over ranks (all ranks
// compute at once, as in the step).
double time_gemm(Communicator& comm, const Options& o, int batch) {
  AlignedBuffer<float> w(static_cast<std::size_t>(o.rows) * o.cols), x(static_cast<std::size_t>(batch) * o.rows),
      y(static_cast<std::size_t>(batch) * o.cols);
  std::fill(w.data(), w.data() + w.size(), 0.01f);
  std::fill(x.data(), x.data() + x.size(), 0.5f);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    gemm_forward(x.data(), w.data(), y.data(), batch, o.rows, o.cols);
    t.push_back(seconds_since(t0));
  }
  return rank_max(comm, median(t));
}

// Seconds of AdamW over `n` fp32 elements (the engine's update of one
// rank's shard), median of 3, mean over ranks.
double time_optimizer(Communicator& comm, const OptimizerHyper& h, std::size_t n) {
  AlignedBuffer<float> p(n), g(n), m(n), v(n);
  std::fill(g.data(), g.data() + n, 1e-3f);
  float* states[2] = {m.data(), v.data()};
  std::vector<double> t;
  for (int i = 1; i <= 3; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    optimizer_update(h, h.lr, h.weight_decay, i, 1.0f, p.data(), g.data(), states, n);
    t.push_back(seconds_since(t0));
  }
  return rank_mean(comm, median(t));
}

// What the engine observes (--tracing compares them): nothing, the step
// breakdown (wall_clock_breakdown), the breakdown and the Chrome trace's spans.
enum class Observe { off, breakdown, trace };

Split run(Communicator& comm, const Options& o, int stage, bool overlap, int batch, const OptimizerHyper& h,
          Observe observe = Observe::off) {
  const std::size_t elems = static_cast<std::size_t>(o.rows) * o.cols;
  EngineConfig cfg;
  cfg.observe.wall_clock_breakdown = observe != Observe::off;
  cfg.observe.trace = observe == Observe::trace;
  cfg.steps_per_print = 1 << 30;  // measured, not printed
  cfg.zero.stage = stage;
  cfg.optimizer = h;
  cfg.zero.overlap_comm = overlap;
  cfg.zero.reduce_bucket_size = o.bucket > 0 ? o.bucket : static_cast<std::int64_t>(elems);
  cfg.zero.allgather_bucket_size = cfg.zero.reduce_bucket_size;
  Engine e(cfg, comm);
  std::vector<UnitId> units;
  std::vector<ParamId> w;
  for (int u = 0; u < o.units; ++u) {
    units.push_back(e.add_unit(fmt::format("layer{}", u)));
    w.push_back(e.add_parameter(units.back(), fmt::format("layer{}.weight", u), {o.rows, o.cols}));
  }
  e.finalize();
  std::vector<float> init(elems, 0.01f);
  for (ParamId p : w) e.set_parameter(p, init);
  std::vector<AlignedBuffer<float>> x;  // each unit's input, kept for backward
  for (int u = 0; u < o.units; ++u) {
    x.emplace_back(static_cast<std::size_t>(batch) * o.rows);
    std::fill(x.back().data(), x.back().data() + x.back().size(), 0.5f + 0.01f * u);
  }
  AlignedBuffer<float> y(static_cast<std::size_t>(batch) * o.cols), dy(y.size());
  std::fill(dy.data(), dy.data() + dy.size(), 1e-3f);

  std::vector<Split> splits;
  for (int it = 0; it < o.warmup + o.steps; ++it) {
    Split sp;
    comm.barrier();
    const auto t_step = Clock::now();
    auto timed = [](double& acc, auto&& f) {
      const auto t0 = Clock::now();
      f();
      acc += seconds_since(t0);
    };
    for (int u = 0; u < o.units; ++u) {
      timed(sp.comm, [&] { e.unshard(units[u]); });
      timed(sp.compute, [&] {
        const auto span = e.trace("forward");
        gemm_forward(x[u].data(), e.param(w[u]).data(), y.data(), batch, o.rows, o.cols);
      });
      timed(sp.comm, [&] { e.reshard(units[u]); });
    }
    for (int u = o.units - 1; u >= 0; --u) {
      timed(sp.comm, [&] { e.unshard(units[u]); });
      timed(sp.compute, [&] {
        const auto span = e.trace("backward");
        gemm_weight_grad(x[u].data(), dy.data(), e.grad(w[u]).data(), batch, o.rows, o.cols);
      });
      timed(sp.comm, [&] {
        e.reduce_gradients(units[u]);
        e.reshard(units[u]);
      });
    }
    timed(sp.step, [&] { e.step(); });
    sp.total = seconds_since(t_step);
    if (it >= o.warmup) splits.push_back(sp);
  }
  auto med = [&](double Split::*f) {
    std::vector<double> v;
    for (const Split& s : splits) v.push_back(s.*f);
    return rank_mean(comm, median(v));
  };
  return Split{med(&Split::total), med(&Split::compute), med(&Split::comm), med(&Split::step)};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("bench_step: step time at ZeRO stages 0-3, overlap_comm on and off (bench/README.md)");
  app.add_option("--units", o.units, "units (layers)");
  app.add_option("--rows", o.rows, "rows of each unit's weight");
  app.add_option("--cols", o.cols, "columns of each unit's weight");
  app.add_option("--batch", o.batch, "gemm batch rows (0: match one unit's all-gather time)");
  app.add_option("--warmup", o.warmup, "untimed steps per configuration");
  app.add_option("--steps", o.steps, "timed steps per configuration (median)");
  app.add_option("--bucket", o.bucket, "reduce/allgather_bucket_size in elements (0: one unit)");
  app.add_option("--stages", o.stages, "stages to run");
  int tracing_rounds = 0;
  app.add_option("--tracing", tracing_rounds,
                 "instead of the table: step time with tracing off, with wall_clock_breakdown, and with the "
                 "trace's spans too, over this many interleaved rounds (overlap on, the first --stages entry)");
  CLI11_PARSE(app, argc, argv);

  auto comm = make_world_communicator();
  const bool root = comm->rank() == 0;
  const std::size_t elems = static_cast<std::size_t>(o.rows) * o.cols;
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-4f;

  const double t_gather = time_all_gather(*comm, elems);
  int batch = o.batch;
  double t_gemm = 0;
  if (batch <= 0) {
    const int probe = 64;
    const double t_probe = time_gemm(*comm, o, probe);
    batch = std::max(1, static_cast<int>(std::lround(probe * t_gather / t_probe)));
  }
  t_gemm = time_gemm(*comm, o, batch);
  const std::size_t shard = elems / static_cast<std::size_t>(comm->world_size());
  const double t_opt_shard = time_optimizer(*comm, h, shard), t_opt_full = time_optimizer(*comm, h, elems);
  if (root) {
    fmt::print("bench_step: {} ranks, {} units of {} x {} = {} fp32 params ({:.1f} M total), AdamW; "
               "bucket {} elements\n",
               comm->world_size(), o.units, o.rows, o.cols, elems, o.units * elems / 1e6,
               o.bucket > 0 ? o.bucket : static_cast<std::int64_t>(elems));
    fmt::print("calibration: one unit's all-gather {:.2f} ms; gemm batch {} -> {:.2f} ms per unit and direction; "
               "AdamW over one unit: {:.2f} ms (shard), {:.2f} ms (full)\n",
               1e3 * t_gather, batch, 1e3 * t_gemm, 1e3 * t_opt_shard, 1e3 * t_opt_full);
    fmt::print("times: ms per step, mean over ranks of each rank's median of {} steps; optimizer = AdamW pass "
               "alone on this stage's sizes; ratio = step / stage 0 step at the same overlap\n\n",
               o.steps);
  }
  if (tracing_rounds > 0) {
    // Interleaved rounds, so that drift of the machine hits every setting alike.
    std::vector<double> t[3];
    for (int round = 0; round < tracing_rounds; ++round) {
      for (const Observe m : {Observe::off, Observe::breakdown, Observe::trace}) {
        t[static_cast<int>(m)].push_back(run(*comm, o, o.stages.front(), true, batch, h, m).total);
      }
    }
    if (root) {
      const double off = median(t[0]);
      fmt::print("tracing (stage {}, overlap on; tracer compiled in: {}): median over {} rounds of the step time\n",
                 o.stages.front(), ZS_TRACING ? "yes" : "no (-Dtracing=false)", tracing_rounds);
      fmt::print("  off                      {:9.3f} ms\n", 1e3 * off);
      fmt::print("  wall_clock_breakdown     {:9.3f} ms  ratio to off {:.3f}\n", 1e3 * median(t[1]), median(t[1]) / off);
      fmt::print("  breakdown + trace spans  {:9.3f} ms  ratio to off {:.3f}\n", 1e3 * median(t[2]), median(t[2]) / off);
    }
    return 0;
  }
  if (root) {
    fmt::print("{:>5} {:>7} {:>9} {:>9} {:>10} {:>9} {:>10} {:>12} {:>7}\n", "stage", "overlap", "step ms",
               "compute", "comm wait", "step()", "optimizer", "step()-opt", "ratio");
  }
  for (bool overlap : {true, false}) {
    double base = 0;
    for (int stage : o.stages) {
      const Split sp = run(*comm, o, stage, overlap, batch, h);
      if (stage == o.stages.front()) base = sp.total;
      const double opt = o.units * (stage == 0 ? t_opt_full : t_opt_shard);
      if (root) {
        fmt::print("{:>5} {:>7} {:>9.1f} {:>9.1f} {:>10.1f} {:>9.1f} {:>10.1f} {:>12.1f} {:>7.2f}\n", stage,
                   overlap ? "on" : "off", 1e3 * sp.total, 1e3 * sp.compute, 1e3 * sp.comm, 1e3 * sp.step, 1e3 * opt,
                   1e3 * (sp.step - opt), sp.total / base);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
