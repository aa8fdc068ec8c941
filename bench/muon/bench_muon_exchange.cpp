// bench_muon_exchange: the ways to bring a Muon matrix's gradient to its
// owner rank, measured side by side in one run (bench/muon/README.md):
//   gather: what MuonStep does ([Note: Muon on shards]): the unit's
//     gradient is reduce-scattered as at any ZeRO stage (MPI_Reduce_scatter_
//     block over the unit's flat buffer), the momentum is updated on each
//     shard, each matrix's parts go to its owner (point-to-point), and the
//     update comes back the same way;
//   reduce, momentum sharded: each matrix's gradient is reduced straight to
//     its owner (MPI_Reduce, root = owner); the momentum, kept in the
//     sharded optimizer state as ZeRO keeps it, goes to the owner and back
//     with the update;
//   reduce, momentum on the owner: the reduce, and the update back; the
//     owner holds the whole matrix's momentum (state not sharded 1/N).
// The matrices are the GPT example's (--layers, --dim: c_attn 3D x D,
// c_proj D x D, c_fc 4D x D, mlp c_proj D x 4D per layer, one unit per
// layer), owners by assign_muon_owners. Each iteration runs all three after
// an MPI_Barrier, their order rotating; a time is the maximum over ranks,
// the row the median over --iters. Bytes are those this rank sends, the
// reduce's as Rabenseifner's reduce-scatter + gather moves them ((N - 1) /
// N of each matrix), the MPI library's choice aside. Inputs are small
// integers: every owner's matrix is checked against the exact sum (#wrong).
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/mpi_main.h"
#include "optimizer/muon_owners.h"

