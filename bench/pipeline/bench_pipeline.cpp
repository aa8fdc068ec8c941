// bench_pipeline: the pipeline bubble and the activation memory per stage
// of the GPipe and 1F1B schedules (parallel/pipeline_schedule.h) as the
// PipelineExecutor (parallel/pipeline_executor.h) runs them, against their
// closed forms (bench/pipeline/README.md). Run under mpirun with p
// ranks: one pipeline of p stages (Mesh dp = tp = 1, pp = p).
//
// Every stage is the same synthetic layer block: a forward takes t_f
// (--forward-ms, default 8 ms) and a backward t_b = --backward-ratio x t_f
// (default 2). The delays the schedule does not model (a message's
// transfer, a stage's wake-up after its sleep or its message) are a fixed
// time each, so their share of the bubble shrinks as t_f grows: with two
// compilers running beside it on 2 cores, --quick failed 3 of 20 runs at
// t_f = 4 ms and none of 36 at 8 ms (bench/pipeline/README.md).
// By default a stage spends that time asleep (--compute sleep): 4 ranks
// on a 2-core machine then measure the schedule (who waits for whom), not
// the CPU contention of ranks that would all want a core at once.
// (A stage waiting for a message still polls: Open MPI's MPI_Wait spins,
// yielding the core with mpi_yield_when_idle.) --compute spin busy-waits
// instead, which is what a real stage does to its core; with more ranks
// than cores the stages then slow each other down.
//
// Activations: one micro-batch's activation is --activation-bytes of fp32
// (default 256 KiB), the size of the messages between stages. A forward
// allocates a buffer of that size (a std::vector, every element written),
// copies its input into it (stage 0 makes its own input) and keeps it for
// its backward, which frees it. ActivationStash counts the bytes of the
// kept buffers, current and peak per step. The peak must equal the
// schedule's closed form exactly: GPipe keeps all m micro-batches, 1F1B
// stage s at most min(p - s, m). (The executor's own message buffers are
// not counted: they are a pool of a few buffers whatever the schedule.)
// Messages carry small integers of stage, micro-batch and index; the
// gradient a stage returns is its input + 1, so stage s checks that the
// gradient of micro-batch i is its own output of i + 1: a stale or
// misrouted activation or gradient shows up as #wrong.
//
// Bubble: each step starts after a barrier of the pipeline group. The
// step time is from the first stage's start to the last stage's end of
// run(), on one clock (every stage's timeline moved onto stage 0's steady
// clock by comm/traced/clock_sync.h's offset); a stage's idle time is the step
// time minus its forward and backward time (PipelineTimeline::compute_ns),
// its bubble fraction idle / step time, as in simulate_pipeline. Reported:
// per stage and the mean over stages, each the median over --steps steps
// after --warmup warm-up steps, beside the formula (p - 1) / (m + p - 1)
// and simulate_pipeline(t_f, t_b)'s value. Idle time also holds the
// messages' transfer and the stages' wake-up latency, which the formula
// leaves out.
//
// Exit status 1 (on every rank) when a stage's peak differs from its
// closed form in any step, a message element is wrong, or a mean bubble
// differs from the formula by more than --tolerance (absolute). Other work
// on the machine delays the stages' wake-ups and can push one row's bubble
// out for a while, so a row outside the tolerance is measured again, up to
// --attempts runs in all (the last is reported): a schedule that is wrong
// is off in every run.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/mpi_main.h"
#include "comm/communicator.h"
#include "comm/mesh.h"
#include "comm/traced/clock_sync.h"
#include "core/error.h"
#include "kernels/cpu/simd_targets.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"

