// zs_offload_stress: trains a synthetic model of P parameters in U units at
// ZeRO stage 3 with the optimizer state (and parameters) on an offload tier,
// and proves after every step that no byte was lost or mixed between
// shards: each unit's gathered parameters are checksummed (CRC-32) and
// compared with a replay of the same updates computed here, chunk by chunk,
// without the engine or its swap files.
//
// The replay is exact because the gradients are small dyadic rationals
// (k / 1024, |k| <= 512), equal on every rank, so their sum over ranks is
// exact in fp32 whatever order the reduction takes, and the update kernel
// (optimizer_update) is bitwise deterministic.
//
// Per step it prints: wall time of the engine's work (unshard, gradients,
// step; the verification is timed apart), swap bytes read and written and
// their rate over the step, time blocked on swap I/O, time in the update,
// and the process's peak RSS. It refuses up front (the engine's free-space
// check) when the disk cannot hold the state.
//
//   zs_offload_stress --params 2e9 --units 64 --steps 3 --nvme-path /var/tmp/zs
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/splitmix64.h"
#include "examples/end_job.h"
#include "examples/report/checkpoint_saves.h"
#include "examples/report/plan_lines.h"
#include "examples/report/process_memory.h"
#include "examples/report/progress_line.h"
#include "optimizer/optimizer.h"
#include "runtime/engine/engine.h"

using namespace zeroshard;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Initial value of element i of unit u: a multiple of 2^-15 in [-1, 1).
float init_value(int u, std::size_t i) {
  const std::uint64_t h = splitmix64((static_cast<std::uint64_t>(u) << 40) ^ i);
  return static_cast<float>(static_cast<std::int64_t>(h % 65536) - 32768) / 32768.0f;
}

// Gradient of element i of unit u at step t (the same on every rank).
float grad_value(int t, int u, std::size_t i) {
  const std::uint64_t h = splitmix64((static_cast<std::uint64_t>(t) << 56) ^ (static_cast<std::uint64_t>(u) << 40) ^ i ^ 0x5a5a);
  return static_cast<float>(static_cast<std::int64_t>(h % 1025) - 512) / 1024.0f;
}

std::uint32_t crc(std::uint32_t c, const float* p, std::size_t n) {
  const auto* b = reinterpret_cast<const Bytef*>(p);
  std::size_t bytes = n * sizeof(float);
  while (bytes > 0) {
    const uInt piece = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    c = static_cast<std::uint32_t>(::crc32(c, b, piece));
    b += piece;
    bytes -= piece;
  }
  return c;
}

// CRC-32 of unit u's parameters after `updates` optimizer steps, replayed
// chunk by chunk from the initial values and the known gradients.
std::uint32_t expected_crc(const EngineConfig& cfg, int world, int u, std::size_t n, int updates) {
  constexpr std::size_t kChunk = 1 << 20;
  const OptimizerHyper& h = cfg.optimizer;
  const int nstates = optimizer_state_count(h);
  std::vector<float> p(kChunk), g(kChunk);
  std::vector<std::vector<float>> st(static_cast<std::size_t>(nstates), std::vector<float>(kChunk));
  std::vector<float*> sp(static_cast<std::size_t>(nstates));
  // The engine stores the sum over ranks and scales by 1/world.
  const float scale = static_cast<float>(1.0 / static_cast<double>(world));
  std::uint32_t c = static_cast<std::uint32_t>(::crc32(0, nullptr, 0));
  for (std::size_t b = 0; b < n; b += kChunk) {
    const std::size_t m = std::min(kChunk, n - b);
    for (std::size_t i = 0; i < m; ++i) p[i] = init_value(u, b + i);
    for (int k = 0; k < nstates; ++k) {
      std::fill_n(st[static_cast<std::size_t>(k)].begin(), m, 0.0f);
      sp[static_cast<std::size_t>(k)] = st[static_cast<std::size_t>(k)].data();
    }
    for (int t = 1; t <= updates; ++t) {
      for (std::size_t i = 0; i < m; ++i) g[i] = grad_value(t, u, b + i) * static_cast<float>(world);
      optimizer_update(h, h.lr, h.weight_decay, t, scale, p.data(), g.data(), sp.data(), m);
    }
    c = crc(c, p.data(), m);
  }
  return c;
}

