// bench_offload_step: the engine's optimizer step (Engine::step(), stage 3,
// world size 1, AdamW fp32) with its state in memory, on the cpu tier and on
// the nvme tier, and, for the nvme rows, the time a raw sequential O_DIRECT
// pread/pwrite loop needs to move the same bytes, measured in the same run.
//
// Rows:
//   memory        no offload: the limit of the update itself
//   cpu           optimizer state and parameters on the host tier
//   nvme          optimizer state (and gradient shards) on nvme
//   nvme+param    ... and the parameter shards too
// Columns: median step() time over --iters steps (after one warm-up), the
// swap bytes read and written inside step(), and for nvme rows
//   disk_limit_s = bytes_read / raw read GB/s + bytes_written / raw write GB/s
// (raw GB/s from bench/io/raw_direct_io.h loops over --raw-mib MiB files in
// the same directory, best of 2) and ratio = disk_limit_s / step_s: 1.0 means
// the step runs at the disk's sequential speed with the update hidden.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/io/raw_direct_io.h"
#include "comm/communicator.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "runtime/engine/engine.h"

using namespace zeroshard;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Row {
  std::string name;
  double step_s = 0;
  double read_gb = 0;
  double write_gb = 0;
};

Row run(const std::string& name, Communicator& comm, double params, int units, int iters, OffloadDevice opt,
        OffloadDevice param, const std::string& dir, double sub_group) {
  EngineConfig c;
  c.zero.stage = 3;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-3f;
  c.offload.optimizer.device = opt;
  c.offload.optimizer.nvme_path = dir;
  c.offload.param.device = param;
  c.offload.param.nvme_path = dir;
  c.offload.param.max_in_cpu = 0;
  c.offload.sub_group_size = static_cast<std::int64_t>(sub_group);
  const auto per_unit = static_cast<std::int64_t>(params / units);
  c.offload.param.buffer_size = per_unit + 4096;
  c.zero.reduce_bucket_size = (per_unit + 15) / 16 * 16;
  Engine e(c, comm);
  std::vector<ParamId> ps;
  for (int u = 0; u < units; ++u) ps.push_back(e.add_parameter(e.add_unit(fmt::format("u{}", u)), fmt::format("w{}", u), {per_unit}));
  e.finalize();
  std::vector<double> times;
  std::vector<float> g(static_cast<std::size_t>(per_unit), 1e-3f);
  Row row{.name = name};
  for (int it = 0; it <= iters; ++it) {
    for (int u = units - 1; u >= 0; --u) {
      auto grad = e.grad(ps[static_cast<std::size_t>(u)]);
      std::copy(g.begin(), g.end(), grad.begin());
      e.reduce_gradients(static_cast<UnitId>(u));
    }
    const OffloadStats before = e.offload_stats();
    const auto t0 = Clock::now();
    e.step();
    const double dt = since(t0);
    const OffloadStats after = e.offload_stats();
    if (it == 0) continue;  // warm-up: first touch of buffers and files
    times.push_back(dt);
    row.read_gb = static_cast<double>(after.bytes_read - before.bytes_read) / 1e9;
    row.write_gb = static_cast<double>(after.bytes_written - before.bytes_written) / 1e9;
  }
  std::sort(times.begin(), times.end());
  row.step_s = times[times.size() / 2];
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Optimizer step with NVMe-resident state against state in memory and the raw disk"};
  double params = 2.5e8;
  int units = 8, iters = 3, raw_mib = 1024;
  double sub_group = 1.6e7;
  std::string dir = "/var/tmp/zs-bench-offload";
  app.add_option("--params", params, "parameters (4 GB of AdamW fp32 state per 2.5e8)")->check(CLI::Range(1e4, 1e11));
  app.add_option("--units", units, "units")->check(CLI::Range(1, 4096));
  app.add_option("--iters", iters, "timed steps per row (median)")->check(CLI::Range(1, 100));
  app.add_option("--sub-group-size", sub_group, "elements per sub-group")->check(CLI::Range(4096.0, 1e12));
  app.add_option("--dir", dir, "directory for swap files and the raw loop")->capture_default_str();
  app.add_option("--raw-mib", raw_mib, "MiB per raw loop file (4 files)")->check(CLI::Range(4, 65536));
  CLI11_PARSE(app, argc, argv);
  try {
    auto comm = make_world_communicator();
    std::filesystem::create_directories(dir);
    // The disk limit: 4 files of raw_mib MiB, written then read, best of 2.
    bench::Pass p{.dir = dir, .prefix = "raw", .shards = 4, .shard_bytes = static_cast<std::size_t>(raw_mib) << 20,
                  .buffers = {}};
    AlignedBuffer<std::byte> buf(p.shard_bytes);
    std::fill_n(buf.data(), p.shard_bytes, std::byte{0x5a});
    p.buffers.push_back(buf.span());
    double w = 1e30, r = 1e30;
    for (int k = 0; k < 2; ++k) {
      auto t0 = Clock::now();
      bench::raw_write(p);
      w = std::min(w, since(t0));
      t0 = Clock::now();
      bench::raw_read(p);
      r = std::min(r, since(t0));
    }
    for (std::size_t i = 0; i < p.shards; ++i) std::filesystem::remove(p.file(i));
    const double bytes = static_cast<double>(p.shards * p.shard_bytes);
    const double write_gbps = bytes / w / 1e9, read_gbps = bytes / r / 1e9;
    fmt::print("bench_offload_step: {:g} parameters in {} units, stage 3, world size 1, AdamW fp32, sub_group_size "
               "{:g}; raw O_DIRECT in {}: write {:.3f} GB/s, read {:.3f} GB/s\n",
               params, units, sub_group, dir, write_gbps, read_gbps);
    std::vector<Row> rows;
    rows.push_back(run("memory", *comm, params, units, iters, OffloadDevice::none, OffloadDevice::none, dir, sub_group));
    rows.push_back(run("cpu", *comm, params, units, iters, OffloadDevice::cpu, OffloadDevice::cpu, dir, sub_group));
    rows.push_back(run("nvme", *comm, params, units, iters, OffloadDevice::nvme, OffloadDevice::none, dir, sub_group));
    rows.push_back(
        run("nvme+param", *comm, params, units, iters, OffloadDevice::nvme, OffloadDevice::nvme, dir, sub_group));
    fmt::print("{:<11} {:>9} {:>11} {:>9} {:>9} {:>13} {:>7}\n", "state", "step_s", "vs_memory", "read_GB",
               "write_GB", "disk_limit_s", "ratio");
    for (const Row& row : rows) {
      const double limit = row.read_gb / read_gbps + row.write_gb / write_gbps;
      fmt::print("{:<11} {:>9.3f} {:>11.2f} {:>9.2f} {:>9.2f} {:>13.3f} {:>7}\n", row.name, row.step_s,
                 row.step_s / rows.front().step_s, row.read_gb, row.write_gb, limit,
                 limit > 0 ? fmt::format("{:.2f}", limit / row.step_s) : std::string("-"));
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "bench_offload_step: {}\n", e.what());
    return 1;
  }
}
