// bench_mesh_ranking: the cluster planner (runtime/cluster_plan) on this
// machine. Two modes, driven by bench/plan/mesh_ranking.sh:
//
//   mpirun -np N bench_mesh_ranking --describe out.json [--transformer SPEC --global-batch B]
//     describes this machine's N ranks as a cluster the planner reads
//     (runtime/cluster_plan/cluster_description.h): one node of N
//     "accelerators" (the ranks), each with the fp32 FLOP/s of the model's
//     own matrix products (forward and backward, the global batch over N
//     ranks, every rank at once, the slowest rank's best of 5), and a link
//     whose latency and bandwidth are fitted (least squares on the ring
//     model of [Note: collective time]) to the all-gathers
//     runtime/plan/calibrate.h measures through the Communicator; memory
//     and host figures from the machine (RAM / N per rank; the AdamW
//     kernel's bandwidth as the host-device link, a copy between two
//     buffers of the same RAM).
//
//   bench_mesh_ranking --rank --cluster out.json --one one.json --reference REF.json... RUN.json...
//     reads the GPT example's reports (examples/gpt --report; the runs of
//     one mesh repeated over rounds give their median) and predicts
//     each run's tokens a second with mesh_step_time (fp32, no
//     recomputation, no fused attention, tensor-parallel collectives not
//     overlapped: zeroshard's parallel/ layers run them in line). The
//     compute efficiency comes from REF.json, runs on one rank (no
//     communication) of the same model, against the matrix-product rate
//     one.json measured at one rank: their achieved FLOP/s over that peak.
//     Prints measured and predicted tokens a second of every run, the two
//     rankings, and whether the planner's top choice is within 10% of the
//     fastest measured (issue 37's goal).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/gemm_rate.h"
#include "bench/median.h"
#include "bench/mpi_main.h"
#include "comm/communicator.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "kernels/cpu/simd_targets.h"
#include "parallel/gemm.h"
#include "runtime/cluster_plan/mesh_step_time.h"
#include "runtime/plan/calibrate.h"

#if ZS_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace {

using namespace zeroshard;
using bench::gemm_rate;
using bench::median;
using bench::model_gemms;
using json = nlohmann::json;

