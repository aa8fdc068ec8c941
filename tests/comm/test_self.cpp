// SelfCommunicator used directly: world size 1 semantics, without MPI. Runs
// the same on every rank of an mpirun job (no communication happens).
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "comm/self/self_communicator.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace zeroshard {
namespace {

using test::Bytes;

TEST_CASE("self communicator: identity") {
  SelfCommunicator s;
  CHECK(s.rank() == 0);
  CHECK(s.world_size() == 1);
  CHECK(s.backend() == "self");
}

TEST_CASE("self communicator: all_reduce leaves the buffer unchanged") {
  SelfCommunicator s;
  for (DType t : test::kDTypes) {
    for (ReduceOp op : test::kOps) {
      for (std::size_t count : test::kCounts) {
        Bytes buf = test::make_bytes(t, count);
        for (std::size_t i = 0; i < count; ++i) test::put(t, buf.data(), i, test::value(3, i));
        const Bytes before = buf;
        CommWork w = s.iall_reduce(buf.data(), count, t, op);
        CHECK_FALSE(w.pending());  // complete on return
        CHECK(test::diff(t, buf.data(), before.data(), count) == "");
      }
    }
  }
}

TEST_CASE("self communicator: reduce_scatter and all_gather copy") {
  SelfCommunicator s;
  for (DType t : test::kDTypes) {
    for (std::size_t count : test::kCounts) {
      INFO(dtype_name(t), " count ", count);
      Bytes send = test::make_bytes(t, count);
      for (std::size_t i = 0; i < count; ++i) test::put(t, send.data(), i, test::value(1, i));
      Bytes recv = test::make_bytes(t, count, 0x77);
      CommWork w = s.ireduce_scatter(send.data(), recv.data(), count, t, ReduceOp::sum);
      CHECK_FALSE(w.pending());
      CHECK(test::diff(t, recv.data(), send.data(), count) == "");

      Bytes gathered = test::make_bytes(t, count, 0x77);
      s.all_gather(send.data(), gathered.data(), count, t);
      CHECK(test::diff(t, gathered.data(), send.data(), count) == "");
      // In place: send aliases recv + rank * count = recv.
      s.all_gather(gathered.data(), gathered.data(), count, t);
      CHECK(test::diff(t, gathered.data(), send.data(), count) == "");
    }
  }
}

TEST_CASE("self communicator: overlapping copies behave as memmove") {
  SelfCommunicator s;
  float buf[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  s.reduce_scatter(buf, buf + 2, 5, DType::f32, ReduceOp::sum);  // forward overlap
  const float want1[8] = {0, 1, 0, 1, 2, 3, 4, 7};
  CHECK(std::memcmp(buf, want1, sizeof buf) == 0);
  s.all_gather(buf + 3, buf + 1, 5, DType::f32);  // backward overlap
  const float want2[8] = {0, 1, 2, 3, 4, 7, 4, 7};
  CHECK(std::memcmp(buf, want2, sizeof buf) == 0);
}

TEST_CASE("self communicator: broadcast, barrier, split") {
  SelfCommunicator s;
  double x = 2.5;
  s.broadcast(&x, 1, DType::f64, 0);
  CHECK(x == 2.5);
  s.broadcast(nullptr, 0, DType::f64, 0);
  CommWork b = s.ibarrier();
  CHECK_FALSE(b.pending());
  CHECK(b.test());
  s.barrier();
  std::unique_ptr<Communicator> sub = s.split(3, 9);
  REQUIRE(sub != nullptr);
  CHECK(sub->backend() == "self");
  CHECK(sub->world_size() == 1);
  CHECK(sub->rank() == 0);
}

TEST_CASE("self communicator: errors") {
  SelfCommunicator s;
  float x = 0;
  std::string message;
  try {
    s.broadcast(&x, 1, DType::f32, 1);
  } catch (const CommError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("root 1") != std::string::npos);
  CHECK(message.find("world size 1") != std::string::npos);
  CHECK_THROWS_AS(s.ibroadcast(&x, 1, DType::f32, -1), CommError);
  CHECK_THROWS_AS(s.split(-2, 0), CommError);
  CHECK_THROWS_AS(s.all_reduce(nullptr, 3, DType::f32, ReduceOp::sum), InvariantError);
  CHECK_THROWS_AS(s.all_gather(&x, nullptr, 1, DType::f32), InvariantError);
}

}  // namespace
}  // namespace zeroshard