namespace {

using namespace zeroshard;

/// How the synthetic stage spends its forward and backward time.
enum class ComputeMode {
  sleep,  ///< std::this_thread::sleep_until the end (the default)
  spin,   ///< busy-wait on the steady clock until the end
};

/// Command-line options (see main()).
struct Options {
  double forward_ms = 8.0;                        ///< t_f
  double backward_ratio = 2.0;                    ///< t_b / t_f
  std::size_t activation_bytes = 256 * 1024;      ///< one micro-batch's activation
  std::string compute = "sleep";                  ///< "sleep" or "spin" (ComputeMode)
  std::string schedule = "all";                   ///< "all", "gpipe" or "1f1b"
  std::vector<int> micro_batches = {1, 2, 4, 8};  ///< the values of m
  int steps = 20;                                 ///< timed steps per row
  int warmup = 3;                                 ///< untimed steps per row first
  double tolerance = 0.05;                        ///< |mean bubble - formula| allowed
  int attempts = 3;                               ///< runs of a row before its bubble fails
  bool quick = false;                             ///< --quick (the 'bench' suite tests)
};

/// The activations one stage keeps from its forwards for its backwards,
/// with the bytes held now and the most held since reset_peak().
class ActivationStash {
 public:
  /// Keeps micro-batch i's activation until take(i). Throws InvariantError
  /// if i is kept already.
  void keep(int i, std::vector<float> activation) {
    const std::size_t bytes = activation.size() * sizeof(float);
    ZS_CHECK(kept_.emplace(i, std::move(activation)).second,
             "activation stash: micro-batch {} is kept twice", i);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }
  /// Hands back micro-batch i's activation (the caller frees it). Throws
  /// InvariantError if it is not kept.
  std::vector<float> take(int i) {
    auto it = kept_.find(i);
    ZS_CHECK(it != kept_.end(), "activation stash: backward of micro-batch {} without its forward",
             i);
    std::vector<float> a = std::move(it->second);
    kept_.erase(it);
    current_ -= a.size() * sizeof(float);
    return a;
  }
  /// Starts a new peak from the bytes held now.
  void reset_peak() { peak_ = current_; }
  /// Bytes of the activations kept now.
  std::size_t current_bytes() const { return current_; }
  /// Most bytes kept at once since reset_peak().
  std::size_t peak_bytes() const { return peak_; }

 private:
  std::map<int, std::vector<float>> kept_;
  std::size_t current_ = 0;
  std::size_t peak_ = 0;
};

/// Spends the time until `deadline` as `mode` says.
void wait_until(std::chrono::steady_clock::time_point deadline, ComputeMode mode) {
  if (mode == ComputeMode::sleep) {
    std::this_thread::sleep_until(deadline);
    return;
  }
  while (std::chrono::steady_clock::now() < deadline) {
  }
}

/// Element k of the activation stage s sends for micro-batch i (stage -1:
/// stage 0's own input): a small integer, exact in fp32.
float activation_value(int s, int i, std::size_t k) {
  return static_cast<float>(
      (static_cast<std::size_t>(s + 1) * 131 + static_cast<std::size_t>(i) * 17 + k) % 251);
}

/// One stage of the synthetic pipeline: timed forward and backward that
/// keep and free a real activation buffer (see the file comment).
struct SyntheticPipelineStage {
  int pp_rank = 0;        ///< this pipeline stage
  int pp_size = 1;        ///< pipeline stages
  std::size_t count = 0;  ///< fp32 elements of one activation
  std::chrono::nanoseconds forward_time{0};
  std::chrono::nanoseconds backward_time{0};
  ComputeMode mode = ComputeMode::sleep;
  ActivationStash stash;
  std::uint64_t wrong = 0;  ///< message elements that differed from their value

  /// The executor's view of this stage: input from stage - 1 and output to
  /// stage + 1 of `count` fp32 elements (none at the ends).
  PipelineStageFunctions functions() {
    PipelineStageFunctions f;
    f.dtype = DType::f32;
    f.input_count = pp_rank > 0 ? count : 0;
    f.output_count = pp_rank < pp_size - 1 ? count : 0;
    f.forward = [this](int i, const void* input, void* output) {
      forward(i, static_cast<const float*>(input), static_cast<float*>(output));
    };
    f.backward = [this](int i, const void* grad_output, void* grad_input) {
      backward(i, static_cast<const float*>(grad_output), static_cast<float*>(grad_input));
    };
    return f;
  }