/// The ring all-gather t = (n-1) alpha + (n-1)/n S / B fitted to the
/// measured sizes S (the gathered buffer, bytes) and times t: B from the
/// least-squares slope over every size (the large ones weigh most), alpha
/// from the smallest size's time less its bytes' share. Returns {alpha
/// seconds, B bytes per second}.
std::pair<double, double> fit_link(const CollectiveRates& r, int n) {
  const double c = (n - 1.0) / n;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const auto m = static_cast<double>(r.bytes.size());
  for (std::size_t i = 0; i < r.bytes.size(); ++i) {
    const double x = c * r.bytes[i], y = r.seconds[i];
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  if (!(slope > 0)) throw InvariantError("all-gather times do not grow with the size: no link bandwidth to fit");
  return {std::max(0.0, (r.seconds.front() - slope * c * r.bytes.front()) / (n - 1.0)), 1.0 / slope};
}

int describe(const std::string& out, const TransformerShape& shape, std::int64_t global_batch) {
  auto comm = make_world_communicator();
  const int n = comm->world_size();
#if ZS_BENCH_OPENBLAS
  if (n > 1) openblas_set_num_threads(1);  // as examples/gpt: one BLAS thread a rank beside others
#endif
  const TransformerShape t = shape.resolved();
  if (global_batch % n != 0) throw ConfigError(fmt::format("--global-batch {} does not divide over {} ranks", global_batch, n));
  const auto tokens = static_cast<std::size_t>(global_batch / n * t.seq);
  const double flops = gemm_rate(model_gemms(t), tokens, *comm);
  CalibrateOptions o;
  o.optimizer_elements = std::size_t{1} << 22;
  o.max_collective_bytes = std::size_t{16} << 20;
  const MachineRates rates = calibrate(*comm, o);
  double alpha = 0, bandwidth = rates.optimizer_bandwidth;
  if (n > 1) std::tie(alpha, bandwidth) = fit_link(rates.all_gather, n);
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const double gib = 1024.0 * 1024 * 1024;
  const json link = {{"kind", "shared memory (MPI)"}, {"bandwidth_GBps", bandwidth / 1e9}, {"latency_us", alpha * 1e6}};
  const json j = {
      {"name", fmt::format("this machine, {} ranks", n)},
      {"source", {"measured by bench/plan/bench_mesh_ranking --describe"}},
      {"notes", fmt::format("fp32 FLOP/s: the model's matrix products at {} tokens a rank, every rank at once ({}); "
                            "link: the ring model fitted to the Communicator's all-gathers of up to 16 MiB; "
                            "host-device: the AdamW kernel's streaming bandwidth",
                            tokens, kernels::simd_target_name())},
      {"nodes", 1},
      {"accelerators_per_node", n},
      {"accelerator", {{"name", "rank"}, {"memory_GiB", ram / n / gib},
                       {"peak_TFLOPs", {{"bf16", 0}, {"fp16", 0}, {"fp32", flops / 1e12}}},
                       {"memory_bandwidth_GBps", rates.optimizer_bandwidth / 1e9}}},
      {"intra_node", link},
      {"inter_node", link},
      {"host", {{"memory_GiB", ram / gib}, {"device_bandwidth_GBps", rates.optimizer_bandwidth / 1e9},
                {"nvme_read_GBps", 0}, {"nvme_write_GBps", 0}}}};
  if (comm->rank() == 0) {
    write_file_atomic(out, j.dump(2) + "\n");
    const std::string link_line = n > 1 ? fmt::format("link latency {:.1f} us, {:.2f} GB/s", alpha * 1e6, bandwidth / 1e9)
                                        : "no link (one rank: the description's link is the AdamW kernel's bandwidth)";
    fmt::print("{} ranks ({}): matrix products {:.2f} GFLOP/s a rank; {}; wrote {}\n", n, kernels::simd_target_name(),
               flops / 1e9, link_line, out);
  }
  return 0;
}

/// A measured run of examples/gpt, from its --report.
struct Measured {
  std::string file;
  MeshPlan plan;
  TransformerShape shape;
  double tokens_per_s = 0;  // global batch x seq / the median step
};

Measured read_report_json(const std::string& path, const json& j);

/// A report of examples/gpt --report; IoError when unreadable, ConfigError
/// naming the file for anything else (not JSON, a field missing or of
/// another type).
Measured read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("{}: cannot read the report", path));
  try {
    return read_report_json(path, json::parse(in));
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: not a report of examples/gpt --report: {}", path, e.what()));
  }
}

Measured read_report_json(const std::string& path, const json& j) {
  Measured m;
  m.file = path;
  const json& model = j.at("model");
  m.shape.kind = TransformerKind::gpt;
  m.shape.layers = model.at("layers");
  m.shape.hidden = model.at("dim");
  m.shape.heads = model.at("heads");
  m.shape.seq = model.at("seq");
  m.shape.positions = model.at("context");
  m.shape.vocab = model.at("vocab");
  m.shape.validate(path);
  if (m.shape.parameter_count() != model.at("parameters").get<std::uint64_t>()) {
    throw ConfigError(fmt::format("{}: the planner counts {} parameters, the run {}", path, m.shape.parameter_count(),
                                  model.at("parameters").get<std::uint64_t>()));
  }
  m.plan.dp = j.at("mesh").at("dp");
  m.plan.tp = j.at("mesh").at("tp");
  m.plan.pp = j.at("mesh").at("pp");
  m.plan.stage = j.at("config").at("zero_optimization").at("stage");
  m.plan.micro_batch = j.at("config").at("train_micro_batch_size_per_gpu");
  m.plan.micro_batches = j.at("pipeline").at("micro_batches");
  m.plan.dtype = DType::f32;
  m.plan.flash_attention = false;
  const double step = j.at("median_step_seconds");
  if (!(step > 0)) throw ConfigError(fmt::format("{}: no median step (run at least 2 steps)", path));
  m.tokens_per_s = static_cast<double>(m.plan.global_batch() * m.shape.seq) / step;
  return m;
}

std::string mesh_name(const MeshPlan& p) { return fmt::format("dp {} tp {} pp {} stage {}", p.dp, p.tp, p.pp, p.stage); }