double peak_rss_gib() { return examples::process_status_bytes("VmHWM") / (1024.0 * 1024.0 * 1024.0); }

OffloadDevice device(const std::string& s) {
  if (s == "none") return OffloadDevice::none;
  if (s == "cpu") return OffloadDevice::cpu;
  return OffloadDevice::nvme;
}

struct Options {
  double params = 2e8;
  int units = 16;
  int steps = 3;
  std::string nvme_path;
  std::string offload_param = "nvme";
  std::string offload_optimizer = "nvme";
  double sub_group_size = 1.6e7;
  int buffer_count = 4;
  bool verify = true;
  std::string calibration_path;  ///< --calibration FILE: predicted vs measured step time
  std::string save_dir;          ///< --save-dir: checkpoints ("": none)
  int save_every = 1;            ///< --save-every: optimizer steps between checkpoints
  bool async_save = false;       ///< --async-save: checkpoint.async (Engine::save_checkpoint_async)
};

int run(const Options& o) {
  auto comm = make_world_communicator();
  const int rank = comm->rank(), world = comm->world_size();
  EngineConfig cfg;
  cfg.zero.stage = 3;
  cfg.optimizer.kind = OptimizerKind::adamw;
  cfg.optimizer.lr = 1e-3;
  cfg.optimizer.weight_decay = 0.01f;
  OffloadConfig& off = cfg.offload;
  off.optimizer.device = device(o.offload_optimizer);
  off.optimizer.nvme_path = o.nvme_path;
  off.optimizer.buffer_count = o.buffer_count;
  off.param.device = device(o.offload_param);
  off.param.nvme_path = o.nvme_path;
  off.param.max_in_cpu = 0;
  off.sub_group_size = static_cast<std::int64_t>(o.sub_group_size);
  cfg.checkpoint.async = o.async_save;
  cfg.source = "zs_offload_stress options";
  std::optional<MachineRates> rates;
  if (!o.calibration_path.empty()) {
    rates = MachineRates::from_file(o.calibration_path);
    cfg.observe.wall_clock_breakdown = true;
  }

  const auto total = static_cast<std::uint64_t>(o.params);
  const std::uint64_t per_unit = total / static_cast<std::uint64_t>(o.units);
  std::vector<std::size_t> sizes;
  for (int u = 0; u < o.units; ++u) {
    sizes.push_back(static_cast<std::size_t>(
        u + 1 == o.units ? total - per_unit * static_cast<std::uint64_t>(o.units - 1) : per_unit));
  }
  // One swap-in buffer holds a whole unit shard, and one reduction bucket
  // one unit's gradient (sent from the gradient buffer itself): memory stays
  // a few unit buffers whatever P is.
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  off.param.buffer_size = static_cast<std::int64_t>(largest + 4096);
  // Units are padded to a multiple of 16 x world size elements (FlatLayout).
  const std::size_t pad = 16 * static_cast<std::size_t>(world);
  cfg.zero.reduce_bucket_size = static_cast<std::int64_t>((largest + pad - 1) / pad * pad);
  cfg.zero.allgather_bucket_size = cfg.zero.reduce_bucket_size;
  Engine e(cfg, *comm);
  std::vector<ParamId> ps;
  for (int u = 0; u < o.units; ++u) {
    const UnitId id = e.add_unit(fmt::format("unit{}", u));
    ps.push_back(e.add_parameter(id, fmt::format("unit{}.weight", u),
                                 {static_cast<std::int64_t>(sizes[static_cast<std::size_t>(u)])}));
  }
  auto t0 = Clock::now();
  e.finalize();  // refuses here when the disk cannot hold the state
  const MemoryLedger& L = e.ledger();
  if (rank == 0) {
    fmt::print("zs_offload_stress: {} parameters in {} units, world size {}, stage 3, AdamW fp32; "
               "optimizer on {}, parameters on {}, sub_group_size {}, nvme_path {}\n",
               total, o.units, world, o.offload_optimizer, o.offload_param, off.sub_group_elements(), o.nvme_path);
    fmt::print("model state per rank: {} (nvme {}, host {}, device {})\n", format_bytes(L.model_state_bytes()),
               format_bytes(L.current(MemCategory::parameters, MemTier::nvme) +
                            L.current(MemCategory::gradients, MemTier::nvme) +
                            L.current(MemCategory::optimizer_states, MemTier::nvme)),
               format_bytes(L.current(MemCategory::parameters, MemTier::host) +
                            L.current(MemCategory::gradients, MemTier::host) +
                            L.current(MemCategory::optimizer_states, MemTier::host)),
               format_bytes(L.current(MemCategory::parameters, MemTier::device) +
                            L.current(MemCategory::gradients, MemTier::device) +
                            L.current(MemCategory::optimizer_states, MemTier::device)));
    fmt::print("{}", examples::estimate_beside_ledger(e));
    std::fflush(stdout);
  }
  {
    std::vector<float> v;
    for (int u = 0; u < o.units; ++u) {
      v.resize(sizes[static_cast<std::size_t>(u)]);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = init_value(u, i);
      e.set_parameter(ps[static_cast<std::size_t>(u)], v);
    }
  }
  comm->barrier();
  if (rank == 0) {
    fmt::print("initial parameters written in {:.1f} s\n", since(t0));
    std::fflush(stdout);
    fmt::print("{:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>8}\n", "step", "engine_s", "read_GB",
               "write_GB", "read_GB/s", "write_GB/s", "io_wait_s", "update_s", "verify_s", "peak_RSS", "checks");
  }
  int failures = 0;
  auto check_units = [&](int updates, double& verify_s, int& bad) {
    for (int u = 0; u < o.units; ++u) {
      const UnitId id = static_cast<UnitId>(u);
      e.unshard(id);
      std::uint32_t got = 0;
      const auto tv = Clock::now();
      if (o.verify) got = crc(static_cast<std::uint32_t>(::crc32(0, nullptr, 0)), e.param(ps[static_cast<std::size_t>(u)]).data(), sizes[static_cast<std::size_t>(u)]);
      verify_s += since(tv);
      e.reshard(id);
      if (!o.verify) continue;
      const auto tr = Clock::now();
      const std::uint32_t want = expected_crc(cfg, world, u, sizes[static_cast<std::size_t>(u)], updates);
      verify_s += since(tr);
      if (got != want) {
        ++bad;
        fmt::print(stderr, "rank {}: unit {} after {} steps: CRC-32 {:08x}, expected {:08x}\n", rank, u, updates, got,
                   want);
      }
    }
  };
  std::vector<float> g;
  // Rank 0's progress over every unit's backward of every step (stderr).
  std::optional<examples::ProgressLine> progress;
  if (rank == 0) progress.emplace("stress", static_cast<std::int64_t>(o.steps) * o.units, stderr);
  examples::CheckpointSaves saves;  // --save-dir: the stall of each save, the steps beside async writes
  for (int s = 1; s <= o.steps; ++s) {
    const OffloadStats before = e.offload_stats();
    const bool writing = e.checkpoint_in_flight();
    const auto ts = Clock::now();
    double verify_s = 0;
    int bad = 0;
    check_units(s - 1, verify_s, bad);  // forward: the parameters the previous steps produced
    for (int u = o.units - 1; u >= 0; --u) {  // backward
      const std::size_t n = sizes[static_cast<std::size_t>(u)];
      g.resize(n);
      for (std::size_t i = 0; i < n; ++i) g[i] = grad_value(s, u, i);
      auto grad = e.grad(ps[static_cast<std::size_t>(u)]);
      std::copy(g.begin(), g.end(), grad.begin());
      e.reduce_gradients(static_cast<UnitId>(u));
      if (progress) progress->update(static_cast<std::int64_t>(s - 1) * o.units + (o.units - u), fmt::format("step {}", s));
    }
    e.step();
    const double step_s = since(ts) - verify_s;
    saves.step(writing, step_s);
    const OffloadStats after = e.offload_stats();
    const double rd = static_cast<double>(after.bytes_read - before.bytes_read) / 1e9;
    const double wr = static_cast<double>(after.bytes_written - before.bytes_written) / 1e9;
    const double wait = after.read_wait_s + after.write_wait_s - before.read_wait_s - before.write_wait_s;
    failures += bad;
    if (rank == 0) {
      fmt::print("{:>4} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>10.2f} {:>10.2f} {:>9.2f} {:>7.2f}Gi {:>8}\n", s,
                 step_s, rd, wr, rd / step_s, wr / step_s, wait, after.update_s - before.update_s, verify_s,
                 peak_rss_gib(), o.verify ? (bad == 0 ? "ok" : "FAILED") : "off");
      std::fflush(stdout);
    }
    if (!o.save_dir.empty() && s % o.save_every == 0) {
      saves.save(e, o.save_dir, {{"step", s}}, 2);
      if (rank == 0) {
        fmt::print("     {} checkpoint at step {}: {:.2f} s of training stopped\n", o.async_save ? "async" : "sync", s,
                   saves.last_stall());
        std::fflush(stdout);
      }
    }
  }
  saves.finish(e);
  double verify_s = 0;
  int bad = 0;
  check_units(o.steps, verify_s, bad);
  failures += bad;
  double all = failures;
  comm->all_reduce(&all, 1, DType::f64, ReduceOp::sum);
  const std::string predicted = rates ? examples::predicted_beside_measured(e, *rates) : "";
  if (rank == 0) {
    fmt::print("{}", predicted);
    fmt::print("{}", examples::CheckpointSaves::line(saves.figures()));
    fmt::print("final parameters after {} steps: {} ({:.1f} s to verify); peak RSS rank 0: {:.2f} GiB\n", o.steps,
               all == 0 ? std::string("every checksum matches") : fmt::format("{} checksum mismatches", all), verify_s,
               peak_rss_gib());
  }
  return all == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Stress test of zeroshard's offload tiers with per-step checksums"};
  Options o;
  app.add_option("--params", o.params, "parameters in the model (e.g. 2e9)")->check(CLI::Range(1.0, 1e12));
  app.add_option("--units", o.units, "units (each one parameter)")->check(CLI::Range(1, 100000));
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::Range(1, 1000));
  app.add_option("--nvme-path", o.nvme_path, "directory for swap files")->required();
  app.add_option("--offload-optimizer", o.offload_optimizer, "none, cpu or nvme")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-param", o.offload_param, "none, cpu or nvme")->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--sub-group-size", o.sub_group_size, "elements per optimizer sub-group")->check(CLI::Range(1.0, 1e12));
  app.add_option("--buffer-count", o.buffer_count, "staging buffer sets of the swap pipeline")->check(CLI::Range(1, 64));
  app.add_flag("!--no-verify", o.verify, "skip the checksums (timing runs)");
  app.add_option("--save-dir", o.save_dir, "save checkpoints to DIR (keep the newest 2)");
  app.add_option("--save-every", o.save_every, "optimizer steps between checkpoints")->check(CLI::Range(1, 1000));
  app.add_flag("--async-save", o.async_save,
               "save with Engine::save_checkpoint_async (checkpoint.async): a snapshot in host memory, written in "
               "the background");
  app.add_option("--calibration", o.calibration_path,
                 "rates from zs_plan --calibrate: print the predicted step time beside the measured one")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  // CLI::Range lets NaN through (every comparison with it is false).
  if (!(o.params >= 1.0) || !(o.sub_group_size >= 1.0)) {
    fmt::print(stderr, "zs_offload_stress: --params and --sub-group-size must be numbers >= 1\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& err) {
    // An agreed error ends every rank normally; any other ends the job (examples/end_job.h).
    examples::end_job_with_error("zs_offload_stress", err);
    return 2;
  }
}
