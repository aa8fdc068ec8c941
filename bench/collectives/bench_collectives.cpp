// bench_collectives: all_reduce, reduce_scatter and all_gather through the
// zeroshard Communicator against the raw MPI call on the same buffers, in
// the same run (bench/collectives/README.md). Run under mpirun.
// The Communicator path is its blocking call (all_reduce, ...), or with
// --nonblocking the non-blocking form followed by wait() (iall_reduce(...)
// .wait(), what the Engine uses), or with --ordered, for all_reduce and
// reduce_scatter, the rank-ordered forms of comm/ordered_reduce.h
// (OrderedReduction: all-to-all, local sum in rank order, all-gather; the
// Engine's default reductions) against MPI's native calls.
//
// For each collective and message size (fp32, sum), the two paths run
// interleaved iteration by iteration (their order alternating), each
// iteration after an MPI_Barrier; an iteration's time is the maximum over
// ranks of each rank's wall time (MPI_Reduce max to rank 0), and a row
// reports the median over --iters iterations after --warmup warm-ups.
// Columns follow nccl-tests' definitions: size is the bytes of the full
// buffer (all_reduce: the buffer; reduce_scatter: the send buffer; all_gather:
// the receive buffer), count = size / 4, algbw = size / time, busbw = algbw x
// 2(n-1)/n for all_reduce and (n-1)/n for reduce_scatter and all_gather.
// ratio = busbw(Communicator) / busbw(raw MPI).
//
// After the timed iterations each path runs once more on freshly filled
// buffers and every element is compared with its closed-form value (inputs
// are small integers, so every sum is exact in fp32 whatever the reduction
// order); #wrong is the number of mismatching elements summed over ranks.
// The program exits with status 1 if any #wrong is not 0.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/median.h"
#include "bench/mpi_main.h"
#include "comm/communicator.h"
#include "comm/ordered_reduce.h"
#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_nbc_tuning.h"
#include "comm/mpi/mpi_progress.h"
#include "core/aligned_buffer.h"

namespace {

using namespace zeroshard;
using bench::median;

constexpr std::size_t kMiB = std::size_t{1} << 20;

enum class Op { all_reduce, reduce_scatter, all_gather };

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce: return "all_reduce";
    case Op::reduce_scatter: return "reduce_scatter";
    case Op::all_gather: return "all_gather";
  }
  return "?";
}

const char* raw_call_name(Op op) {
  switch (op) {
    case Op::all_reduce: return "MPI_Allreduce";
    case Op::reduce_scatter: return "MPI_Reduce_scatter_block";
    case Op::all_gather: return "MPI_Allgather";
  }
  return "?";
}

// nccl-tests' bus bandwidth factor for n ranks.
double busbw_factor(Op op, int n) {
  const double ranks = static_cast<double>(n);
  return op == Op::all_reduce ? 2.0 * (ranks - 1.0) / ranks : (ranks - 1.0) / ranks;
}

// Input element i of rank r: a small integer, so any sum over up to 2^14
// ranks stays below 2^24 and is exact in fp32 in every order.
inline float input_value(int r, std::size_t i) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 1021);
}

// Sum over ranks 0..n-1 of input_value(r, i), in double (exact).
inline float summed_value(int n, std::size_t i) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += input_value(r, i);
  return static_cast<float>(s);
}

// One size of one collective: `total` elements in the full buffer (a
// multiple of the world size), `block` = total / n per rank.
struct Shape {
  std::size_t total = 0;
  std::size_t block = 0;
};

// The buffers every collective and size shares (allocated once at the
// largest size, huge pages asked for, pre-faulted): `big` holds a full
// buffer, `small` one rank's block.
struct Buffers {
  AlignedBuffer<float> big;
  AlignedBuffer<float> small;
  AlignedBuffer<float> scratch;  ///< --ordered: the all-to-all's receive buffer (big's size)
};

// Fills the inputs of `op` on rank r (what the path reads).
void fill_inputs(Op op, const Shape& s, int r, Buffers& b) {
  switch (op) {
    case Op::all_reduce:
    case Op::reduce_scatter:
      for (std::size_t i = 0; i < s.total; ++i) b.big[i] = input_value(r, i);
      return;
    case Op::all_gather:
      for (std::size_t i = 0; i < s.block; ++i) b.small[i] = input_value(r, i);
      return;
  }
}