  /// Keeps micro-batch i's input (checked against the previous stage's
  /// values) and writes this stage's output, taking forward_time in all.
  void forward(int i, const float* input, float* output) {
    const auto deadline = std::chrono::steady_clock::now() + forward_time;
    std::vector<float> kept(count);
    for (std::size_t k = 0; k < count; ++k) {
      const float want = activation_value(pp_rank - 1, i, k);
      if (input != nullptr) {
        kept[k] = input[k];
        wrong += input[k] != want;
      } else {
        kept[k] = want;
      }
    }
    stash.keep(i, std::move(kept));
    if (output != nullptr) {
      for (std::size_t k = 0; k < count; ++k) output[k] = activation_value(pp_rank, i, k);
    }
    wait_until(deadline, mode);
  }

  /// Frees micro-batch i's kept input after checking the incoming gradient
  /// (this stage's output + 1) and sending back input + 1, taking
  /// backward_time in all.
  void backward(int i, const float* grad_output, float* grad_input) {
    const auto deadline = std::chrono::steady_clock::now() + backward_time;
    {
      const std::vector<float> kept = stash.take(i);
      for (std::size_t k = 0; k < count; ++k) {
        if (grad_output != nullptr) wrong += grad_output[k] != activation_value(pp_rank, i, k) + 1.0f;
        if (grad_input != nullptr) grad_input[k] = kept[k] + 1.0f;
      }
    }  // the activation is freed here
    wait_until(deadline, mode);
  }
};

/// The median of `v` (0 for an empty v).
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 == 1 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

/// (p - 1) / (m + p - 1): the bubble fraction of both schedules with equal
/// stages and free communication.
double bubble_formula(int p, int m) {
  return static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
}

/// The micro-batches of activations stage s of p keeps at its peak: m for
/// GPipe, min(p - s, m) for 1F1B.
int peak_formula(PipelineScheduleKind kind, int p, int s, int m) {
  return kind == PipelineScheduleKind::gpipe ? m : std::min(p - s, m);
}

/// What one (schedule, m) run gives, the same on every rank.
struct RunResult {
  PipelineScheduleKind kind = PipelineScheduleKind::gpipe;
  int m = 1;
  double formula = 0;                           ///< (p - 1) / (m + p - 1)
  double simulated = 0;                         ///< simulate_pipeline(t_f, t_b).bubble_fraction()
  double step_ms = 0;                           ///< median measured step time
  double simulated_ms = 0;                      ///< simulate_pipeline's makespan
  double mean_bubble = 0;                       ///< median over steps of the mean over stages
  std::vector<double> pipeline_stage_bubble;    ///< per stage, median over steps
  std::vector<std::size_t> peak_bytes;          ///< per stage, the largest peak of any step
  std::vector<std::size_t> peak_formula_bytes;  ///< per stage
  bool peaks_exact = true;  ///< every step's peak equalled its formula on every stage
  std::uint64_t wrong = 0;  ///< message elements wrong, summed over stages and steps
  int attempts = 1;         ///< runs of this row (the last reported)
};

/// Runs `kind` with m micro-batches for warmup + steps steps on
/// `pipeline_stage`'s executor and gathers every stage's timeline and peak
/// (collective over `pp`). `offset_ns` moves this rank's clock onto stage 0's.
RunResult run_schedule(PipelineScheduleKind kind, int m, const Options& o, Communicator& pp,
                       PipelineExecutor& ex, SyntheticPipelineStage& pipeline_stage,
                       std::int64_t offset_ns) {
  const int p = pp.world_size();
  const auto P = static_cast<std::size_t>(p);
  const PipelineTable table = make_pipeline_table(kind, p, m);
  const auto tf = pipeline_stage.forward_time.count(), tb = pipeline_stage.backward_time.count();
  const PipelineSimulation sim = simulate_pipeline(table, tf, tb);
  RunResult r;
  r.kind = kind;
  r.m = m;
  r.formula = bubble_formula(p, m);
  r.simulated = sim.bubble_fraction();
  r.simulated_ms = static_cast<double>(sim.makespan) / 1e6;
  r.peak_bytes.assign(P, 0);
  r.pipeline_stage_bubble.assign(P, 0.0);
  for (int s = 0; s < p; ++s) {
    r.peak_formula_bytes.push_back(static_cast<std::size_t>(peak_formula(kind, p, s, m)) *
                                   pipeline_stage.count * sizeof(float));
  }
  std::vector<double> step_ms, mean_bubble;
  std::vector<std::vector<double>> pipeline_stage_bubble(P);
  const std::uint64_t wrong_before = pipeline_stage.wrong;
  constexpr std::size_t kFields = 4;  // begin, end (stage 0's clock), compute ns, peak bytes
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    pipeline_stage.stash.reset_peak();
    pp.barrier();
    const PipelineTimeline tl = ex.run(table);
    ZS_CHECK(pipeline_stage.stash.current_bytes() == 0,
             "stage {} keeps {} bytes of activations after the step", pipeline_stage.pp_rank,
             pipeline_stage.stash.current_bytes());
    const std::array<double, kFields> mine = {
        static_cast<double>(tl.begin_ns + offset_ns), static_cast<double>(tl.end_ns + offset_ns),
        static_cast<double>(tl.compute_ns()), static_cast<double>(pipeline_stage.stash.peak_bytes())};
    std::vector<double> all(kFields * P);
    pp.all_gather(mine.data(), all.data(), kFields, DType::f64);
    const auto field = [&](std::size_t s, std::size_t f) { return all[s * kFields + f]; };
    double begin = field(0, 0), end = field(0, 1);
    for (std::size_t s = 0; s < P; ++s) {
      begin = std::min(begin, field(s, 0));
      end = std::max(end, field(s, 1));
      const auto peak = static_cast<std::size_t>(field(s, 3));
      r.peak_bytes[s] = std::max(r.peak_bytes[s], peak);
      r.peaks_exact = r.peaks_exact && peak == r.peak_formula_bytes[s];
    }
    if (step < o.warmup) continue;
    const double step_ns = end - begin;
    double sum = 0;
    for (std::size_t s = 0; s < P; ++s) {
      const double bubble = (step_ns - field(s, 2)) / step_ns;
      pipeline_stage_bubble[s].push_back(bubble);
      sum += bubble;
    }
    mean_bubble.push_back(sum / static_cast<double>(p));
    step_ms.push_back(step_ns / 1e6);
  }
  double wrong_total = static_cast<double>(pipeline_stage.wrong - wrong_before);
  pp.all_reduce(&wrong_total, 1, DType::f64, ReduceOp::sum);
  r.wrong = static_cast<std::uint64_t>(wrong_total);
  r.step_ms = median(step_ms);
  r.mean_bubble = median(mean_bubble);
  for (std::size_t s = 0; s < P; ++s) r.pipeline_stage_bubble[s] = median(pipeline_stage_bubble[s]);
  return r;
}

