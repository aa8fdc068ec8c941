// Communicator tests over make_world_communicator(): MPI_COMM_WORLD under
// mpirun (world sizes 1-4) or without it (singleton), or the self backend in
// builds without MPI. Every rank runs every case in the same order, so the
// collectives pair up; checks count wrong elements instead of aborting, so a
// failure on one rank never leaves the others waiting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace zeroshard {
namespace {

using test::Bytes;
using test::world;

// Expected reduction of test::value over every rank, folded in rank order.
Bytes expected_reduction(DType t, ReduceOp op, int world_size, std::size_t count,
                         std::size_t offset, int salt) {
  Bytes acc = test::make_bytes(t, count);
  Bytes mine = test::make_bytes(t, count);
  for (std::size_t i = 0; i < count; ++i)
    test::put(t, acc.data(), i, test::value(0, offset + i, salt));
  for (int r = 1; r < world_size; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      test::put(t, mine.data(), i, test::value(r, offset + i, salt));
      test::combine_into(t, op, mine.data(), acc.data(), i);
    }
  }
  return acc;
}

TEST_CASE("world communicator: rank and size") {
  Communicator& c = world();
  CHECK(c.world_size() >= 1);
  CHECK(c.rank() >= 0);
  CHECK(c.rank() < c.world_size());
  CHECK((c.backend() == "mpi" || c.backend() == "self"));
  // Every rank agrees on the size and the ranks are 0..N-1.
  double buf[2] = {static_cast<double>(c.world_size()), static_cast<double>(c.rank())};
  c.all_reduce(buf, 2, DType::f64, ReduceOp::sum);
  const int n = c.world_size();
  CHECK(buf[0] == static_cast<double>(n) * n);
  CHECK(buf[1] == static_cast<double>(n) * (n - 1) / 2);
}

TEST_CASE("all_reduce sum/max/min is exact for every dtype and count") {
  Communicator& c = world();
  for (DType t : test::kDTypes) {
    for (ReduceOp op : test::kOps) {
      for (std::size_t count : test::kCounts) {
        const int salt = static_cast<int>(op);
        Bytes buf = test::make_bytes(t, count);
        for (std::size_t i = 0; i < count; ++i)
          test::put(t, buf.data(), i, test::value(c.rank(), i, salt));
        c.all_reduce(buf.data(), count, t, op);
        const Bytes want = expected_reduction(t, op, c.world_size(), count, 0, salt);
        INFO(test::label(c, t, count), " ", test::op_name(op));
        CHECK(test::diff(t, buf.data(), want.data(), count) == "");
      }
    }
  }
}

// Ranks 0 and 1 contribute values whose fp32 sum is not representable in the
// 16-bit type, every other rank contributes +0: whatever order MPI combines
// in, the result is round16(float(a0) + float(a1)), the per-pair definition.
TEST_CASE("all_reduce bf16/f16 sum rounds each pair through fp32") {
  Communicator& c = world();
  for (DType t : {DType::bf16, DType::f16}) {
    const std::size_t count = 4096 + 3;
    Bytes a0 = test::make_bytes(t, count);
    Bytes a1 = test::make_bytes(t, count);
    for (std::size_t i = 0; i < count; ++i) {
      // a0: 1 + k/128 (exact in both types); a1: small values with 1-10 bits
      // below a0's last place, so the sum rounds (including ties).
      test::put(t, a0.data(), i, 1.0 + static_cast<double>(i % 128) / 128.0);
      const double small =
          static_cast<double>(1 + (i * 37) % 255) * std::ldexp(1.0, -9 - static_cast<int>(i % 6));
      test::put(t, a1.data(), i, small);
    }
    // Specials: overflow to Inf (f16 max 65504 twice; bf16 near its max), a NaN operand.
    const double big = t == DType::f16 ? 65504.0 : 3.0e38;
    test::put(t, a0.data(), 0, big);
    test::put(t, a1.data(), 0, big);
    test::put(t, a0.data(), 1, std::numeric_limits<double>::quiet_NaN());
    Bytes want = a1;
    for (std::size_t i = 0; i < count; ++i)
      test::combine_into(t, ReduceOp::sum, a0.data(), want.data(), i);
    std::size_t rounded = 0;
    for (std::size_t i = 2; i < count; ++i) {
      rounded +=
          test::get(t, want.data(), i) != test::get(t, a0.data(), i) + test::get(t, a1.data(), i);
    }
    CHECK(rounded > count / 4);  // the case really exercises rounding
    CHECK(std::isinf(test::get(t, want.data(), 0)));
    CHECK(std::isnan(test::get(t, want.data(), 1)));

    Bytes buf = c.rank() == 0 ? a0 : c.rank() == 1 ? a1 : test::make_bytes(t, count);
    c.all_reduce(buf.data(), count, t, ReduceOp::sum);
    INFO(test::label(c, t, count));
    CHECK(test::diff(t, buf.data(), (c.world_size() == 1 ? a0 : want).data(), count) == "");
  }
}