// Counts the elements of the output of `op` on rank r (of n) that differ
// from their closed-form value.
std::uint64_t count_wrong(Op op, const Shape& s, int r, int n, const Buffers& b) {
  std::uint64_t wrong = 0;
  switch (op) {
    case Op::all_reduce:
      for (std::size_t i = 0; i < s.total; ++i) wrong += b.big[i] != summed_value(n, i);
      break;
    case Op::reduce_scatter: {
      const std::size_t base = static_cast<std::size_t>(r) * s.block;
      for (std::size_t j = 0; j < s.block; ++j) wrong += b.small[j] != summed_value(n, base + j);
      break;
    }
    case Op::all_gather:
      for (int q = 0; q < n; ++q) {
        const float* blk = b.big.data() + static_cast<std::size_t>(q) * s.block;
        for (std::size_t j = 0; j < s.block; ++j) wrong += blk[j] != input_value(q, j);
      }
      break;
  }
  return wrong;
}

// Throws if an MPI call of the raw path fails (MPI_COMM_WORLD has
// MPI_ERRORS_RETURN once make_world_communicator() ran).
void raw_check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(fmt::format("{} failed: {}", call, std::string(msg, len)));
  }
}

// Runs one collective through our Communicator: its blocking call, or the
// non-blocking form followed by wait().
void run_communicator(Op op, const Shape& s, bool nonblocking, bool ordered, Communicator& comm, Buffers& b) {
  if (ordered && op == Op::all_reduce) {
    return OrderedReduction::all_reduce(comm, b.big.data(), b.scratch.data(), s.block, DType::f32, host_block_sum())
        .wait();
  }
  if (ordered && op == Op::reduce_scatter) {
    return OrderedReduction::reduce_scatter(comm, b.big.data(), b.scratch.data(), b.small.data(), s.block,
                                            DType::f32, host_block_sum())
        .wait();
  }
  switch (op) {
    case Op::all_reduce:
      if (nonblocking) {
        return comm.iall_reduce(b.big.data(), s.total, DType::f32, ReduceOp::sum).wait();
      }
      return comm.all_reduce(b.big.data(), s.total, DType::f32, ReduceOp::sum);
    case Op::reduce_scatter:
      if (nonblocking) {
        return comm.ireduce_scatter(b.big.data(), b.small.data(), s.block, DType::f32,
                                    ReduceOp::sum).wait();
      }
      return comm.reduce_scatter(b.big.data(), b.small.data(), s.block, DType::f32, ReduceOp::sum);
    case Op::all_gather:
      if (nonblocking) {
        return comm.iall_gather(b.small.data(), b.big.data(), s.block, DType::f32).wait();
      }
      return comm.all_gather(b.small.data(), b.big.data(), s.block, DType::f32);
  }
}

// Runs one collective through our Communicator (path 0, see
// run_communicator) or the raw MPI call (path 1) on the shared buffers.
void run_path(int path, Op op, const Shape& s, bool nonblocking, bool ordered, Communicator& comm, Buffers& b) {
  if (path == 0) return run_communicator(op, s, nonblocking, ordered, comm, b);
  const int block = static_cast<int>(s.block);  // < INT_MAX: main() bounds --max-bytes
  switch (op) {
    case Op::all_reduce:
      return raw_check(MPI_Allreduce(MPI_IN_PLACE, b.big.data(), static_cast<int>(s.total),
                                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                       "MPI_Allreduce");
    case Op::reduce_scatter:
      return raw_check(MPI_Reduce_scatter_block(b.big.data(), b.small.data(), block, MPI_FLOAT,
                                                MPI_SUM, MPI_COMM_WORLD),
                       "MPI_Reduce_scatter_block");
    case Op::all_gather:
      return raw_check(MPI_Allgather(b.small.data(), block, MPI_FLOAT, b.big.data(), block, MPI_FLOAT,
                                     MPI_COMM_WORLD),
                       "MPI_Allgather");
  }
}

struct Options {
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 256 * kMiB;
  std::size_t step = 2;
  int iters = 20;
  int warmup = 5;
  std::string op = "all";
  bool quick = false;
  bool nonblocking = false;
  bool ordered = false;  ///< reductions through OrderedReduction (comm/ordered_reduce.h)
};

// Result of one path at one size.
struct PathResult {
  double seconds = 0;      // median of the per-iteration maxima over ranks (rank 0 only)
  std::uint64_t wrong = 0;  // mismatching elements summed over ranks (rank 0 only)
};

// Times both paths at one size and checks them; results valid on rank 0.
void measure(Op op, const Shape& s, const Options& o, Communicator& comm, Buffers& b,
             PathResult out[2]) {
  const int r = comm.rank(), n = comm.world_size();
  std::vector<double> times[2];
  fill_inputs(op, s, r, b);
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (int k = 0; k < 2; ++k) {
      const int path = it % 2 == 0 ? k : 1 - k;  // alternate which path goes first
      raw_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
      const double t0 = MPI_Wtime();
      run_path(path, op, s, o.nonblocking, o.ordered, comm, b);
      const double t = MPI_Wtime() - t0;
      double tmax = 0;
      raw_check(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
      if (it >= o.warmup) times[path].push_back(tmax);
    }
  }
  for (int path = 0; path < 2; ++path) {
    fill_inputs(op, s, r, b);
    raw_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    run_path(path, op, s, o.nonblocking, o.ordered, comm, b);
    const std::uint64_t wrong = count_wrong(op, s, r, n, b);
    std::uint64_t total = 0;
    raw_check(MPI_Reduce(&wrong, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD),
              "MPI_Reduce");
    out[path].seconds = r == 0 ? median(times[path]) : 0;
    out[path].wrong = total;
  }
}

// The message sizes in bytes: min, min*step, ... up to max.
std::vector<std::size_t> sizes_of(const Options& o) {
  std::vector<std::size_t> v;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= o.step) {
    v.push_back(b);
    if (b > std::numeric_limits<std::size_t>::max() / o.step) break;
  }
  return v;
}

