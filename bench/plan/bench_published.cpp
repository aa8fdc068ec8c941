// bench_published: the cluster planner's predictions (runtime/cluster_plan)
// against published training runs (bench/plan/published.json,
// bench/plan/README.md). Each run with a complete shape and settings is
// laid out as its source did (dp x tp x pp, ZeRO stage, offload,
// micro-batch, recomputation) on a cluster of its accelerators
// (tools/plan/clusters, memory as the run's parts), and the planner
// predicts its tokens a second per GPU and, where published, its memory per
// GPU. The compute efficiency is fitted per accelerator part (and
// the link efficiency over all) on the runs marked "fit" (at most half),
// minimizing the mean absolute log throughput ratio; the runs marked "check"
// are predicted with those constants and their median absolute error is the
// planner's. A published TFLOP/s becomes tokens a second through the
// source's own FLOP count (flops_accounting: the model's, or with full
// recomputation's extra forward). fp8 runs are left out (the model has no
// fp8 peak), as are runs whose settings the source does not give.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/median.h"
#include "runtime/cluster_plan/mesh_memory.h"
#include "runtime/cluster_plan/mesh_step_time.h"

namespace {

using namespace zeroshard;
using bench::median;
using json = nlohmann::json;

struct Run {
  std::string name, split, family;
  TransformerShape shape;
  ClusterDescription cluster;
  MeshPlan plan;
  double tokens_per_gpu = 0;          // published, per second
  std::optional<double> memory_gib;   // published peak per GPU
};

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? NAN : sum / static_cast<double>(v.size());
}

OffloadDevice device_of(const json& v) {
  if (v.is_null() || v == "none") return OffloadDevice::none;
  return v == "cpu" ? OffloadDevice::cpu : OffloadDevice::nvme;
}

// The run as the planner sees it, or the reason it is left out.
std::optional<Run> read_run(const json& r, const std::string& clusters, std::string& why) {
  const json &m = r.at("model"), &c = r.at("cluster"), &s = r.at("settings"), &p = r.at("published");
  for (const char* k : {"layers", "hidden", "heads", "seq", "vocab", "ffn"}) {
    if (m.at(k).is_null()) return why = fmt::format("no {} published", k), std::nullopt;
  }
  for (const char* k : {"dp", "tp", "pp", "global_batch"}) {
    if (s.at(k).is_null()) return why = fmt::format("no {} published", k), std::nullopt;
  }
  if (s.at("precision") == "fp8") return why = "fp8 (no fp8 peak in the model)", std::nullopt;
  Run run;
  run.name = r.at("name");
  run.split = r.at("split");
  run.shape = TransformerShape::parse(
      fmt::format("kind={},layers={},hidden={},heads={},kv_heads={},seq={},vocab={},ffn={},tied={}",
                  m.at("kind").get<std::string>(), m.at("layers").get<std::int64_t>(), m.at("hidden").get<std::int64_t>(),
                  m.at("heads").get<std::int64_t>(), m.at("kv_heads").is_null() ? 0 : m.at("kv_heads").get<std::int64_t>(),
                  m.at("seq").get<std::int64_t>(), m.at("vocab").get<std::int64_t>(), m.at("ffn").get<std::int64_t>(),
                  m.at("tied").get<bool>() ? 1 : 0),
      run.name);
  const std::string acc = c.at("accelerator");
  const std::string file = acc.rfind("H100", 0) == 0 ? "h100x64.json" : acc.rfind("A100", 0) == 0 ? "a100x64.json" : "v100x400.json";
  run.family = acc;  // the part: H100 SXM 80GB at 700 W and torchtitan's 96GB at 500 W differ
  run.cluster = ClusterDescription::from_file(clusters + "/" + file);
  const int count = c.at("count").get<int>(), per_node = std::min(c.at("per_node").get<int>(), count);
  run.cluster.accelerators_per_node = per_node;
  run.cluster.nodes = count / per_node;
  if (acc.find("96GB") != std::string::npos) run.cluster.memory_bytes = 96.0 * (1ull << 30);
  MeshPlan& plan = run.plan;
  plan.dp = s.at("dp");
  plan.tp = s.at("tp");
  plan.pp = s.at("pp");
  plan.stage = s.at("zero_stage").is_null() ? 0 : s.at("zero_stage").get<int>();
  plan.offload_optimizer = device_of(s.at("offload_optimizer"));
  plan.offload_param = device_of(s.at("offload_param"));
  plan.micro_batch = s.at("micro_batch").is_null() ? 1 : s.at("micro_batch").get<std::int64_t>();
  const std::int64_t gb = s.at("global_batch");
  if (gb % (plan.dp * plan.micro_batch) != 0) return why = "global batch does not divide", std::nullopt;
  plan.micro_batches = gb / (plan.dp * plan.micro_batch);
  const json& ac = s.at("activation_checkpointing");
  plan.recompute = ac == "full"        ? Recompute::full
                  : ac == "selective" ? Recompute::selective
                  : ac == "op"        ? Recompute::op
                                      : Recompute::none;
  plan.flash_attention = s.at("flash_attention").get<bool>();
  plan.dtype = s.at("precision") == "fp16" ? DType::f16 : DType::bf16;
  if (!p.at("tokens_per_s_per_gpu").is_null()) {
    run.tokens_per_gpu = p.at("tokens_per_s_per_gpu");
  } else if (!p.at("tflops_per_gpu").is_null()) {
    const double flops = p.at("flops_accounting") == "hardware" ? run.shape.hardware_flops_per_token(Recompute::full)
                                                                 : run.shape.model_flops_per_token();
    run.tokens_per_gpu = p.at("tflops_per_gpu").get<double>() * 1e12 / flops;
  } else {
    return why = "no throughput published", std::nullopt;
  }
  if (!p.at("memory_gib_per_gpu").is_null()) run.memory_gib = p.at("memory_gib_per_gpu").get<double>();
  return run;
}