/// Prints the bubble table (rank 0).
void print_bubbles(const std::vector<RunResult>& results, int p, double tolerance) {
  fmt::print(
      "\n# bubble fraction = idle / step time (median over steps); mean over stages vs "
      "(p - 1) / (m + p - 1) and simulate_pipeline; ok = |mean - formula| <= {:.3f}; runs = "
      "measurements of the row (again while not ok)\n",
      tolerance);
  std::string head =
      fmt::format("{:<8} {:>3} {:>9} {:>9} {:>8} {:>8} {:>8} {:>7} {:>3} {:>4} ", "schedule", "m",
                  "step ms", "sim ms", "formula", "sim", "mean", "diff", "ok", "runs");
  for (int s = 0; s < p; ++s) head += fmt::format(" {:>7}", fmt::format("stage {}", s));
  fmt::print("{}\n", head);
  for (const RunResult& r : results) {
    const double diff = r.mean_bubble - r.formula;
    std::string row = fmt::format(
        "{:<8} {:>3} {:>9.2f} {:>9.2f} {:>8.3f} {:>8.3f} {:>8.3f} {:>+7.3f} {:>3} {:>4} ",
        to_string(r.kind), r.m, r.step_ms, r.simulated_ms, r.formula, r.simulated, r.mean_bubble,
        diff, std::abs(diff) <= tolerance ? "yes" : "NO", r.attempts);
    for (const double b : r.pipeline_stage_bubble) row += fmt::format(" {:>7.3f}", b);
    fmt::print("{}\n", row);
  }
}