// Runs every size of one collective; prints its table on rank 0 and returns
// the smallest ratio at sizes >= 1 MiB (-1 if there is none) and whether
// every #wrong was 0.
std::pair<double, bool> run_op(Op op, const Options& o, Communicator& comm, Buffers& b) {
  const int n = comm.world_size();
  const bool root = comm.rank() == 0;
  const double factor = busbw_factor(op, n);
  if (root) {
    fmt::print("\n# {}: {} ranks, fp32{}, busbw = algbw x {:.3f} ({}); median of {} "
               "iterations after {} warm-up, paths interleaved\n",
               op_name(op), n, op == Op::all_gather ? "" : " sum", factor, op == Op::all_reduce ? "2(n-1)/n" : "(n-1)/n", o.iters,
               o.warmup);
    fmt::print("# {:>50}   {:<38}   {}\n",
               o.nonblocking ? "zeroshard Communicator (non-blocking + wait)"
                             : "zeroshard Communicator",
               "", raw_call_name(op));
    fmt::print("# {:>10} {:>12} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6}   {:>10} {:>8} {:>8} {:>6} "
               "{:>6}\n",
               "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong", "ratio");
    fmt::print("# {:>10} {:>12} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6}   {:>10} {:>8} {:>8} {:>6} "
               "{:>6}\n",
               "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "", "");
  }
  double ratio_min = -1;
  bool all_right = true;
  for (const std::size_t bytes : sizes_of(o)) {
    Shape s;
    s.block = bytes / sizeof(float) / static_cast<std::size_t>(n);
    s.total = s.block * static_cast<std::size_t>(n);
    if (s.block == 0) continue;
    PathResult res[2];
    measure(op, s, o, comm, b, res);
    if (!root) continue;
    const double size_b = static_cast<double>(s.total * sizeof(float));
    double busbw[2];
    std::string cols[2];
    for (int p = 0; p < 2; ++p) {
      const double algbw = size_b / res[p].seconds / 1e9;
      busbw[p] = algbw * factor;
      cols[p] = fmt::format("{:>10.1f} {:>8.3f} {:>8.3f} {:>6}", res[p].seconds * 1e6, algbw,
                            busbw[p], res[p].wrong);
      all_right = all_right && res[p].wrong == 0;
    }
    const double ratio = busbw[0] / busbw[1];
    if (s.total * sizeof(float) >= kMiB) ratio_min = ratio_min < 0 ? ratio : std::min(ratio_min, ratio);
    fmt::print("  {:>10} {:>12} {:>6} {:>6} {}   {} {:>6.3f}\n", s.total * sizeof(float), s.total,
               "float", op == Op::all_gather ? "none" : "sum", cols[0], cols[1], ratio);
    std::fflush(stdout);
  }
  return {ratio_min, all_right};
}

int run(const Options& o) {
  std::unique_ptr<Communicator> comm = make_world_communicator();
  const int n = comm->world_size();
  const bool root = comm->rank() == 0;
  std::vector<Op> ops;
  for (const Op op : {Op::all_reduce, Op::reduce_scatter, Op::all_gather}) {
    if (o.op == "all" || o.op == op_name(op)) ops.push_back(op);
  }
  const std::size_t big = o.max_bytes / sizeof(float) / static_cast<std::size_t>(n) *
                          static_cast<std::size_t>(n);
  if (big == 0) {
    throw std::invalid_argument(fmt::format(
        "--max-bytes {} holds fewer than one fp32 element per rank at {} ranks; raise it",
        o.max_bytes, n));
  }
  Buffers b;
  b.big = AlignedBuffer<float>(big);
  b.small = AlignedBuffer<float>(big / static_cast<std::size_t>(n));
  if (o.ordered) b.scratch = AlignedBuffer<float>(big);
  if (root) {
    const std::string lib = bench::mpi_library_name();
    MpiProgress& progress = MpiProgress::instance();
    fmt::print("bench_collectives: {} ranks; {}; {}; progress thread {}; libnbc iallreduce "
               "algorithm selection {}; sizes {} to {} B (x{})\n",
               n, lib, mpi_thread_level_name(mpi_thread_level()),
               progress.enabled() ? "on" : "off",
               iallreduce_algorithm_selection_active() ? "on" : "off", o.min_bytes, o.max_bytes,
               o.step);
    fmt::print("Communicator path: {}; time = median over iterations of max over ranks; "
               "ratio = busbw(Communicator) / busbw(raw MPI) at the same size\n",
               o.ordered ? "rank-ordered reductions (all-to-all + local sum in rank order [+ all-gather], "
                           "comm/ordered_reduce.h); all_gather as --nonblocking"
                         : (o.nonblocking ? "non-blocking call + wait()" : "blocking call"));
  }
  std::vector<std::pair<Op, std::pair<double, bool>>> results;
  for (const Op op : ops) results.emplace_back(op, run_op(op, o, *comm, b));
  bool all_right = true;
  if (root) fmt::print("\n");
  for (const auto& [op, r] : results) {
    all_right = all_right && r.second;
    if (!root) continue;
    if (r.first < 0) {
      fmt::print("ratio_min_ge_1MiB {} n/a (no size >= 1 MiB)\n", op_name(op));
    } else {
      fmt::print("ratio_min_ge_1MiB {} {:.3f}\n", op_name(op), r.first);
    }
  }
  if (root) {
    fmt::print("progress thread probes on rank 0: {}\n", MpiProgress::instance().polls());
  }
  if (root && !all_right) fmt::print(stderr, "bench_collectives: some #wrong are not 0\n");
  return root && !all_right ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_collectives: Communicator collectives vs. raw MPI calls (run under mpirun)"};
  Options o;
  app.add_option("--min-bytes", o.min_bytes, "smallest message (bytes, suffixes K/M/G = 2^10...)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--max-bytes", o.max_bytes, "largest message (bytes, suffixes K/M/G)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--step-factor", o.step, "size multiplier between rows (2 or 4 ...)")
      ->check(CLI::Range(2, 64));
  app.add_option("--iters", o.iters, "timed iterations per path and size (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed iterations per path and size first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--op", o.op, "collective to run")
      ->check(CLI::IsMember({"all", "all_reduce", "reduce_scatter", "all_gather"}));
  app.add_flag("--nonblocking", o.nonblocking,
               "time the Communicator's non-blocking calls followed by wait() (the Engine's "
               "path) instead of its blocking calls");
  app.add_flag("--ordered", o.ordered,
               "time all_reduce and reduce_scatter in rank order (OrderedReduction: Ialltoall, a "
               "left-to-right SIMD sum, and for all_reduce an Iallgather; the Engine's default) "
               "against MPI's native calls");
  app.add_flag("--quick", o.quick, "small run for tests: 1 KiB to 256 KiB, x4, 5 iterations");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.max_bytes = std::min<std::size_t>(o.max_bytes, 256 * 1024);
    o.step = 4;
    o.iters = std::min(o.iters, 5);
    o.warmup = std::min(o.warmup, 1);
  }
  if (o.min_bytes < sizeof(float) || o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "bench_collectives: need 4 <= --min-bytes (%zu) <= --max-bytes (%zu)\n",
                 o.min_bytes, o.max_bytes);
    return 2;
  }
  if (o.max_bytes / sizeof(float) > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    std::fprintf(stderr, "bench_collectives: --max-bytes %zu exceeds MPI's int count of fp32 "
                 "elements (8 GiB)\n", o.max_bytes);
    return 2;
  }
  return bench::run_or_abort("bench_collectives", [&] {
    try {
      return run(o);
    } catch (const std::bad_alloc&) {
      throw std::runtime_error(
          fmt::format("cannot allocate the buffers for --max-bytes {}", o.max_bytes));
    }
  });
}