std::string shape_of(const TransformerShape& t) {
  return fmt::format("layers {} hidden {} heads {} seq {} vocab {}", t.layers, t.hidden, t.heads, t.seq, t.vocab);
}

/// The reports grouped by mesh and stage, each with the median of its
/// rounds' tokens a second, in the order first seen. ConfigError naming
/// the file when a report trains another model than the first.
std::vector<Measured> median_runs(const std::vector<std::string>& files) {
  std::vector<Measured> runs;
  std::vector<std::vector<double>> rates;
  for (const std::string& f : files) {
    Measured m = read_report(f);
    if (!runs.empty() && shape_of(m.shape) != shape_of(runs.front().shape)) {
      throw ConfigError(fmt::format("{}: trains another model ({}) than {} ({})", f, shape_of(m.shape),
                                    runs.front().file, shape_of(runs.front().shape)));
    }
    std::size_t i = 0;
    while (i < runs.size() && mesh_name(runs[i].plan) != mesh_name(m.plan)) ++i;
    if (i == runs.size()) {
      runs.push_back(m);
      rates.emplace_back();
    }
    rates[i].push_back(m.tokens_per_s);
  }
  for (std::size_t i = 0; i < runs.size(); ++i) runs[i].tokens_per_s = median(rates[i]);
  return runs;
}

