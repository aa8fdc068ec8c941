#include "runtime/plan/calibrate.h"

#include <algorithm>
#include <span>
#include <filesystem>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/tracer.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant/symmetric_quant.h"
#include "offload/host_allocator.h"
#include "offload/io/io_engine.h"
#include "offload/swap_directory.h"

namespace zeroshard {
namespace {

double now_s() { return static_cast<double>(Tracer::now_ns()) * 1e-9; }

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

// Elements per second of ZeRO++'s quantization round trip: quantize n
// floats (int8, blocks of 2048), dequantize-accumulate them back.
double quantize_rate(std::size_t n) {
  const kernels::SymQuantFormat f{kernels::QuantBits::int8, 2048};
  std::vector<float> x(n), acc(n, 0.0f), chunk(kernels::sym_quant_chunk_bytes(n, f) / 4 + 1);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1001) * 1e-3f - 0.5f;
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const double t0 = now_s();
    kernels::quantize_symmetric(x.data(), DType::f32, n, f, chunk.data());
    kernels::dequantize_accumulate(chunk.data(), n, f, acc.data());
    if (i > 0) best = std::min(best, now_s() - t0);  // the first pass faults the pages in
  }
  return static_cast<double>(n) / best;
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

// Seconds to write (or read) `items` through `dir` as one batch, the slowest rank's.
double swap_batch_seconds(Communicator& comm, SwapDirectory& dir, std::span<const SwapItem> items, bool write) {
  comm.barrier();
  const double t0 = now_s();
  SwapBatch batch = write ? dir.write(items) : dir.read(items);
  batch.wait();
  float t = static_cast<float>(now_s() - t0);
  comm.all_reduce(&t, 1, DType::f32, ReduceOp::max);  // the ranks share the disk
  return t;
}

// The swap files' own protocol (offload/swap_directory.h: O_DIRECT, a write
// to a temporary file, fdatasync, rename, directory fsync): one file of
// disk_bytes gives the bandwidth, a batch of kSmallFiles files of 64 KiB the
// cost per file beyond its bytes.
void measure_disk(Communicator& comm, const CalibrateOptions& o, MachineRates& r) {
  if (o.nvme_path.empty()) return;
  if (o.disk_bytes == 0 || o.disk_bytes % kDirectIoAlignment != 0) {
    throw ConfigError(fmt::format("calibration disk_bytes {} is not a positive multiple of {}", o.disk_bytes,
                                  kDirectIoAlignment));
  }
  namespace fs = std::filesystem;
  constexpr int kSmallFiles = 16;
  constexpr std::size_t kSmall = std::size_t{64} << 10;
  const fs::path path = fs::path(o.nvme_path) / fmt::format("zs-calibrate-{}-{}", ::getpid(), comm.rank());
  AioConfig cfg;
  auto io = make_io_engine(cfg);
  struct Remove {  // the probe's folder goes, also on an error
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove{path};
  SwapDirectory dir(*io, path, cfg);
  HostBlock big(std::make_shared<PageableHostAllocator>(), o.disk_bytes);
  HostBlock small(std::make_shared<PageableHostAllocator>(), kSmall * kSmallFiles);
  std::fill(big.data(), big.data() + big.bytes(), std::byte{0x5a});
  std::fill(small.data(), small.data() + small.bytes(), std::byte{0xa5});
  const SwapItem one{"big", big.span(), big.bytes()};
  std::vector<std::string> keys;
  std::vector<SwapItem> many;
  for (int i = 0; i < kSmallFiles; ++i) keys.push_back(fmt::format("small{}", i));
  for (int i = 0; i < kSmallFiles; ++i) {
    many.push_back({keys[static_cast<std::size_t>(i)], small.span().subspan(static_cast<std::size_t>(i) * kSmall, kSmall),
                    kSmall});
  }
  const double write_big = swap_batch_seconds(comm, dir, {&one, 1}, true);
  const double read_big = swap_batch_seconds(comm, dir, {&one, 1}, false);
  const double write_many = swap_batch_seconds(comm, dir, many, true);
  const double read_many = swap_batch_seconds(comm, dir, many, false);
  const auto bytes = static_cast<double>(o.disk_bytes);
  r.disk_write = bytes / write_big;
  r.disk_read = bytes / read_big;
  const double small_bytes = static_cast<double>(kSmall) * kSmallFiles;
  r.disk_write_file = std::max(0.0, (write_many - small_bytes / r.disk_write) / kSmallFiles);
  r.disk_read_file = std::max(0.0, (read_many - small_bytes / r.disk_read) / kSmallFiles);
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
  float qr = static_cast<float>(quantize_rate(options.optimizer_elements));
  comm.all_reduce(&qr, 1, DType::f32, ReduceOp::min);
  r.quantize_rate = qr;
  measure_collectives(comm, options.max_collective_bytes, r);
  measure_disk(comm, options, r);
  return r;
}

}  // namespace zeroshard
