// MPI-specific communicator tests (built only when MPI is found): thread
// level, repeated make_world_communicator(), the error helper, INT_MAX
// counts, buffer overlap checks, and the 16-bit MPI_Ops applied directly.
#include <doctest/doctest.h>
#include <mpi.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_types.h"
#include "comm_test_util.h"
#include "core/error.h"
#include "tests/support/thrown.h"

namespace zeroshard {
namespace {

using test::Bytes;

// The message of the CommError that fn throws ("" if none).
std::string message_of(auto&& fn) { return testing::error_message<CommError>(fn); }

TEST_CASE("mpi: world communicator, repeated creation, thread level") {
  std::unique_ptr<Communicator> a = make_world_communicator();
  std::unique_ptr<Communicator> b = make_world_communicator();  // MPI initialised once
  CHECK(a->backend() == "mpi");
  CHECK(b->rank() == a->rank());
  CHECK(b->world_size() == a->world_size());
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  CHECK(a->world_size() == world_size);
  float f = 1.0f;
  b->all_reduce(&f, 1, DType::f32, ReduceOp::sum);
  CHECK(f == static_cast<float>(world_size));

  int queried = -1;
  MPI_Query_thread(&queried);
  CHECK(mpi_thread_level() == queried);
  CHECK(mpi_init_once() == queried);
  CHECK(mpi_thread_level_name(queried) != "unknown");
  CHECK(mpi_thread_level_name(MPI_THREAD_MULTIPLE) == "MPI_THREAD_MULTIPLE");
  CHECK_FALSE(mpi_finalized());
  auto* mpi = dynamic_cast<MpiCommunicator*>(a.get());
  REQUIRE(mpi != nullptr);
  CHECK(mpi->native() == MPI_COMM_WORLD);
}

TEST_CASE("mpi: failing MPI calls become CommError naming call, MPI message and rank") {
  std::unique_ptr<Communicator> w = make_world_communicator();
  int r = 0;
  const std::string m =
      message_of([&] { ZS_MPI_CALL(w->rank(), MPI_Comm_rank, MPI_COMM_NULL, &r); });
  INFO(m);
  CHECK(m.find("MPI_Comm_rank") != std::string::npos);
  CHECK(m.find("MPI_ERR_COMM") != std::string::npos);
  CHECK(m.find(fmt::format("rank {}", w->rank())) != std::string::npos);

  const std::string t = message_of([] { mpi_check(MPI_ERR_TRUNCATE, "MPI_Fake", -1); });
  INFO(t);
  CHECK(t.find("MPI_Fake") != std::string::npos);
  CHECK(t.find("MPI_ERR_TRUNCATE") != std::string::npos);
  CHECK(t.find("MPI_COMM_WORLD rank") != std::string::npos);
  CHECK_NOTHROW(mpi_check(MPI_SUCCESS, "MPI_Fake", 0));
}

// The blocking forms (MPI_Allreduce, ...) and the non-blocking ones
// (MPI_Iallreduce, ...) share the count check; each message names its call.
TEST_CASE("mpi: counts above INT_MAX throw CommError naming the count and the call") {
  std::unique_ptr<Communicator> w = make_world_communicator();
  const std::size_t huge = static_cast<std::size_t>(INT_MAX) + 1;
  float x[2] = {0, 0};
  const std::string expected = std::to_string(huge);
  const std::pair<std::string, std::string> cases[] = {
      {"MPI_Allreduce", message_of([&] { w->all_reduce(x, huge, DType::f32, ReduceOp::sum); })},
      {"MPI_Bcast", message_of([&] { w->broadcast(x, huge, DType::bf16, 0); })},
      {"MPI_Allgather", message_of([&] { w->all_gather(x, x, huge, DType::f64); })},
      {"MPI_Reduce_scatter_block",
       message_of([&] { w->reduce_scatter(x, x + 1, huge, DType::f16, ReduceOp::max); })},
      {"MPI_Iallreduce",
       message_of([&] { (void)w->iall_reduce(x, huge, DType::f32, ReduceOp::sum); })},
      {"MPI_Ibcast", message_of([&] { (void)w->ibroadcast(x, huge, DType::bf16, 0); })},
      {"MPI_Iallgather", message_of([&] { (void)w->iall_gather(x, x, huge, DType::f64); })},
      {"MPI_Ireduce_scatter_block",
       message_of([&] { (void)w->ireduce_scatter(x, x + 1, huge, DType::f16, ReduceOp::max); })},
  };
  for (const auto& c : cases) {
    // Named copies: clang 14 cannot capture structured bindings (INFO's lambda).
    const std::string& call = c.first;
    const std::string& m = c.second;
    INFO(m);
    CHECK(m.find(expected) != std::string::npos);
    CHECK(m.find("INT_MAX") != std::string::npos);
    CHECK(m.find(call + ":") != std::string::npos);
    CHECK(m.find(fmt::format("rank {}", w->rank())) != std::string::npos);
  }
  CHECK(mpi_count(static_cast<std::size_t>(INT_MAX), "MPI_Fake", 0) == INT_MAX);
  // Nothing was started: the communicator is still in step on every rank.
  w->barrier();
}

TEST_CASE("mpi: overlapping buffers that MPI cannot handle are rejected") {
  std::unique_ptr<Communicator> w = make_world_communicator();
  const std::size_t n = static_cast<std::size_t>(w->world_size());
  std::vector<float> buf(4 * n + 4);
  // recv inside send
  CHECK_THROWS_AS(w->reduce_scatter(buf.data(), buf.data() + 1, 4, DType::f32, ReduceOp::sum),
                  InvariantError);
  // send overlaps recv but is not recv + rank * count (rank * 4 != 1)
  CHECK_THROWS_AS(w->all_gather(buf.data() + 1, buf.data(), 4, DType::f32), InvariantError);
  CHECK_THROWS_AS(w->all_reduce(nullptr, 1, DType::f32, ReduceOp::sum), InvariantError);
  // The non-blocking forms apply the same checks.
  CHECK_THROWS_AS(w->ireduce_scatter(buf.data(), buf.data() + 1, 4, DType::f32, ReduceOp::sum),
                  InvariantError);
  CHECK_THROWS_AS(w->iall_gather(buf.data() + 1, buf.data(), 4, DType::f32), InvariantError);
  CHECK_THROWS_AS(w->iall_reduce(nullptr, 1, DType::f32, ReduceOp::sum), InvariantError);
  w->barrier();
}

TEST_CASE("mpi: a borrowed MPI_COMM_SELF is a world of one") {
  MpiCommunicator self(MPI_COMM_SELF, MpiCommunicator::Ownership::borrowed);
  CHECK(self.rank() == 0);
  CHECK(self.world_size() == 1);
  double d[3] = {1.5, -2, 4};
  self.all_reduce(d, 3, DType::f64, ReduceOp::sum);
  CHECK(d[0] == 1.5);
  CHECK(d[1] == -2);
  CHECK(d[2] == 4);
  std::unique_ptr<Communicator> sub = self.split(0, 0);
  CHECK(sub->world_size() == 1);
  CHECK(dynamic_cast<MpiCommunicator*>(sub.get())->native() != MPI_COMM_SELF);
}

// The registered MPI_Ops, applied with MPI_Reduce_local, agree bit for bit
// with reduce_16bit and with the independent fp32-then-round reference.
TEST_CASE("mpi: bf16/f16 user ops follow the per-pair fp32 definition") {
  (void)make_world_communicator();
  const std::size_t count = 3001;
  for (DType t : {DType::bf16, DType::f16}) {
    CHECK(mpi_datatype(t) != MPI_DATATYPE_NULL);
    int size = 0;
    MPI_Type_size(mpi_datatype(t), &size);
    CHECK(size == 2);
    for (ReduceOp op : test::kOps) {
      INFO(dtype_name(t), " ", test::op_name(op));
      std::vector<std::uint16_t> a(count), b(count);
      for (std::size_t i = 0; i < count; ++i) {
        test::put(t, a.data(), i, (static_cast<double>(i % 97) - 48.0) / 3.0);
        test::put(t, b.data(), i,
                  static_cast<double>((i * 31) % 89) * std::ldexp(1.0, -static_cast<int>(i % 9)));
      }
      std::vector<std::uint16_t> want = b;
      for (std::size_t i = 0; i < count; ++i) test::combine_into(t, op, a.data(), want.data(), i);
      std::vector<std::uint16_t> via_mpi = b;
      MPI_Reduce_local(a.data(), via_mpi.data(), static_cast<int>(count), mpi_datatype(t),
                       mpi_op(t, op));
      std::vector<std::uint16_t> via_fn = b;
      reduce_16bit(t, op, a.data(), via_fn.data(), count);
      CHECK(test::diff(t, via_mpi.data(), want.data(), count) == "");
      CHECK(test::diff(t, via_fn.data(), want.data(), count) == "");
    }
    // NaN propagates through max and min.
    std::uint16_t nan = t == DType::bf16 ? float_to_bf16(NAN) : float_to_f16(NAN);
    std::uint16_t one = t == DType::bf16 ? float_to_bf16(1.0f) : float_to_f16(1.0f);
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      std::uint16_t acc = one;
      reduce_16bit(t, op, &nan, &acc, 1);
      CHECK(std::isnan(t == DType::bf16 ? bf16_to_float(acc) : f16_to_float(acc)));
      acc = nan;
      reduce_16bit(t, op, &one, &acc, 1);
      CHECK(std::isnan(t == DType::bf16 ? bf16_to_float(acc) : f16_to_float(acc)));
    }
  }
  CHECK(mpi_datatype(DType::f32) == MPI_FLOAT);
  CHECK(mpi_datatype(DType::f64) == MPI_DOUBLE);
  CHECK(mpi_op(DType::f64, ReduceOp::min) == MPI_MIN);
  CHECK_THROWS_AS(reduce_16bit(DType::f32, ReduceOp::sum, nullptr, nullptr, 0), InvariantError);
}

}  // namespace
}  // namespace zeroshard