int rank_runs(const std::string& cluster_path, const std::string& one_path, const std::vector<std::string>& reference,
              const std::vector<std::string>& files) {
  if (reference.empty() || files.empty()) throw ConfigError("--rank needs --reference reports and the runs' reports");
  const ClusterDescription cluster = ClusterDescription::from_file(cluster_path);
  const ClusterDescription one = ClusterDescription::from_file(one_path);
  const std::vector<Measured> refs = median_runs(reference);
  if (refs.size() != 1 || refs.front().plan.accelerators() != 1) {
    throw ConfigError(fmt::format("{}: the reference runs must be one mesh of one rank", reference.front()));
  }
  const Measured& ref = refs.front();
  if (one.accelerators() != 1) {
    throw ConfigError(fmt::format("--one {}: describes {} ranks; the compute efficiency needs the one-rank "
                                  "description (bench_mesh_ranking --describe at -np 1)", one_path, one.accelerators()));
  }
  PlanConstants k;
  k.tp_comm_overlap = 0;
  const double efficiency =
      ref.tokens_per_s * ref.shape.hardware_flops_per_token(Recompute::none) / one.peak_flops_fp32;
  k.compute_efficiency = std::min(1.0, efficiency);

  struct Row {
    Measured m;
    MeshStepTime t;
    double predicted = 0;
  };
  // median_runs checks that the runs train one model; it must be the reference's.
  const std::vector<Measured> runs = median_runs(files);
  if (shape_of(runs.front().shape) != shape_of(ref.shape)) {
    throw ConfigError(fmt::format("{}: trains another model ({}) than the reference ({})", runs.front().file,
                                  shape_of(runs.front().shape), shape_of(ref.shape)));
  }
  std::vector<Row> rows;
  for (const Measured& m : runs) {
    Row r{m, {}, 0};
    if (r.m.plan.accelerators() != cluster.accelerators()) {
      throw ConfigError(fmt::format("{}: {} ranks, the cluster {}", r.m.file, r.m.plan.accelerators(), cluster.accelerators()));
    }
    r.t = mesh_step_time(r.m.shape, r.m.plan, cluster, k, r.m.file);
    r.predicted = mesh_tokens_per_second(r.m.shape, r.m.plan, r.t);
    rows.push_back(std::move(r));
  }
  fmt::print("compute efficiency {:.3f}: the one-rank run's {:.0f} tokens/s x {:.3g} FLOP/token over {:.2f} GFLOP/s\n",
             efficiency, ref.tokens_per_s, ref.shape.hardware_flops_per_token(Recompute::none),
             one.peak_flops_fp32 / 1e9);
  auto order = [&](auto key) {
    std::vector<std::size_t> idx(rows.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return key(rows[a]) > key(rows[b]); });
    std::vector<std::size_t> place(rows.size());
    for (std::size_t i = 0; i < idx.size(); ++i) place[idx[i]] = i + 1;
    return std::make_pair(idx, place);
  };
  const auto [by_measured, measured_place] = order([](const Row& r) { return r.m.tokens_per_s; });
  const auto [by_predicted, predicted_place] = order([](const Row& r) { return r.predicted; });

  fmt::print("\n{:<26} {:>9} {:>9} {:>7} {:>5} {:>5}   predicted ms: {:>7} {:>7} {:>7} {:>7} {:>7}\n", "run", "measured",
             "predicted", "error", "m#", "p#", "compute", "bubble", "tp", "pp", "dp exp");
  for (std::size_t i : by_measured) {
    const Row& r = rows[i];
    fmt::print("{:<26} {:>9.0f} {:>9.0f} {:>+6.0f}% {:>5} {:>5}                 {:>7.1f} {:>7.1f} {:>7.1f} {:>7.1f} {:>7.1f}\n",
               mesh_name(r.m.plan), r.m.tokens_per_s, r.predicted, 100 * (r.predicted / r.m.tokens_per_s - 1),
               measured_place[i], predicted_place[i], 1e3 * r.t.compute, 1e3 * r.t.bubble, 1e3 * r.t.tp_comm,
               1e3 * r.t.pp_comm, 1e3 * r.t.dp_exposed);
  }
  // Spearman's rank correlation of the two orders (no ties in practice:
  // stable ranks), and the median absolute error of the predictions.
  double d2 = 0;
  std::vector<double> errors;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double d = static_cast<double>(measured_place[i]) - static_cast<double>(predicted_place[i]);
    d2 += d * d;
    errors.push_back(std::abs(rows[i].predicted / rows[i].m.tokens_per_s - 1));
  }
  const auto n = static_cast<double>(rows.size());
  if (rows.size() > 1) {
    fmt::print("\nrank correlation (Spearman) {:.2f} over {} runs; median absolute error {:.1f}%\n",
               1 - 6 * d2 / (n * (n * n - 1)), rows.size(), 100 * median(errors));
  }
  const Row& top = rows[by_predicted.front()];
  const Row& fastest = rows[by_measured.front()];
  const double ratio = top.m.tokens_per_s / fastest.m.tokens_per_s;
  fmt::print("planner's top choice: {} at {:.0f} tokens/s measured, {:.1f}% of the fastest ({} at {:.0f}): {}\n",
             mesh_name(top.m.plan), top.m.tokens_per_s, 100 * ratio, mesh_name(fastest.m.plan), fastest.m.tokens_per_s,
             ratio >= 0.9 ? "within 10% (goal met)" : "more than 10% slower (goal missed)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_mesh_ranking: the cluster planner's ranking of the GPT example's meshes on this machine"};
  std::string describe_path, cluster_path, one_path;
  std::string transformer = "kind=gpt,layers=4,hidden=128,heads=4,seq=64,vocab=256";
  std::int64_t global_batch = 32;
  bool rank = false;
  std::vector<std::string> reference, reports;
  auto* d = app.add_option("--describe", describe_path, "measure this machine's ranks into this cluster description");
  app.add_option("--transformer", transformer, "the model whose matrix products --describe times")->capture_default_str();
  app.add_option("--global-batch", global_batch, "sequences per step, over the ranks (--describe)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  auto* r = app.add_flag("--rank", rank, "predict and rank the reports' runs");
  app.add_option("--cluster", cluster_path, "--rank: this machine's description at the runs' ranks");
  app.add_option("--one", one_path, "--rank: this machine's description at one rank");
  app.add_option("--reference", reference, "--rank: reports of the one-rank runs (the compute efficiency)");
  app.add_option("reports", reports, "--rank: the runs' reports");
  d->excludes(r);
  CLI11_PARSE(app, argc, argv);
  if (rank) {
    try {
      if (cluster_path.empty() || one_path.empty()) throw ConfigError("--rank needs --cluster and --one");
      return rank_runs(cluster_path, one_path, reference, reports);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_mesh_ranking: %s\n", e.what());
      return 1;
    }
  }
  if (describe_path.empty()) {
    std::fprintf(stderr, "bench_mesh_ranking: give --describe FILE or --rank\n");
    return 2;
  }
  return bench::run_or_abort("bench_mesh_ranking", [&] {
    return describe(describe_path, TransformerShape::parse(transformer, "--transformer"), global_batch);
  });
}