TEST_CASE("reduce_scatter gives each rank its block of the reduction") {
  Communicator& c = world();
  const std::size_t n = static_cast<std::size_t>(c.world_size());
  for (DType t : test::kDTypes) {
    for (ReduceOp op : test::kOps) {
      for (std::size_t count : test::kCounts) {
        const int salt = 3 + static_cast<int>(op);
        Bytes send = test::make_bytes(t, count * n);
        for (std::size_t i = 0; i < count * n; ++i)
          test::put(t, send.data(), i, test::value(c.rank(), i, salt));
        Bytes recv = test::make_bytes(t, count, 0xcd);
        c.reduce_scatter(send.data(), recv.data(), count, t, op);
        const Bytes want = expected_reduction(t, op, c.world_size(), count,
                                              static_cast<std::size_t>(c.rank()) * count, salt);
        INFO(test::label(c, t, count), " ", test::op_name(op));
        CHECK(test::diff(t, recv.data(), want.data(), count) == "");
      }
    }
  }
}

TEST_CASE("all_gather, out of place and in place") {
  Communicator& c = world();
  const std::size_t n = static_cast<std::size_t>(c.world_size());
  const std::size_t me = static_cast<std::size_t>(c.rank());
  for (DType t : test::kDTypes) {
    for (std::size_t count : test::kCounts) {
      Bytes want = test::make_bytes(t, count * n);
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < count; ++i)
          test::put(t, want.data(), r * count + i, test::value(static_cast<int>(r), i, 9));
      }
      INFO(test::label(c, t, count));
      Bytes send = test::make_bytes(t, count);
      for (std::size_t i = 0; i < count; ++i)
        test::put(t, send.data(), i, test::value(c.rank(), i, 9));
      Bytes recv = test::make_bytes(t, count * n, 0xee);
      c.all_gather(send.data(), recv.data(), count, t);
      CHECK(test::diff(t, recv.data(), want.data(), count * n) == "");

      Bytes inplace = test::make_bytes(t, count * n, 0xee);
      const std::size_t own = me * count * dtype_size(t);
      std::copy(send.begin(), send.end(), inplace.begin() + static_cast<std::ptrdiff_t>(own));
      c.all_gather(inplace.data() + own, inplace.data(), count, t);
      CHECK(test::diff(t, inplace.data(), want.data(), count * n) == "");
    }
  }
}

TEST_CASE("broadcast from every root") {
  Communicator& c = world();
  for (DType t : test::kDTypes) {
    for (std::size_t count : test::kCounts) {
      for (int root = 0; root < c.world_size(); ++root) {
        Bytes want = test::make_bytes(t, count);
        for (std::size_t i = 0; i < count; ++i)
          test::put(t, want.data(), i, test::value(root, i, 11));
        Bytes buf = c.rank() == root ? want : test::make_bytes(t, count, 0x5a);
        c.broadcast(buf.data(), count, t, root);
        INFO(test::label(c, t, count), " root ", root);
        CHECK(test::diff(t, buf.data(), want.data(), count) == "");
      }
    }
  }
}