namespace {

using namespace zeroshard;

struct Matrix {
  std::size_t rows, cols, offset;  // offset in its unit's flat buffer
  int owner;
  std::size_t numel() const { return rows * cols; }
};

struct Unit {
  std::vector<Matrix> matrices;
  std::size_t numel = 0, shard = 0;
};

double now() { return MPI_Wtime(); }

double max_over_ranks(double t) {
  double out = 0;
  MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Input element i of unit u on `rank`: a small integer, so sums are exact.
float input(int rank, std::size_t u, std::size_t i) { return static_cast<float>((rank + 1) * ((i + u) % 7)); }

int run(int layers, int dim, int iters, int warmup) {
  mpi_init_once();
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const auto D = static_cast<std::size_t>(dim);
  std::vector<Unit> units(static_cast<std::size_t>(layers));
  std::vector<MuonMatrix> shapes;
  for (Unit& u : units) {
    for (auto [r, c] : {std::pair{3 * D, D}, {D, D}, {4 * D, D}, {D, 4 * D}}) {
      u.matrices.push_back(Matrix{r, c, u.numel, 0});
      u.numel += r * c;
      shapes.push_back({r, c});
    }
    u.shard = (u.numel + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
  }
  const std::vector<int> owners = assign_muon_owners(shapes, n);
  std::size_t k = 0;
  for (Unit& u : units) {
    for (Matrix& m : u.matrices) m.owner = owners[k++];
  }
  const auto N = static_cast<std::size_t>(n), me = static_cast<std::size_t>(rank);
  // Bytes this rank sends per step, both ways (gradient in, update out).
  double gather_bytes = 0, reduce_bytes = 0, sharded_bytes = 0;
  for (const Unit& u : units) {
    gather_bytes += 4.0 * static_cast<double>(u.shard * (N - 1));  // reduce-scatter
    for (const Matrix& m : u.matrices) {
      const std::size_t lo = std::clamp(m.offset, me * u.shard, (me + 1) * u.shard);
      const std::size_t hi = std::clamp(m.offset + m.numel(), me * u.shard, (me + 1) * u.shard);
      const double mine = 4.0 * static_cast<double>(hi - lo), all = 4.0 * static_cast<double>(m.numel());
      const double out = m.owner == rank ? all - mine : mine;  // the owner sends the others' parts back
      const double in = mine * (m.owner == rank ? 0 : 1);
      gather_bytes += in + out;
      reduce_bytes += all * static_cast<double>(N - 1) / static_cast<double>(N) + out;
      sharded_bytes += all * static_cast<double>(N - 1) / static_cast<double>(N) + in + 2 * out;
    }
  }
  std::vector<std::vector<float>> grads(units.size()), full(units.size()), shards(units.size());
  std::vector<std::vector<float>> momentum(units.size()), momentum_full(units.size());
  long wrong = 0;
  auto fill = [&] {
    for (std::size_t u = 0; u < units.size(); ++u) {
      grads[u].assign(units[u].shard * N, 0.0f);
      for (std::size_t i = 0; i < units[u].numel; ++i) grads[u][i] = input(rank, u, i);
      full[u].assign(units[u].numel, 0.0f);
      shards[u].assign(units[u].shard, 0.0f);
      momentum[u].assign(units[u].shard, 1.0f);
      momentum_full[u].assign(units[u].numel, 0.0f);
    }
  };
  // The owner's matrices equal the sum over ranks.
  auto check = [&] {
    const float sum_ranks = static_cast<float>(n * (n + 1) / 2);
    for (std::size_t u = 0; u < units.size(); ++u) {
      for (const Matrix& m : units[u].matrices) {
        if (m.owner != rank) continue;
        for (std::size_t i = 0; i < m.numel(); ++i) {
          if (full[u][m.offset + i] != sum_ranks * static_cast<float>((m.offset + i + u) % 7)) ++wrong;
        }
      }
    }
  };
  // Each matrix part between `rank` and the owner; to_owner: in, else out.
  // `whole` is the owner's matrix buffer (the unit's flat layout), `part`
  // this rank's shard window, or null: its parts are in `whole` too.
  auto exchange = [&](std::size_t u, bool to_owner, float* whole, float* part) {
    const Unit& unit = units[u];
    const bool parts_in_shard = part != nullptr;
    std::vector<MPI_Request> reqs;
    for (const Matrix& m : unit.matrices) {
      for (std::size_t r = 0; r < N; ++r) {
        const std::size_t lo = std::clamp(m.offset, r * unit.shard, (r + 1) * unit.shard);
        const std::size_t hi = std::clamp(m.offset + m.numel(), r * unit.shard, (r + 1) * unit.shard);
        if (lo >= hi || static_cast<int>(r) == m.owner) continue;
        const int count = static_cast<int>(hi - lo);
        MPI_Request q;
        if (m.owner == rank) {
          float* at = whole + lo;
          if (to_owner) {
            MPI_Irecv(at, count, MPI_FLOAT, static_cast<int>(r), 0, MPI_COMM_WORLD, &q);
          } else {
            MPI_Isend(at, count, MPI_FLOAT, static_cast<int>(r), 0, MPI_COMM_WORLD, &q);
          }
        } else if (r == me) {
          float* at = parts_in_shard ? part + (lo - me * unit.shard) : whole + lo;
          if (to_owner) {
            MPI_Isend(at, count, MPI_FLOAT, m.owner, 0, MPI_COMM_WORLD, &q);
          } else {
            MPI_Irecv(at, count, MPI_FLOAT, m.owner, 0, MPI_COMM_WORLD, &q);
          }
        } else {
          continue;
        }
        reqs.push_back(q);
      }
      if (m.owner == rank && to_owner && parts_in_shard) {  // its own part
        const std::size_t lo = std::clamp(m.offset, me * unit.shard, (me + 1) * unit.shard);
        const std::size_t hi = std::clamp(m.offset + m.numel(), me * unit.shard, (me + 1) * unit.shard);
        std::copy(part + (lo - me * unit.shard), part + (hi - me * unit.shard), whole + lo);
      }
    }
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  };
  auto gather_path = [&] {
    for (std::size_t u = 0; u < units.size(); ++u) {
      MPI_Reduce_scatter_block(grads[u].data(), shards[u].data(), static_cast<int>(units[u].shard), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      exchange(u, true, full[u].data(), shards[u].data());
      exchange(u, false, full[u].data(), shards[u].data());
    }
  };
  auto reduce_path = [&](bool momentum_sharded) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      for (const Matrix& m : units[u].matrices) {
        float* send = grads[u].data() + m.offset;
        float* recv = full[u].data() + m.offset;
        MPI_Reduce(m.owner == rank ? MPI_IN_PLACE : send, m.owner == rank ? recv : nullptr,
                   static_cast<int>(m.numel()), MPI_FLOAT, MPI_SUM, m.owner, MPI_COMM_WORLD);
      }
      if (momentum_sharded) exchange(u, true, momentum_full[u].data(), momentum[u].data());
      exchange(u, false, full[u].data(), nullptr);
      if (momentum_sharded) exchange(u, false, momentum_full[u].data(), momentum[u].data());
    }
  };
  std::vector<double> tg, tr, ts;
  for (int it = 0; it < warmup + iters; ++it) {
    for (int pass = 0; pass < 3; ++pass) {
      const int path = (pass + it) % 3;  // 0 gather, 1 reduce (momentum on the owner), 2 reduce (momentum sharded)
      const bool gather = path == 0;
      fill();
      if (!gather) {  // MPI_IN_PLACE: the owner's contribution starts in recv
        for (std::size_t u = 0; u < units.size(); ++u) {
          for (const Matrix& m : units[u].matrices) {
            if (m.owner == rank) std::copy(grads[u].begin() + static_cast<std::ptrdiff_t>(m.offset),
                                           grads[u].begin() + static_cast<std::ptrdiff_t>(m.offset + m.numel()),
                                           full[u].begin() + static_cast<std::ptrdiff_t>(m.offset));
          }
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      if (gather) {
        gather_path();
      } else {
        reduce_path(path == 2);
      }
      const double t = max_over_ranks(now() - t0);
      if (it == warmup) check();
      if (it >= warmup) (path == 0 ? tg : path == 1 ? tr : ts).push_back(t);
    }
  }
  long wrong_all = 0;
  MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  double gb = 0, rb = 0, sb = 0;
  MPI_Reduce(&gather_bytes, &gb, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&reduce_bytes, &rb, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&sharded_bytes, &sb, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    fmt::print("bench_muon_exchange: {} ranks, {}; GPT {} layers x dim {}: {} matrices\n", n,
               bench::mpi_library_name(), layers, dim, shapes.size());
    fmt::print("{:<52} {:>10} {:>14}\n", "path", "median ms", "MiB sent/rank");
    fmt::print("{:<52} {:>10.3f} {:>14.3f}\n", "gather: reduce-scatter + gather + scatter", median(tg) * 1e3,
               gb / (1 << 20));
    fmt::print("{:<52} {:>10.3f} {:>14.3f}\n", "reduce, momentum sharded: + momentum in and out", median(ts) * 1e3,
               sb / (1 << 20));
    fmt::print("{:<52} {:>10.3f} {:>14.3f}\n", "reduce, momentum on the owner: reduce + scatter", median(tr) * 1e3,
               rb / (1 << 20));
    fmt::print("momentum sharded (ZeRO's layout): gather / reduce time {:.3f}, bytes {:.3f}\n", median(tg) / median(ts),
               gb / sb);
    fmt::print("momentum on the owner: gather / reduce time {:.3f}, bytes {:.3f}; #wrong {}\n", median(tg) / median(tr),
               gb / rb, wrong_all);
  }
  return wrong_all == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 4, dim = 128, iters = 20, warmup = 3;
  CLI::App app{"bench_muon_exchange: gather to the owner after the reduce-scatter vs reduce straight to it (momentum sharded or on the owner)"};
  app.add_option("--layers", layers, "GPT layers (one unit each)")->check(CLI::PositiveNumber);
  app.add_option("--dim", dim, "GPT width")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed iterations")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed iterations")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  return zeroshard::bench::run_or_abort("bench_muon_exchange", [&] { return run(layers, dim, iters, warmup); });
}
