// TracedCommunicator, CommsLog and the clock offset (comm/traced_communicator.h,
// comm/comms_log.h, comm/clock_sync.h) at this world size: sequence
// numbers and records in issue order with their labels and nccl-tests
// sizes, exact comms_logger counts and bytes for a known sequence, the bus
// bandwidth factors, spans and comm_wait accounting, and the clock offset
// against its bound (every rank here shares one steady clock, so the true
// offset is 0).
#include <cmath>
#include <numeric>
#include <sstream>
#include <vector>

#include <doctest/doctest.h>

#include "comm/clock_sync.h"
#include "comm/collective_record.h"
#include "comm/comms_log.h"
#include "comm/traced_communicator.h"
#include "core/error.h"
#include "core/tracer.h"

using namespace zeroshard;

namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> comm = make_world_communicator();
  return *comm;
}

}  // namespace

TEST_CASE("nccl-tests sizes and bus bandwidth factors") {
  for (const int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{57}, std::size_t{10001}}) {
      const std::uint64_t c = count, w = static_cast<std::uint64_t>(n);
      CHECK(collective_bytes(CollectiveKind::all_reduce, count, DType::f32, n) == 4 * c);
      CHECK(collective_bytes(CollectiveKind::broadcast, count, DType::bf16, n) == 2 * c);
      CHECK(collective_bytes(CollectiveKind::all_gather, count, DType::f32, n) == 4 * c * w);
      CHECK(collective_bytes(CollectiveKind::reduce_scatter, count, DType::f64, n) == 8 * c * w);
      CHECK(collective_bytes(CollectiveKind::all_to_all, count, DType::f16, n) == 2 * c * w);
      CHECK(collective_bytes(CollectiveKind::barrier, count, DType::f32, n) == 0);
    }
    const double d = n;
    CHECK(bus_bandwidth_factor(CollectiveKind::all_reduce, n) == doctest::Approx(2 * (d - 1) / d));
    CHECK(bus_bandwidth_factor(CollectiveKind::all_gather, n) == doctest::Approx((d - 1) / d));
    CHECK(bus_bandwidth_factor(CollectiveKind::reduce_scatter, n) == doctest::Approx((d - 1) / d));
    CHECK(bus_bandwidth_factor(CollectiveKind::all_to_all, n) == doctest::Approx((d - 1) / d));
    CHECK(bus_bandwidth_factor(CollectiveKind::broadcast, n) == 1.0);
  }
  CollectiveKind k{};
  CHECK(parse_collective_kind("reduce_scatter", k));
  CHECK(k == CollectiveKind::reduce_scatter);
  CHECK_FALSE(parse_collective_kind("allgather", k));
}

TEST_CASE("sequence numbers, labels and records in issue order") {
  Communicator& comm = world();
  const int n = comm.world_size();
  TracedCommunicator t(comm, "dp", TracedOptions{.recording = true});
  CHECK(t.last_seq() == 0);
  std::vector<float> buf(57 * static_cast<std::size_t>(n), 1.0f), out(57 * static_cast<std::size_t>(n));
  t.set_label("fc1");
  t.all_reduce(buf.data(), 7, DType::f32, ReduceOp::sum);
  {
    TracedCommunicator::LabelScope scope(t, "fc2");
    CommWork a = t.iall_gather(buf.data(), out.data(), 57, DType::f32);
    CommWork b = t.ibroadcast(buf.data(), 1, DType::f32, 0);
    b.wait();
    a.wait();
  }
  CHECK(t.label() == "fc1");
  t.reduce_scatter(buf.data(), out.data(), 0, DType::f32, ReduceOp::sum);
  t.barrier();
  CHECK(t.last_seq() == 5);
  const std::vector<CollectiveRecord> r = t.take_records();
  REQUIRE(r.size() == 5);
  for (std::size_t i = 0; i < r.size(); ++i) {
    CHECK(r[i].seq == static_cast<std::int64_t>(i) + 1);
    CHECK(r[i].end_ns >= r[i].issue_ns);
  }
  CHECK(r[0].kind == CollectiveKind::all_reduce);
  CHECK(r[0].label == "fc1");
  CHECK(r[0].blocking);
  CHECK(r[0].bytes == 28);
  CHECK(r[1].kind == CollectiveKind::all_gather);
  CHECK(r[1].label == "fc2");
  CHECK(r[1].bytes == 57u * 4u * static_cast<unsigned>(n));
  CHECK_FALSE(r[1].blocking);
  CHECK(r[2].kind == CollectiveKind::broadcast);
  CHECK(r[2].label == "fc2");
  CHECK(r[3].kind == CollectiveKind::reduce_scatter);
  CHECK(r[3].bytes == 0);
  CHECK(r[4].kind == CollectiveKind::barrier);
  CHECK(t.take_records().empty());
  // The values went through: the all-reduce summed n ones.
  CHECK(buf[0] == static_cast<float>(n));
}