/// Prints the peak activation memory table (rank 0).
void print_peaks(const std::vector<RunResult>& results, int p, std::size_t activation_bytes) {
  fmt::print(
      "\n# peak activation memory per stage, KiB measured / KiB formula (GPipe: m, 1F1B: "
      "min(p - s, m) activations of {} KiB); exact = equal in every step; #wrong = message "
      "elements wrong\n",
      static_cast<double>(activation_bytes) / 1024.0);
  std::string head = fmt::format("{:<8} {:>3} ", "schedule", "m");
  for (int s = 0; s < p; ++s) head += fmt::format(" {:>13}", fmt::format("stage {}", s));
  fmt::print("{} {:>5} {:>6}\n", head, "exact", "#wrong");
  for (const RunResult& r : results) {
    std::string row = fmt::format("{:<8} {:>3} ", to_string(r.kind), r.m);
    for (std::size_t s = 0; s < r.peak_bytes.size(); ++s) {
      row += fmt::format(
          " {:>13}", fmt::format("{}/{}", r.peak_bytes[s] / 1024, r.peak_formula_bytes[s] / 1024));
    }
    fmt::print("{} {:>5} {:>6}\n", row, r.peaks_exact ? "yes" : "NO", r.wrong);
  }
}

/// The benchmark on every rank; returns the exit status (the same on every rank).
int run(const Options& o) {
  std::unique_ptr<Communicator> world = make_world_communicator();
  const int p = world->world_size();
  Mesh mesh(*world, MeshShape{1, 1, p});
  Communicator& pp = mesh.pp_group();
  const bool root = pp.rank() == 0;
  const ClockOffset clock = estimate_clock_offset(pp, 8);
  double max_bound = static_cast<double>(clock.bound_ns);
  pp.all_reduce(&max_bound, 1, DType::f64, ReduceOp::max);

  SyntheticPipelineStage pipeline_stage;
  pipeline_stage.pp_rank = pp.rank();
  pipeline_stage.pp_size = p;
  pipeline_stage.count = o.activation_bytes / sizeof(float);
  pipeline_stage.forward_time = std::chrono::nanoseconds(std::llround(o.forward_ms * 1e6));
  pipeline_stage.backward_time =
      std::chrono::nanoseconds(std::llround(o.forward_ms * o.backward_ratio * 1e6));
  pipeline_stage.mode = o.compute == "spin" ? ComputeMode::spin : ComputeMode::sleep;
  PipelineExecutor ex(pp, pipeline_stage.functions());

  std::vector<PipelineScheduleKind> kinds;
  for (const PipelineScheduleKind k :
       {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
    if (o.schedule == "all" || o.schedule == to_string(k)) kinds.push_back(k);
  }
  if (root) {
    const std::string lib = bench::mpi_library_name();
    fmt::print(
        "bench_pipeline: {} stages (dp = tp = 1, pp = {}); {}; {} hardware threads; SIMD "
        "target {} (no kernel runs here)\n",
        p, p, lib, std::thread::hardware_concurrency(), kernels::simd_target_name());
    fmt::print(
        "compute: {} (t_f = {:.2f} ms, t_b = {:.2f} ms); {}\n", o.compute, o.forward_ms,
        o.forward_ms * o.backward_ratio,
        pipeline_stage.mode == ComputeMode::sleep
            ? "stages sleep, so ranks sharing cores measure the schedule, not CPU contention"
            : "stages busy-wait: with more ranks than cores they also measure CPU contention");
    const std::size_t bytes = pipeline_stage.count * sizeof(float);
    fmt::print(
        "activation: {} ({} fp32) per micro-batch and message; {} steps after {} warm-up "
        "per row; clocks aligned to stage 0 within {:.1f} us\n",
        bytes % 1024 == 0 ? fmt::format("{} KiB", bytes / 1024) : fmt::format("{} B", bytes),
        pipeline_stage.count, o.steps, o.warmup, max_bound / 1e3);
  }
  std::vector<RunResult> results;
  for (const PipelineScheduleKind kind : kinds) {
    for (const int m : o.micro_batches) {
      // Every rank decides on the same gathered figures, so all run the
      // same number of attempts.
      RunResult r = run_schedule(kind, m, o, pp, ex, pipeline_stage, clock.offset_ns);
      while (r.attempts < o.attempts && std::abs(r.mean_bubble - r.formula) > o.tolerance) {
        RunResult again = run_schedule(kind, m, o, pp, ex, pipeline_stage, clock.offset_ns);
        again.attempts = r.attempts + 1;
        again.peaks_exact = again.peaks_exact && r.peaks_exact;
        again.wrong += r.wrong;
        r = std::move(again);
      }
      results.push_back(std::move(r));
    }
  }
  bool ok = true;
  for (const RunResult& r : results) {
    ok = ok && r.peaks_exact && r.wrong == 0 && std::abs(r.mean_bubble - r.formula) <= o.tolerance;
  }
  if (root) {
    print_bubbles(results, p, o.tolerance);
    print_peaks(results, p, pipeline_stage.count * sizeof(float));
    fmt::print("\n{}\n", ok ? "all peaks equal their formula, no wrong elements, every mean bubble "
                              "within the tolerance"
                            : "FAILED: a peak differs from its formula, an element is wrong or a "
                              "mean bubble is outside the tolerance");
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_pipeline: GPipe and 1F1B bubble and activation memory per stage vs. their "
      "formulas (run under mpirun; one rank per stage)"};
  Options o;
  app.add_option("--forward-ms", o.forward_ms, "t_f: time of one forward, ms")
      ->check(CLI::PositiveNumber);
  app.add_option("--backward-ratio", o.backward_ratio, "t_b / t_f")->check(CLI::PositiveNumber);
  app.add_option("--activation-bytes", o.activation_bytes,
                 "bytes of one micro-batch's activation (fp32; suffixes K/M = 2^10...)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--compute", o.compute, "sleep (default) or spin (busy-wait) for t_f and t_b")
      ->check(CLI::IsMember({"sleep", "spin"}));
  app.add_option("--schedule", o.schedule, "schedule to run")
      ->check(CLI::IsMember({"all", "gpipe", "1f1b"}));
  app.add_option("--micro-batches", o.micro_batches, "values of m")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps per row (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps per row first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tolerance", o.tolerance, "largest |mean bubble - formula| that passes")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--attempts", o.attempts,
                 "runs of a row whose mean bubble is outside the tolerance before it fails")
      ->check(CLI::PositiveNumber);
  app.add_flag("--quick", o.quick,
               "small run for tests: m = 1, 2, 4 (unless given), <= 5 steps after <= 1 warm-up");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    if (app.count("--micro-batches") == 0) o.micro_batches = {1, 2, 4};
    o.steps = std::min(o.steps, 5);
    o.warmup = std::min(o.warmup, 1);
  }
  if (o.activation_bytes < sizeof(float)) {
    std::fprintf(stderr, "bench_pipeline: --activation-bytes %zu holds no fp32 element\n",
                 o.activation_bytes);
    return 2;
  }
  return bench::run_or_abort("bench_pipeline", [&] { return run(o); });
}
