// bench_io: read and write bandwidth of the offload I/O engines for
// shard-sized requests, against a raw sequential O_DIRECT pwrite/pread loop
// over the same bytes measured in the same run.
//
// For each shard size, a pass moves --total-gib GiB as total/shard files of
// one shard each. Every path uses O_DIRECT, so the page cache plays no part:
//   raw         open, pwrite (or pread) the whole shard in one call per
//               shard (continued after short transfers), fdatasync, close;
//               one file after the other: the limit.
//   io_uring    IoUringEngine: one batch of all shards, split into
//               block_size pieces, queue_depth in flight; fdatasync each.
//   thread_pool ThreadPoolIoEngine (pread/pwrite on intra_op_parallelism
//               threads); fdatasync each.
//   swap_dir    SwapDirectory on the io_uring engine: write to a temporary,
//               fdatasync, rename, fsync the directory (what the swapper
//               pays), and reads of those files.
// Each path runs --reps times interleaved with the others; the best time
// counts. GB/s = bytes / seconds (1 GB = 1e9 bytes); ratio = GB/s of the
// path / GB/s of raw for the same shard size and direction. The goal is a
// ratio >= 0.85 for the engines. The last lines, "write_ratio_min R" and
// "read_ratio_min R", are the io_uring engine's worst ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include "core/error.h"
#include "offload/io/free_space.h"
#include "offload/host_pool.h"
#include "offload/io/io_engine.h"
#include "offload/io/os_error.h"
#include "offload/swap_directory.h"
#include "bench/io/raw_direct_io.h"

using namespace zeroshard;
using zeroshard::bench::Pass;
using zeroshard::bench::raw_read;
using zeroshard::bench::raw_write;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void engine_pass(IoEngine& engine, const Pass& p, IoOp op) {
  std::vector<FileHandle> files;
  files.reserve(p.shards);
  std::vector<IoRequest> reqs;
  for (std::size_t i = 0; i < p.shards; ++i) {
    files.push_back(FileHandle::open(p.file(i), op == IoOp::write ? FileMode::write_create : FileMode::read, true));
    reqs.push_back(IoRequest{op, &files.back(), 0, p.buffer(i), p.shard_bytes});
  }
  engine.wait(engine.submit(reqs));
  if (op == IoOp::write) {
    for (FileHandle& f : files) f.sync_data();
  }
  for (FileHandle& f : files) f.close();
}

void swap_pass(SwapDirectory& dir, const Pass& p, IoOp op) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < p.shards; ++i) keys.push_back(fmt::format("{}.shard{}", p.prefix, i));
  std::vector<SwapItem> items;
  for (std::size_t i = 0; i < p.shards; ++i) {
    items.push_back(SwapItem{keys[i], std::span(p.buffer(i), p.shard_bytes), p.shard_bytes});
  }
  if (op == IoOp::write) {
    dir.write(items).wait();
  } else {
    dir.read(items).wait();
  }
}

struct Row {
  std::size_t shard_mib;
  const char* op;
  std::string path;
  double best_s;
  double gbps;
  double ratio;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Offload I/O engines against a raw O_DIRECT pwrite/pread loop measured in the same run"};
  std::string dir_arg = "/tmp";
  double total_gib = 2.0;
  std::vector<std::size_t> shard_mib = {64, 256};
  int reps = 2;
  AioConfig cfg;
  app.add_option("--dir", dir_arg, "directory on the disk to measure (a subdirectory is created and removed)");
  app.add_option("--total-gib", total_gib, "GiB moved per pass");
  app.add_option("--shard-mib", shard_mib, "shard sizes in MiB");
  app.add_option("--reps", reps, "repetitions of every path (best counts)");
  app.add_option("--block-size", cfg.block_size, "aio.block_size, bytes");
  app.add_option("--queue-depth", cfg.queue_depth, "aio.queue_depth");
  app.add_option("--threads", cfg.intra_op_parallelism, "aio.intra_op_parallelism (thread-pool engine)");
  CLI11_PARSE(app, argc, argv);