TEST_CASE("comms_logger: exact counts and bytes of a known sequence") {
  Communicator& comm = world();
  const int n = comm.world_size();
  CommsLog log(CommsLogOptions{.enabled = true, .prof_all = false, .prof_ops = {"all_gather", "all_reduce"}});
  TracedCommunicator t(comm, "dp", TracedOptions{.comms_log = &log});
  std::vector<float> buf(10001 * static_cast<std::size_t>(n)), out(buf.size());
  for (int i = 0; i < 3; ++i) t.all_gather(buf.data(), out.data(), 7, DType::f32);
  t.iall_gather(buf.data(), out.data(), 10001, DType::f32).wait();
  t.all_reduce(buf.data(), 57, DType::f32, ReduceOp::sum);
  t.all_reduce(buf.data(), 1, DType::f64, ReduceOp::max);
  t.barrier();  // not profiled
  t.broadcast(buf.data(), 3, DType::f32, 0);  // not profiled
  const std::vector<CommsLogRow> rows = log.rows();
  REQUIRE(rows.size() == 4);
  // Ordered by kind (all_reduce before all_gather), then message size.
  CHECK(rows[0].kind == CollectiveKind::all_reduce);
  CHECK(rows[0].message_bytes == 8);
  CHECK(rows[0].count == 1);
  CHECK(rows[1].kind == CollectiveKind::all_reduce);
  CHECK(rows[1].message_bytes == 57 * 4);
  CHECK(rows[2].kind == CollectiveKind::all_gather);
  CHECK(rows[2].message_bytes == 7u * 4u * static_cast<unsigned>(n));
  CHECK(rows[2].count == 3);
  CHECK(rows[2].total_bytes == 3u * 7u * 4u * static_cast<unsigned>(n));
  CHECK(rows[3].message_bytes == 10001u * 4u * static_cast<unsigned>(n));
  CHECK(rows[3].count == 1);
  for (const CommsLogRow& r : rows) {
    CHECK(r.world_size == n);
    CHECK(r.mean_ms == doctest::Approx(r.total_ms / static_cast<double>(r.count)));
    CHECK(r.busbw_gbps == doctest::Approx(r.algbw_gbps * bus_bandwidth_factor(r.kind, n)));
  }
  const std::string text = log.summary();
  CHECK(text.find("all_gather") != std::string::npos);
  CHECK(text.find("barrier") == std::string::npos);
  log.clear();
  CHECK(log.rows().empty());
  CHECK_THROWS_WITH_AS(CommsLog(CommsLogOptions{.enabled = true, .prof_all = false, .prof_ops = {"allgather"}}),
                       doctest::Contains("comms_logger.prof_ops"), ConfigError);
}

TEST_CASE("comms_logger verbose lines name the unit with debug") {
  Communicator& comm = world();
  std::ostringstream out;
  CommsLog log(CommsLogOptions{.enabled = true, .verbose = true, .debug = true}, &out);
  TracedCommunicator t(comm, "dp", TracedOptions{.comms_log = &log});
  t.set_label("fc3");
  float x = 1;
  t.all_reduce(&x, 1, DType::f32, ReduceOp::sum);
  CHECK(out.str().find("all_reduce") != std::string::npos);
  CHECK(out.str().find("fc3") != std::string::npos);
}

TEST_CASE("spans on the comm thread and the wait charged to comm_wait") {
  Communicator& comm = world();
  Tracer tracer;
  tracer.set_spans(true);
  tracer.set_accounting(true);
  TracedCommunicator t(comm, "dp", TracedOptions{.tracer = &tracer});
  t.set_label("u0");
  std::vector<float> buf(7 * static_cast<std::size_t>(comm.world_size()));
  t.all_gather(buf.data() + 7 * static_cast<std::size_t>(comm.rank()), buf.data(), 7, DType::f32);  // in place
  t.iall_reduce(buf.data(), 7, DType::f32, ReduceOp::sum).wait();
  auto [spans, counters] = tracer.take_all();
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].name == "all_gather");
  CHECK(spans[0].thread == TraceThread::comm);
  CHECK(spans[0].unit == "u0");
  CHECK(spans[0].seq == 1);
  CHECK(spans[1].name == "all_reduce");
  CHECK(spans[1].seq == 2);
  const StepTimes s = tracer.take_step(Tracer::now_ns());
  CHECK(s[TimeCategory::comm_wait] > 0);
  CHECK(s[TimeCategory::comm_wait] <= s.wall_ns);
}

TEST_CASE("clock offset to rank 0 within its bound") {
  Communicator& comm = world();
  const ClockOffset c = estimate_clock_offset(comm, 8);
  CHECK(c.bound_ns >= 0);
  if (comm.rank() == 0) {
    CHECK(c.offset_ns == 0);
    CHECK(c.bound_ns == 0);
  }
  // One host: the true offset is 0, so the estimate is within its bound
  // (plus 1 us for the rounding of the midpoint).
  CHECK(std::llabs(c.offset_ns) <= c.bound_ns + 1000);
  CHECK(c.bound_ns < 50'000'000);
  CHECK_THROWS_AS(estimate_clock_offset(comm, 0), InvariantError);
}