TEST_CASE("barrier") {
  Communicator& c = world();
  for (int i = 0; i < 3; ++i) c.barrier();
  CommWork w = c.ibarrier();
  w.wait();
  CHECK_FALSE(w.pending());
}

TEST_CASE("non-blocking collectives: several outstanding, waited in reverse order, test()") {
  Communicator& c = world();
  const int n = c.world_size();
  const std::size_t un = static_cast<std::size_t>(n);

  Bytes a = test::make_bytes(DType::f32, 57);
  for (std::size_t i = 0; i < 57; ++i)
    test::put(DType::f32, a.data(), i, test::value(c.rank(), i, 1));
  Bytes b = test::make_bytes(DType::bf16, 10001);
  for (std::size_t i = 0; i < 10001; ++i)
    test::put(DType::bf16, b.data(), i, test::value(c.rank(), i, 2));
  Bytes rs_send = test::make_bytes(DType::f64, 7 * un);
  for (std::size_t i = 0; i < 7 * un; ++i)
    test::put(DType::f64, rs_send.data(), i, test::value(c.rank(), i, 3));
  Bytes rs_recv = test::make_bytes(DType::f64, 7);
  Bytes ag = test::make_bytes(DType::f16, 57 * un, 0x11);
  for (std::size_t i = 0; i < 57; ++i) {
    test::put(DType::f16, ag.data(), static_cast<std::size_t>(c.rank()) * 57 + i,
              test::value(c.rank(), i, 4));
  }
  Bytes bc = test::make_bytes(DType::f32, 1001, 0x22);
  const int root = n - 1;
  if (c.rank() == root) {
    for (std::size_t i = 0; i < 1001; ++i)
      test::put(DType::f32, bc.data(), i, test::value(root, i, 5));
  }

  CommWork w1 = c.iall_reduce(a.data(), 57, DType::f32, ReduceOp::sum);
  CommWork w2 = c.iall_reduce(b.data(), 10001, DType::bf16, ReduceOp::max);
  CommWork w3 = c.ireduce_scatter(rs_send.data(), rs_recv.data(), 7, DType::f64, ReduceOp::min);
  CommWork w4 = c.iall_gather(ag.data() + static_cast<std::size_t>(c.rank()) * 57 * 2, ag.data(),
                              57, DType::f16);
  CommWork w5 = c.ibroadcast(bc.data(), 1001, DType::f32, root);
  CommWork w6 = c.ibarrier();

  // test() drives progress; it must eventually report completion.
  test::poll_until_done(w1);
  CHECK_FALSE(w1.pending());
  CHECK(w1.test());  // an empty handle stays complete

  w6.wait();
  w5.wait();
  w4.wait();
  w3.wait();
  w2.wait();
  for (CommWork* w : {&w2, &w3, &w4, &w5, &w6}) CHECK_FALSE(w->pending());

  CHECK(test::diff(DType::f32, a.data(),
                   expected_reduction(DType::f32, ReduceOp::sum, n, 57, 0, 1).data(), 57) == "");
  CHECK(test::diff(DType::bf16, b.data(),
                   expected_reduction(DType::bf16, ReduceOp::max, n, 10001, 0, 2).data(),
                   10001) == "");
  CHECK(test::diff(DType::f64, rs_recv.data(),
                   expected_reduction(DType::f64, ReduceOp::min, n, 7,
                                      static_cast<std::size_t>(c.rank()) * 7, 3)
                       .data(),
                   7) == "");
  Bytes ag_want = test::make_bytes(DType::f16, 57 * un);
  for (std::size_t r = 0; r < un; ++r) {
    for (std::size_t i = 0; i < 57; ++i)
      test::put(DType::f16, ag_want.data(), r * 57 + i, test::value(static_cast<int>(r), i, 4));
  }
  CHECK(test::diff(DType::f16, ag.data(), ag_want.data(), 57 * un) == "");
  Bytes bc_want = test::make_bytes(DType::f32, 1001);
  for (std::size_t i = 0; i < 1001; ++i)
    test::put(DType::f32, bc_want.data(), i, test::value(root, i, 5));
  CHECK(test::diff(DType::f32, bc.data(), bc_want.data(), 1001) == "");
}