double predicted_tokens(const Run& r, const PlanConstants& k) {
  const MeshStepTime t = mesh_step_time(r.shape, r.plan, r.cluster, k, r.name);
  return mesh_tokens_per_second(r.shape, r.plan, t) / r.plan.accelerators();
}

double error(const Run& r, const PlanConstants& k) { return predicted_tokens(r, k) / r.tokens_per_gpu - 1; }

}  // namespace

int main(int argc, char** argv) {
  std::string table = "bench/plan/published.json", clusters = "tools/plan/clusters";
  CLI::App app{"bench_published: the cluster planner against published training runs"};
  app.add_option("--table", table, "the published runs (JSON)")->check(CLI::ExistingFile);
  app.add_option("--clusters", clusters, "the cluster descriptions' folder")->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);
  try {
    std::ifstream in(table);
    const json doc = json::parse(in);
    std::vector<Run> runs;
    for (const json& r : doc.at("runs")) {
      std::string why;
      if (std::optional<Run> run = read_run(r, clusters, why)) {
        runs.push_back(std::move(*run));
      } else {
        fmt::print("left out: {}: {}\n", r.at("name").get<std::string>(), why);
      }
    }
    // Fit on the 'fit' runs: the link efficiency and the tensor-parallel
    // overlap over all of them, the compute efficiency per generation
    // (minimizing the mean absolute log ratio of predicted to published throughput).
    std::vector<std::string> families;
    for (const Run& r : runs) {
      if (std::find(families.begin(), families.end(), r.family) == families.end()) families.push_back(r.family);
    }
    const auto fit_compute = [&](PlanConstants k, std::map<std::string, double>& per) {
      for (const std::string& fam : families) {
        double best = 0.5, score = INFINITY;
        for (double e = 0.15; e <= 0.9001; e += 0.005) {
          k.compute_efficiency = e;
          std::vector<double> errs;
          for (const Run& r : runs) {
            if (r.split == "fit" && r.family == fam) errs.push_back(std::fabs(std::log1p(error(r, k))));
          }
          if (!errs.empty() && mean(errs) < score) score = mean(errs), best = e;
        }
        per[fam] = best;
      }
      std::vector<double> all;
      for (const Run& r : runs) {
        k.compute_efficiency = per[r.family];
        if (r.split == "fit") all.push_back(std::fabs(std::log1p(error(r, k))));
      }
      return mean(all);
    };
    std::map<std::string, double> compute;
    PlanConstants fitted;
    double best_score = INFINITY;
    for (double link = 0.5; link <= 1.0001; link += 0.05) {
      for (double overlap = 0.0; overlap <= 1.0001; overlap += 0.1) {
        std::map<std::string, double> per;
        const PlanConstants k{.link_efficiency = link, .tp_comm_overlap = overlap};
        const double score = fit_compute(k, per);
        if (score < best_score) best_score = score, fitted = k, compute = per;
      }
    }
    fmt::print("fitted on the 'fit' runs: link efficiency {:.2f}, tensor-parallel overlap {:.1f}, host AdamW {:.0e} "
               "parameters/s per node; compute efficiency",
               fitted.link_efficiency, fitted.tp_comm_overlap, fitted.host_optimizer_params_per_s);
    for (const std::string& f : families) fmt::print(" {} {:.3f}", f, compute[f]);
    fmt::print("\n\n");
    fmt::print("{:<36} {:<5} {:>5} {:>12} {:>12} {:>12} {:>8} {:>9} {:>9} {:>7}\n", "run", "split", "GPUs", "dp/tp/pp",
               "published", "predicted", "error", "mem pub", "mem pred", "error");
    std::vector<double> check_tput, fit_tput, check_mem;
    for (const Run& r : runs) {
      PlanConstants k = fitted;
      k.compute_efficiency = compute[r.family];
      const double pred = predicted_tokens(r, k), err = pred / r.tokens_per_gpu - 1;
      (r.split == "check" ? check_tput : fit_tput).push_back(std::fabs(err));
      std::string mem = fmt::format("{:>9} {:>9} {:>7}", "-", "-", "-");
      if (r.memory_gib) {
        const double got = mesh_memory(r.shape, r.plan, r.cluster, k, r.name).device() / (1ull << 30);
        const double e = got / *r.memory_gib - 1;
        if (r.split == "check") check_mem.push_back(std::fabs(e));
        mem = fmt::format("{:>9.1f} {:>9.1f} {:>+6.1f}%", *r.memory_gib, got, 100 * e);
      }
      fmt::print("{:<36} {:<5} {:>5} {:>12} {:>12.0f} {:>12.0f} {:>+7.1f}% {}\n", r.name, r.split, r.plan.accelerators(),
                 fmt::format("{}/{}/{}", r.plan.dp, r.plan.tp, r.plan.pp), r.tokens_per_gpu, pred, 100 * err, mem);
    }
    fmt::print("\nthroughput (tokens/s per GPU): median absolute error {:.1f}% on the {} check runs (goal 15%), "
               "{:.1f}% on the {} fit runs\n",
               100 * median(check_tput), check_tput.size(), 100 * median(fit_tput), fit_tput.size());
    if (!check_mem.empty()) {
      fmt::print("memory per GPU: median absolute error {:.1f}% on the {} check runs that publish it (goal 5%)\n",
                 100 * median(check_mem), check_mem.size());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_published: %s\n", e.what());
    return 1;
  }
  return 0;
}
