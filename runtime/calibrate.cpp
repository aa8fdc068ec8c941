#include "runtime/calibrate.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"
#include "offload/host_allocator.h"
#include "offload/io_engine.h"

namespace zeroshard {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double optimizer_bandwidth(std::size_t n) {
  std::vector<float> p(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  const kernels::AdamScalars s;
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    const double t0 = now_s();
    kernels::adam_update(p.data(), g.data(), m.data(), v.data(), n, s);
    if (i > 0) best = std::min(best, now_s() - t0);  // the first pass faults the pages in
  }
  return 28.0 * static_cast<double>(n) / best;
}

// The slowest rank's median time of `reps` timed calls of `call` (one
// untimed call first). `reps` must be the same on every rank.
template <class F>
double timed(Communicator& comm, int reps, F call) {
  call();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const double t0 = now_s();
    call();
    t.push_back(now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  float median = static_cast<float>(t[t.size() / 2]);
  comm.all_reduce(&median, 1, DType::f32, ReduceOp::max);
  return median;
}

void measure_collectives(Communicator& comm, std::size_t max_bytes, MachineRates& r) {
  const int n = comm.world_size();
  if (n < 2) return;
  const std::size_t max_elems = max_bytes / sizeof(float);
  std::vector<float> a(max_elems + static_cast<std::size_t>(n), 1.0f), b(a.size(), 0.0f);
  for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    // Per-rank blocks of whole elements: the buffer of `bytes` rounded down to n blocks.
    const std::size_t block = std::max<std::size_t>(1, bytes / sizeof(float) / static_cast<std::size_t>(n));
    const double actual = static_cast<double>(block * static_cast<std::size_t>(n) * sizeof(float));
    const int reps = bytes <= (std::size_t{1} << 20) ? 9 : 3;
    r.all_to_all.bytes.push_back(actual);
    r.all_to_all.seconds.push_back(timed(comm, reps, [&] { comm.all_to_all(a.data(), b.data(), block, DType::f32); }));
    r.all_gather.bytes.push_back(actual);
    r.all_gather.seconds.push_back(timed(comm, reps, [&] { comm.all_gather(a.data(), b.data(), block, DType::f32); }));
    r.all_reduce.bytes.push_back(actual);
    r.all_reduce.seconds.push_back(
        timed(comm, reps, [&] { comm.all_reduce(a.data(), block * static_cast<std::size_t>(n), DType::f32, ReduceOp::sum); }));
  }
}

void measure_disk(Communicator& comm, const CalibrateOptions& o, MachineRates& r) {
  if (o.nvme_path.empty()) return;
  if (o.disk_bytes == 0 || o.disk_bytes % kDirectIoAlignment != 0) {
    throw ConfigError(fmt::format("calibration disk_bytes {} is not a positive multiple of {}", o.disk_bytes,
                                  kDirectIoAlignment));
  }
  namespace fs = std::filesystem;
  const fs::path path = fs::path(o.nvme_path) / fmt::format("zs-calibrate-{}-{}.bin", ::getpid(), comm.rank());
  AioConfig cfg;
  auto io = make_io_engine(cfg);
  HostBlock buf(std::make_shared<PageableHostAllocator>(), o.disk_bytes);
  std::fill(buf.data(), buf.data() + buf.bytes(), std::byte{0x5a});
  int err = 0;
  FileHandle w = FileHandle::try_open(path, FileMode::write_create, true, err);
  if (!w.valid()) w = FileHandle::open(path, FileMode::write_create, false);
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove{path};
  const IoRequest wr{IoOp::write, &w, 0, buf.data(), buf.bytes()};
  comm.barrier();
  double t0 = now_s();
  io->wait(io->submit({&wr, 1}));
  w.sync_data();
  float write_s = static_cast<float>(now_s() - t0);
  w.close();
  FileHandle rd = FileHandle::try_open(path, FileMode::read, true, err);
  if (!rd.valid()) rd = FileHandle::open(path, FileMode::read, false);
  const IoRequest rq{IoOp::read, &rd, 0, buf.data(), buf.bytes()};
  comm.barrier();
  t0 = now_s();
  io->wait(io->submit({&rq, 1}));
  float read_s = static_cast<float>(now_s() - t0);
  // Every rank shares the disk: the slowest rank's time is what a step sees.
  comm.all_reduce(&write_s, 1, DType::f32, ReduceOp::max);
  comm.all_reduce(&read_s, 1, DType::f32, ReduceOp::max);
  r.disk_write = static_cast<double>(o.disk_bytes) / write_s;
  r.disk_read = static_cast<double>(o.disk_bytes) / read_s;
}

}  // namespace

MachineRates calibrate(Communicator& comm, const CalibrateOptions& options) {
  MachineRates r;
  r.isa = kernels::simd_target_name();
  r.threads = kernels::num_threads();
  r.world_size = comm.world_size();
  float bw = static_cast<float>(optimizer_bandwidth(options.optimizer_elements));
  comm.all_reduce(&bw, 1, DType::f32, ReduceOp::min);  // the slowest rank sets the step
  r.optimizer_bandwidth = bw;
  measure_collectives(comm, options.max_collective_bytes, r);
  measure_disk(comm, options, r);
  return r;
}

}  // namespace zeroshard
