// Blocking collectives (all_reduce, reduce_scatter, all_gather, broadcast,
// barrier) against their non-blocking forms followed by wait(), over
// make_world_communicator() (MPI_COMM_WORLD under mpirun at world sizes 1-4,
// or the self backend). On MPI the blocking forms are MPI's blocking calls
// (MPI_Allreduce, ...) and the non-blocking ones MPI_I* (libnbc): different
// algorithms, which may combine the ranks' contributions in different
// orders. The inputs are therefore integers in [-15, 15]: every partial sum
// over up to 16 ranks is an integer of magnitude <= 240, exact in bf16 (8
// significant bits), f16 and f32, so any summation order gives the same
// bits, and the test can demand bitwise equality between the two forms and
// with the closed-form result. (For data whose sums round, the two forms
// may differ in the last bits; see comm/mpi/mpi_communicator.h.)
//
// As in test_comm.cpp, every rank runs every case in the same order and
// checks count wrong elements instead of aborting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm_test_util.h"

namespace zeroshard {
namespace {

using test::Bytes;
using test::world;

// Integer input of element i on rank r, in [-15, 15].
double int_value(int r, std::size_t i, int salt) {
  const std::size_t k = i * 7 + static_cast<std::size_t>(r) * 13 + static_cast<std::size_t>(salt) * 5;
  return static_cast<double>(static_cast<long>(k % 31) - 15);
}

// Closed form of the reduction of element i over ranks 0..n-1 (exact in
// double, and representable in every tested type: see the file comment).
double reduced_value(ReduceOp op, int n, std::size_t i, int salt) {
  double acc = int_value(0, i, salt);
  for (int r = 1; r < n; ++r) {
    const double v = int_value(r, i, salt);
    acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// count elements: element i holds int_value(r, first + i, salt).
Bytes inputs(DType t, int r, std::size_t first, std::size_t count, int salt) {
  Bytes b = test::make_bytes(t, count);
  for (std::size_t i = 0; i < count; ++i) test::put(t, b.data(), i, int_value(r, first + i, salt));
  return b;
}

// The types the blocking/non-blocking comparison covers: the 16-bit types
// use the user-defined MPI_Ops of comm/mpi/mpi_types.h.
const DType kTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};

TEST_CASE("blocking all_reduce equals iall_reduce + wait bit for bit (integer-valued data)") {
  Communicator& c = world();
  const int n = c.world_size();
  for (DType t : kTypes) {
    for (ReduceOp op : test::kOps) {
      for (std::size_t count : test::kCounts) {
        const int salt = static_cast<int>(op);
        Bytes blocking = inputs(t, c.rank(), 0, count, salt);
        Bytes nonblocking = blocking;
        c.all_reduce(blocking.data(), count, t, op);
        c.iall_reduce(nonblocking.data(), count, t, op).wait();
        Bytes want = test::make_bytes(t, count);
        for (std::size_t i = 0; i < count; ++i)
          test::put(t, want.data(), i, reduced_value(op, n, i, salt));
        INFO(test::label(c, t, count), " ", test::op_name(op));
        CHECK(test::diff(t, blocking.data(), nonblocking.data(), count) == "");
        CHECK(test::diff(t, blocking.data(), want.data(), count) == "");
      }
    }
  }
}

TEST_CASE("blocking reduce_scatter equals ireduce_scatter + wait bit for bit") {
  Communicator& c = world();
  const int n = c.world_size();
  const std::size_t me = static_cast<std::size_t>(c.rank());
  for (DType t : kTypes) {
    for (ReduceOp op : test::kOps) {
      for (std::size_t count : test::kCounts) {
        const int salt = 3 + static_cast<int>(op);
        const Bytes send = inputs(t, c.rank(), 0, count * static_cast<std::size_t>(n), salt);
        Bytes blocking = test::make_bytes(t, count, 0xcd);
        Bytes nonblocking = test::make_bytes(t, count, 0xab);
        c.reduce_scatter(send.data(), blocking.data(), count, t, op);
        c.ireduce_scatter(send.data(), nonblocking.data(), count, t, op).wait();
        Bytes want = test::make_bytes(t, count);
        for (std::size_t i = 0; i < count; ++i)
          test::put(t, want.data(), i, reduced_value(op, n, me * count + i, salt));
        INFO(test::label(c, t, count), " ", test::op_name(op));
        CHECK(test::diff(t, blocking.data(), nonblocking.data(), count) == "");
        CHECK(test::diff(t, blocking.data(), want.data(), count) == "");
      }
    }
  }
}

TEST_CASE("blocking all_gather equals iall_gather + wait, out of place and in place") {
  Communicator& c = world();
  const std::size_t n = static_cast<std::size_t>(c.world_size());
  const std::size_t me = static_cast<std::size_t>(c.rank());
  for (DType t : kTypes) {
    for (std::size_t count : test::kCounts) {
      Bytes want = test::make_bytes(t, count * n);
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < count; ++i)
          test::put(t, want.data(), r * count + i, int_value(static_cast<int>(r), i, 9));
      }
      const Bytes send = inputs(t, c.rank(), 0, count, 9);
      INFO(test::label(c, t, count));

      Bytes blocking = test::make_bytes(t, count * n, 0xee);
      Bytes nonblocking = test::make_bytes(t, count * n, 0x77);
      c.all_gather(send.data(), blocking.data(), count, t);
      c.iall_gather(send.data(), nonblocking.data(), count, t).wait();
      CHECK(test::diff(t, blocking.data(), nonblocking.data(), count * n) == "");
      CHECK(test::diff(t, blocking.data(), want.data(), count * n) == "");

      // In place: send is this rank's block of recv.
      const std::size_t own = me * count * dtype_size(t);
      Bytes blocking_ip = test::make_bytes(t, count * n, 0xee);
      std::copy(send.begin(), send.end(), blocking_ip.begin() + static_cast<std::ptrdiff_t>(own));
      Bytes nonblocking_ip = blocking_ip;
      c.all_gather(blocking_ip.data() + own, blocking_ip.data(), count, t);
      c.iall_gather(nonblocking_ip.data() + own, nonblocking_ip.data(), count, t).wait();
      CHECK(test::diff(t, blocking_ip.data(), nonblocking_ip.data(), count * n) == "");
      CHECK(test::diff(t, blocking_ip.data(), want.data(), count * n) == "");
    }
  }
}

TEST_CASE("blocking broadcast equals ibroadcast + wait from every root") {
  Communicator& c = world();
  for (DType t : kTypes) {
    for (std::size_t count : test::kCounts) {
      for (int root = 0; root < c.world_size(); ++root) {
        const Bytes want = inputs(t, root, 0, count, 11);
        Bytes blocking = c.rank() == root ? want : test::make_bytes(t, count, 0x5a);
        Bytes nonblocking = c.rank() == root ? want : test::make_bytes(t, count, 0xa5);
        c.broadcast(blocking.data(), count, t, root);
        c.ibroadcast(nonblocking.data(), count, t, root).wait();
        INFO(test::label(c, t, count), " root ", root);
        CHECK(test::diff(t, blocking.data(), nonblocking.data(), count) == "");
        CHECK(test::diff(t, blocking.data(), want.data(), count) == "");
      }
    }
  }
}

// Blocking collectives issued while non-blocking ones are outstanding (as a
// training loop does when it all-reduces a norm during a prefetch): MPI
// orders them by issue on every rank, and each completes with its own result.
TEST_CASE("blocking collectives while non-blocking ones are outstanding") {
  Communicator& c = world();
  const int n = c.world_size();
  const std::size_t un = static_cast<std::size_t>(n);
  const std::size_t count = 10001;
  Bytes pending = inputs(DType::f32, c.rank(), 0, count, 1);
  Bytes gathered = test::make_bytes(DType::bf16, 57 * un, 0x11);
  const Bytes block = inputs(DType::bf16, c.rank(), 0, 57, 2);
  Bytes now = inputs(DType::f16, c.rank(), 0, 57, 3);

  CommWork w1 = c.iall_reduce(pending.data(), count, DType::f32, ReduceOp::sum);
  CommWork w2 = c.iall_gather(block.data(), gathered.data(), 57, DType::bf16);
  c.all_reduce(now.data(), 57, DType::f16, ReduceOp::max);
  c.barrier();
  w2.wait();
  w1.wait();

  Bytes want_pending = test::make_bytes(DType::f32, count);
  for (std::size_t i = 0; i < count; ++i)
    test::put(DType::f32, want_pending.data(), i, reduced_value(ReduceOp::sum, n, i, 1));
  Bytes want_gathered = test::make_bytes(DType::bf16, 57 * un);
  Bytes want_now = test::make_bytes(DType::f16, 57);
  for (std::size_t i = 0; i < 57; ++i) {
    for (std::size_t r = 0; r < un; ++r)
      test::put(DType::bf16, want_gathered.data(), r * 57 + i, int_value(static_cast<int>(r), i, 2));
    test::put(DType::f16, want_now.data(), i, reduced_value(ReduceOp::max, n, i, 3));
  }
  CHECK(test::diff(DType::f32, pending.data(), want_pending.data(), count) == "");
  CHECK(test::diff(DType::bf16, gathered.data(), want_gathered.data(), 57 * un) == "");
  CHECK(test::diff(DType::f16, now.data(), want_now.data(), 57) == "");
}

}  // namespace
}  // namespace zeroshard