TEST_CASE("CommWork destruction and move-assignment wait for the collective") {
  Communicator& c = world();
  const int n = c.world_size();
  Bytes x = test::make_bytes(DType::f64, 10001);
  Bytes y = test::make_bytes(DType::f64, 57);
  for (std::size_t i = 0; i < 10001; ++i)
    test::put(DType::f64, x.data(), i, test::value(c.rank(), i, 6));
  for (std::size_t i = 0; i < 57; ++i)
    test::put(DType::f64, y.data(), i, test::value(c.rank(), i, 7));
  {
    CommWork w = c.iall_reduce(x.data(), 10001, DType::f64, ReduceOp::sum);
  }  // destroyed while possibly pending: must have waited
  CHECK(test::diff(DType::f64, x.data(),
                   expected_reduction(DType::f64, ReduceOp::sum, n, 10001, 0, 6).data(),
                   10001) == "");

  CommWork w = c.iall_reduce(y.data(), 57, DType::f64, ReduceOp::max);
  w = c.ibarrier();  // waits for the all-reduce before taking the barrier
  CHECK(test::diff(DType::f64, y.data(),
                   expected_reduction(DType::f64, ReduceOp::max, n, 57, 0, 7).data(), 57) == "");
  w.wait();
  CommWork empty;
  CHECK_FALSE(empty.pending());
  CHECK(empty.test());
  empty.wait();
}

TEST_CASE("split into even and odd ranks, then collectives on the sub-communicator") {
  Communicator& c = world();
  const int n = c.world_size();
  const int color = c.rank() % 2;
  const int members = (n - color + 1) / 2;  // ranks of my parity

  std::unique_ptr<Communicator> sub = c.split(color, c.rank());
  REQUIRE(sub != nullptr);
  CHECK(sub->backend() == c.backend());
  CHECK(sub->world_size() == members);
  CHECK(sub->rank() == c.rank() / 2);
  double sum = c.rank();
  sub->all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  double want = 0;
  for (int r = color; r < n; r += 2) want += r;
  CHECK(sum == want);

  // key = -rank reverses the order; root 0 of the sub-communicator is then
  // the highest world rank of my parity.
  std::unique_ptr<Communicator> rev = c.split(color, -c.rank());
  CHECK(rev->world_size() == members);
  CHECK(rev->rank() == members - 1 - c.rank() / 2);
  float top = rev->rank() == 0 ? static_cast<float>(c.rank()) : -1.0f;
  rev->broadcast(&top, 1, DType::f32, 0);
  CHECK(top == static_cast<float>(color + 2 * (members - 1)));

  // A split of a split, and a split of everyone into one group.
  std::unique_ptr<Communicator> again = sub->split(0, 0);
  CHECK(again->world_size() == members);
  again->barrier();
  std::unique_ptr<Communicator> all = c.split(7, 0);
  CHECK(all->world_size() == n);
  CHECK(all->rank() == c.rank());
  std::uint16_t h = float_to_bf16(static_cast<float>(c.rank()));
  all->all_reduce(&h, 1, DType::bf16, ReduceOp::max);
  CHECK(bf16_to_float(h) == static_cast<float>(n - 1));
}

TEST_CASE("broadcast root out of range throws CommError naming root and world size") {
  Communicator& c = world();
  const int n = c.world_size();
  float x = 1.0f;
  for (int root : {n, -1, n + 5}) {
    std::string message;
    try {
      c.broadcast(&x, 1, DType::f32, root);
    } catch (const CommError& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find(fmt::format("root {}", root)) != std::string::npos);
    CHECK(message.find(fmt::format("world size {}", n)) != std::string::npos);
  }
  CHECK_THROWS_AS(c.ibroadcast(&x, 1, DType::f32, n), CommError);
  CHECK_THROWS_AS(c.split(-1, 0), CommError);
  // The communicator still works after the rejected calls.
  c.barrier();
  float one = 1.0f;
  c.all_reduce(&one, 1, DType::f32, ReduceOp::sum);
  CHECK(one == static_cast<float>(n));
}

}  // namespace
}  // namespace zeroshard
