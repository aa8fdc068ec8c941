// Point-to-point tests over make_world_communicator() (MPI_COMM_WORLD under
// mpirun at world sizes 1-4, or the self backend): every ordered pair of
// ranks (a rank with itself included), sizes 0, 1, 7, 10001, every dtype,
// values checked element by element; blocking and non-blocking forms; the
// order of several messages between one pair ([Note: point-to-point order]);
// sends and receives posted in both directions at once; argument errors
// naming the rank and the peer. Every rank runs every case in the same
// order; a rank not in a pair skips it, so nothing waits on it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/self/self_communicator.h"
#include "comm_test_util.h"
#include "core/error.h"
#include "tests/support/thrown.h"

namespace zeroshard {
namespace {

using test::Bytes;
using testing::contains;
using testing::error_message;
using test::world;

const std::vector<std::size_t> kP2pCounts = {0, 1, 7, 10001};

// The message from src to dst: element i is test::value of a key of the
// pair, so a message delivered to the wrong rank or in the wrong order
// shows up as wrong elements.
Bytes message(DType t, int src, int dst, std::size_t count, int salt = 0) {
  Bytes b = test::make_bytes(t, count);
  for (std::size_t i = 0; i < count; ++i) {
    test::put(t, b.data(), i, test::value(src * 5 + dst, i, salt));
  }
  return b;
}

TEST_CASE("p2p: blocking send/recv between every ordered pair, every size and dtype") {
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  for (DType t : test::kDTypes) {
    for (std::size_t count : kP2pCounts) {
      for (int src = 0; src < n; ++src) {
        for (int dst = 0; dst < n; ++dst) {
          if (src == dst) continue;  // a blocking send to self would wait for its own receive
          INFO(test::label(c, t, count), " pair ", src, " -> ", dst);
          if (me == src) {
            const Bytes out = message(t, src, dst, count);
            c.send(out.data(), count, t, dst);
          } else if (me == dst) {
            Bytes in = test::make_bytes(t, count, 0x5a);
            c.recv(in.data(), count, t, src);
            const Bytes want = message(t, src, dst, count);
            CHECK(test::diff(t, in.data(), want.data(), count) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("p2p: every rank sends to and receives from every rank at once (self included)") {
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  for (DType t : test::kDTypes) {
    for (std::size_t count : kP2pCounts) {
      INFO(test::label(c, t, count));
      std::vector<Bytes> out, in;
      std::vector<CommWork> work;
      // Receives first on even ranks, sends first on odd ones: posting order
      // does not matter for non-blocking point-to-point (MPI, self).
      for (int peer = 0; peer < n; ++peer) {
        out.push_back(message(t, me, peer, count, 1));
        in.push_back(test::make_bytes(t, count, 0x5a));
      }
      for (int pass = 0; pass < 2; ++pass) {
        const bool sends = (pass == 0) == (me % 2 == 1);
        for (int peer = 0; peer < n; ++peer) {
          const auto p = static_cast<std::size_t>(peer);
          work.push_back(sends ? c.isend(out[p].data(), count, t, peer)
                               : c.irecv(in[p].data(), count, t, peer));
        }
      }
      for (CommWork& w : work) w.wait();
      for (int peer = 0; peer < n; ++peer) {
        const Bytes want = message(t, peer, me, count, 1);
        INFO("from ", peer);
        CHECK(test::diff(t, in[static_cast<std::size_t>(peer)].data(), want.data(), count) == "");
      }
    }
  }
}

TEST_CASE("p2p: neighbours exchange large messages both ways at once without deadlock") {
  // A ring: each rank isends to the next and irecvs from the previous and
  // from the next (who also send to it), all before waiting. 1 Mi floats is
  // far above Open MPI's eager limit, so the sends need their receives.
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const std::size_t count = std::size_t{1} << 20;
  const DType t = DType::f32;
  const Bytes to_next = message(t, me, next, count, 2);
  const Bytes to_prev = message(t, me, prev, count, 3);
  Bytes from_prev = test::make_bytes(t, count), from_next = test::make_bytes(t, count);
  std::vector<CommWork> work;
  work.push_back(c.isend(to_next.data(), count, t, next));
  work.push_back(c.isend(to_prev.data(), count, t, prev));
  work.push_back(c.irecv(from_prev.data(), count, t, prev));
  work.push_back(c.irecv(from_next.data(), count, t, next));
  for (CommWork& w : work) w.wait();
  CHECK(test::diff(t, from_prev.data(), message(t, prev, me, count, 2).data(), count) == "");
  CHECK(test::diff(t, from_next.data(), message(t, next, me, count, 3).data(), count) == "");
}

TEST_CASE("p2p: messages between one pair arrive in the order they were sent") {
  // Rank r sends five messages of different sizes to r + 1 (mod n) before
  // that rank posts any receive; the k-th receive gets the k-th message.
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const std::vector<std::size_t> sizes = {7, 10001, 0, 1, 57};
  for (DType t : test::kDTypes) {
    INFO(test::label(c, t, 0));
    std::vector<Bytes> out;
    std::vector<CommWork> sends;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      out.push_back(message(t, me, next, sizes[k], static_cast<int>(k)));
      sends.push_back(c.isend(out.back().data(), sizes[k], t, next));
    }
    std::vector<Bytes> in;
    std::vector<CommWork> recvs;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      in.push_back(test::make_bytes(t, sizes[k], 0x5a));
      recvs.push_back(c.irecv(in.back().data(), sizes[k], t, prev));
    }
    for (CommWork& w : recvs) w.wait();
    for (CommWork& w : sends) w.wait();
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const Bytes want = message(t, prev, me, sizes[k], static_cast<int>(k));
      CHECK(test::diff(t, in[k].data(), want.data(), sizes[k]) == "");
    }
  }
}

TEST_CASE("p2p: test() polls a receive to completion") {
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const std::size_t count = 10001;
  Bytes in = test::make_bytes(DType::f64, count);
  CommWork r = c.irecv(in.data(), count, DType::f64, prev);
  const Bytes out = message(DType::f64, me, next, count);
  CommWork s = c.isend(out.data(), count, DType::f64, next);
  test::poll_until_done(r);
  CHECK_FALSE(r.pending());
  s.wait();
  CHECK(test::diff(DType::f64, in.data(), message(DType::f64, prev, me, count).data(), count) == "");
}

TEST_CASE("p2p: a bad peer or a negative count is a CommError naming the rank and the peer") {
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  float x = 0;
  for (int peer : {-1, n, n + 3}) {
    std::string what;
    what = error_message<CommError>([&] { c.isend(&x, 1, DType::f32, peer); });
    CHECK(contains(what, "send on rank " + std::to_string(me)));
    CHECK(contains(what, "peer " + std::to_string(peer)));
    CHECK(contains(what, "world size " + std::to_string(n)));
    what.clear();
    what = error_message<CommError>([&] { c.recv(&x, 1, DType::f32, peer); });
    CHECK(contains(what, "recv on rank " + std::to_string(me)));
    CHECK(contains(what, "peer " + std::to_string(peer)));
  }
  const int negative = -3;
  std::string what;
  what = error_message<CommError>([&] { c.isend(&x, static_cast<std::size_t>(negative), DType::f32, (me + 1) % n); });
  CHECK(contains(what, "rank " + std::to_string(me)));
  CHECK(contains(what, "peer " + std::to_string((me + 1) % n)));
  CHECK(contains(what, "-3"));
  CHECK_THROWS_AS(c.isend(nullptr, 3, DType::f32, me), InvariantError);
  // Nothing was posted: the communicator still works.
  double one = 1.0;
  c.all_reduce(&one, 1, DType::f64, ReduceOp::sum);
  CHECK(one == n);
}

TEST_CASE("p2p: a receive of another count than the message is a CommError on the receiver") {
  Communicator& c = world();
  const int n = c.world_size(), me = c.rank();
  if (n < 2 || c.backend() != "mpi") return;
  // Rank 0 sends 7 elements to rank 1, which expects 8: MPI delivers 7 and
  // the receive's check names both counts; the sender completes normally.
  float out[7] = {1, 2, 3, 4, 5, 6, 7};
  if (me == 0) {
    c.send(out, 7, DType::f32, 1);
  } else if (me == 1) {
    float in[8] = {};
    std::string what;
    what = error_message<CommError>([&] { c.recv(in, 8, DType::f32, 0); });
    CHECK(contains(what, "recv on rank 1"));
    CHECK(contains(what, "from peer 0"));
    CHECK(contains(what, "expected 8 f32 elements, the message has 7"));
  }
  c.barrier();
}

TEST_CASE("self communicator: send to self is matched by a receive from self, in order") {
  SelfCommunicator s;
  for (DType t : test::kDTypes) {
    for (std::size_t count : kP2pCounts) {
      INFO(dtype_name(t), " count ", count);
      const Bytes a = message(t, 0, 0, count, 1), b = message(t, 0, 0, count, 2);
      // Sends first: they wait in the queue.
      CommWork sa = s.isend(a.data(), count, t, 0);
      CommWork sb = s.isend(b.data(), count, t, 0);
      CHECK(sa.pending());
      Bytes ra = test::make_bytes(t, count, 0x5a), rb = test::make_bytes(t, count, 0x5a);
      CommWork wa = s.irecv(ra.data(), count, t, 0);
      CHECK_FALSE(wa.pending());
      CHECK(sa.test());
      CHECK(sb.pending());
      s.recv(rb.data(), count, t, 0);
      CHECK(sb.test());
      CHECK(test::diff(t, ra.data(), a.data(), count) == "");
      CHECK(test::diff(t, rb.data(), b.data(), count) == "");
      // Receive first: the send fills it.
      Bytes rc = test::make_bytes(t, count, 0x5a);
      CommWork wc = s.irecv(rc.data(), count, t, 0);
      s.send(a.data(), count, t, 0);
      wc.wait();
      CHECK(test::diff(t, rc.data(), a.data(), count) == "");
    }
  }
}

TEST_CASE("self communicator: another peer, an unmatched wait and a count mismatch are CommErrors") {
  SelfCommunicator s;
  float x[4] = {1, 2, 3, 4};
  for (int peer : {1, -1, 5}) {
    std::string what;
    what = error_message<CommError>([&] { s.isend(x, 4, DType::f32, peer); });
    CHECK(contains(what, "send on rank 0 of the self communicator: peer " + std::to_string(peer)));
    CHECK(contains(what, "world size 1"));
    CHECK_THROWS_AS(s.irecv(x, 4, DType::f32, peer), CommError);
  }
  {
    CommWork w = s.isend(x, 4, DType::f32, 0);
    std::string what;
    what = error_message<CommError>([&] { w.wait(); });
    CHECK(contains(what, "send to self"));
    CHECK(contains(what, "no matching receive"));
  }
  // The failed wait withdrew the send: a receive now has nothing to take.
  CHECK_THROWS_AS(s.recv(x, 4, DType::f32, 0), CommError);
  {
    CommWork w = s.isend(x, 4, DType::f32, 0);
    float y[3];
    std::string what;
    what = error_message<CommError>([&] { s.irecv(y, 3, DType::f32, 0); });
    CHECK(contains(what, "the send has 4 f32 elements"));
    CHECK(contains(what, "expects 3 f32 elements"));
    CHECK(w.pending());  // still queued; destroying the handle withdraws it
  }
  float z[4] = {};
  CommWork r = s.irecv(z, 4, DType::f32, 0);
  CHECK(r.pending());  // the withdrawn send did not match it
}

}  // namespace
}  // namespace zeroshard