  try {
    cfg.validate("bench_io");
    const std::size_t max_shard = *std::max_element(shard_mib.begin(), shard_mib.end()) << 20;
    const auto total = static_cast<std::size_t>(total_gib * double(1 << 30));
    char tmpl_buf[4096];
    std::snprintf(tmpl_buf, sizeof tmpl_buf, "%s/zs_bench_io.XXXXXX", dir_arg.c_str());
    if (::mkdtemp(tmpl_buf) == nullptr) throw_file_error("creating a directory under", dir_arg, errno);
    const std::filesystem::path root = tmpl_buf;
    struct Cleanup {
      std::filesystem::path p;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } cleanup{root};
    // Four paths keep their files until the shard size is done, plus one
    // temporary generation of the swap directory.
    check_free_space(root, 4 * (total + max_shard) + max_shard);

    MemoryLedger ledger;
    HostPool pool(ledger);
    std::vector<HostBuffer> staging;
    for (int i = 0; i < 4; ++i) {
      staging.push_back(pool.acquire(max_shard, MemCategory::optimizer_states));
      std::memset(staging.back().data(), 0x5a + i, staging.back().capacity());
    }
    std::unique_ptr<IoEngine> uring = make_io_engine(cfg);
    AioConfig pool_cfg = cfg;
    pool_cfg.force_no_io_uring = true;
    std::unique_ptr<IoEngine> threads = make_io_engine(pool_cfg);
    const bool registered = uring->register_buffers(pool.blocks());
    SwapDirectory swap(*uring, root / "swap", cfg);

    fmt::print("bench_io: {} ({}), {:.2f} GiB per pass, block_size {} KiB, queue_depth {}, "
               "intra_op_parallelism {}, engine {} ({} buffers), swap_dir {}\n",
               root.string(), swap.direct() ? "O_DIRECT" : "buffered", double(total) / double(1 << 30),
               cfg.block_size >> 10, cfg.queue_depth, cfg.intra_op_parallelism, uring->name(),
               registered ? "registered" : "unregistered", swap.direct() ? "O_DIRECT" : "buffered");
    std::vector<Row> rows;
    double write_min = 1e9;
    double read_min = 1e9;
    for (const std::size_t mib : shard_mib) {
      const std::size_t shard = mib << 20;
      Pass base;
      base.dir = root;
      base.shard_bytes = shard;
      base.shards = std::max<std::size_t>(1, total / shard);
      for (const HostBuffer& b : staging) base.buffers.push_back(b.capacity_span().first(shard));
      const std::size_t bytes = base.shards * shard;
      auto pass = [&](const char* prefix) {
        Pass p = base;
        p.prefix = fmt::format("{}_{}", prefix, mib);
        return p;
      };
      const Pass raw = pass("raw"), ur = pass("uring"), tp = pass("pool"), sw = pass("swap");
      struct Path {
        std::string name;
        std::function<void()> write, read;
      };
      const std::vector<Path> paths = {
          {"raw O_DIRECT loop", [&] { raw_write(raw); }, [&] { raw_read(raw); }},
          {std::string(uring->name()) + " engine", [&] { engine_pass(*uring, ur, IoOp::write); },
           [&] { engine_pass(*uring, ur, IoOp::read); }},
          {"thread_pool engine", [&] { engine_pass(*threads, tp, IoOp::write); },
           [&] { engine_pass(*threads, tp, IoOp::read); }},
          {"swap_dir (tmp+fsync+rename)", [&] { swap_pass(swap, sw, IoOp::write); },
           [&] { swap_pass(swap, sw, IoOp::read); }},
      };
      std::vector<double> best_w(paths.size(), 1e30), best_r(paths.size(), 1e30);
      for (int r = 0; r < reps; ++r) {
        for (std::size_t k = 0; k < paths.size(); ++k) best_w[k] = std::min(best_w[k], seconds_of(paths[k].write));
        for (std::size_t k = 0; k < paths.size(); ++k) best_r[k] = std::min(best_r[k], seconds_of(paths[k].read));
      }
      for (int dirn = 0; dirn < 2; ++dirn) {
        const std::vector<double>& best = dirn == 0 ? best_w : best_r;
        const double raw_gbps = double(bytes) / best[0] / 1e9;
        for (std::size_t k = 0; k < paths.size(); ++k) {
          const double gbps = double(bytes) / best[k] / 1e9;
          rows.push_back(Row{mib, dirn == 0 ? "write" : "read", paths[k].name, best[k], gbps, gbps / raw_gbps});
        }
        const double engine_ratio = rows[rows.size() - 3].ratio;
        (dirn == 0 ? write_min : read_min) = std::min(dirn == 0 ? write_min : read_min, engine_ratio);
      }
      for (const Pass* p : {&raw, &ur, &tp}) {
        for (std::size_t i = 0; i < p->shards; ++i) std::filesystem::remove(p->file(i));
      }
      swap.remove_all();
    }
    fmt::print("{:>9} {:>5} {:<28} {:>9} {:>8} {:>6}\n", "shard_MiB", "op", "path", "best_s", "GB/s", "ratio");
    for (const Row& r : rows) {
      fmt::print("{:>9} {:>5} {:<28} {:>9.3f} {:>8.3f} {:>6.2f}\n", r.shard_mib, r.op, r.path, r.best_s, r.gbps,
                 r.ratio);
    }
    fmt::print("write_ratio_min {:.2f}\nread_ratio_min {:.2f}\n", write_min, read_min);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_io: %s\n", e.what());
    return 1;
  }
}
