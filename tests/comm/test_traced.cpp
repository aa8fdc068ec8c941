// TracedCommunicator (sequence numbers, records, labels, spans), CommsLog
// (exact counts, bytes, busbw factors) and estimate_clock_offset, over the
// world communicator at every test world size.
#include <sstream>
#include <vector>

#include <doctest/doctest.h>

#include "comm/traced/clock_sync.h"
#include "comm/traced/collective_watchdog.h"
#include "comm/traced/comms_log.h"
#include "comm/traced/traced_communicator.h"
#include "core/error.h"
#include "core/tracer.h"
#include "tests/comm/comm_test_util.h"

using namespace zeroshard;
using zeroshard::test::world;

namespace {

const std::vector<std::size_t> kOddCounts = {0, 1, 7, 57, 10001};

// One of each collective with `count` f32 elements per block, half of them
// non-blocking (waited or tested to completion). Returns the kinds in order.
std::vector<CollectiveKind> run_sequence(TracedCommunicator& c, std::size_t count) {
  const auto n = static_cast<std::size_t>(c.world_size());
  std::vector<float> a(count * n + 1, 1.0f), b(count * n + 1, 0.0f);
  c.all_reduce(a.data(), count, DType::f32, ReduceOp::sum);
  c.ireduce_scatter(a.data(), b.data(), count, DType::f32, ReduceOp::sum).wait();
  c.all_gather(a.data(), b.data(), count, DType::f32);
  CommWork w = c.iall_to_all(a.data(), b.data(), count, DType::f32);
  test::poll_until_done(w);
  c.ibroadcast(a.data(), count, DType::f32, 0).wait();
  c.barrier();
  return {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather,
          CollectiveKind::all_to_all, CollectiveKind::broadcast, CollectiveKind::barrier};
}

}  // namespace

TEST_CASE("collective_bytes and bus_bandwidth_factor follow nccl-tests") {
  CHECK(collective_bytes(CollectiveKind::all_reduce, 7, DType::f32, 4) == 28);
  CHECK(collective_bytes(CollectiveKind::broadcast, 7, DType::bf16, 4) == 14);
  CHECK(collective_bytes(CollectiveKind::all_gather, 7, DType::f64, 3) == 168);
  CHECK(collective_bytes(CollectiveKind::reduce_scatter, 57, DType::f16, 3) == 342);
  CHECK(collective_bytes(CollectiveKind::all_to_all, 1, DType::f32, 2) == 8);
  CHECK(collective_bytes(CollectiveKind::barrier, 99, DType::f32, 4) == 0);
  CHECK(bus_bandwidth_factor(CollectiveKind::all_reduce, 4) == doctest::Approx(1.5));
  CHECK(bus_bandwidth_factor(CollectiveKind::all_gather, 4) == doctest::Approx(0.75));
  CHECK(bus_bandwidth_factor(CollectiveKind::reduce_scatter, 3) == doctest::Approx(2.0 / 3));
  CHECK(bus_bandwidth_factor(CollectiveKind::all_to_all, 2) == doctest::Approx(0.5));
  CHECK(bus_bandwidth_factor(CollectiveKind::broadcast, 4) == 1.0);
  CHECK(bus_bandwidth_factor(CollectiveKind::all_reduce, 1) == 0.0);
  CollectiveFingerprint fp{CollectiveKind::all_gather, 262144, DType::f32, -1, "fc2"};
  CHECK(describe(fp, 812, "dp") == "all_gather #812 (dp, unit fc2, 262144 f32)");
  fp = {CollectiveKind::broadcast, 3, DType::bf16, 1, ""};
  CHECK(describe(fp, 2, "tp") == "broadcast #2 (tp, 3 bf16, root 1)");
  fp = {CollectiveKind::barrier, 0, DType::f32, -1, "end"};
  CHECK(describe(fp, 9, "world") == "barrier #9 (world, unit end)");
}

TEST_CASE("CommsLog: figures from known latencies, prof_ops, verbose and debug lines") {
  std::ostringstream out;
  CommsLog log({.enabled = true, .verbose = true, .prof_all = false,
                .prof_ops = {"all_gather", "all_reduce"}, .debug = true},
               &out);
  log.record(CollectiveKind::all_gather, 4000, 2000, 4, "dp", "fc2");  // 2 us
  log.record(CollectiveKind::all_gather, 4000, 6000, 4, "dp", "fc3");
  log.record(CollectiveKind::all_reduce, 8, 1000, 4, "dp", "");
  log.record(CollectiveKind::reduce_scatter, 4000, 1000, 4, "dp", "x");  // not profiled
  const auto rows = log.rows();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].kind == CollectiveKind::all_reduce);
  CHECK(rows[0].count == 1);
  CHECK(rows[0].algbw_gbps == doctest::Approx(8.0 / 1000.0));
  CHECK(rows[0].busbw_gbps == doctest::Approx(8.0 / 1000.0 * 1.5));
  CHECK(rows[1].kind == CollectiveKind::all_gather);
  CHECK(rows[1].message_bytes == 4000);
  CHECK(rows[1].count == 2);
  CHECK(rows[1].total_bytes == 8000);
  CHECK(rows[1].total_ms == doctest::Approx(0.008));
  CHECK(rows[1].mean_ms == doctest::Approx(0.004));
  CHECK(rows[1].algbw_gbps == doctest::Approx(1.0));  // 8000 B in 8 us
  CHECK(rows[1].busbw_gbps == doctest::Approx(0.75));
  const std::string lines = out.str();
  CHECK(lines.find("comm op: all_gather | time (ms): 0.002") != std::string::npos);
  CHECK(lines.find("unit: fc3") != std::string::npos);
  CHECK(lines.find("reduce_scatter") == std::string::npos);
  CHECK(log.summary().find("all_gather") != std::string::npos);
  log.clear();
  CHECK(log.rows().empty());
  CHECK_THROWS_AS(CommsLog({.enabled = true, .prof_ops = {"allgather"}}), ConfigError);
  CommsLog off({});
  off.record(CollectiveKind::all_reduce, 8, 1000, 1);
  CHECK(off.rows().empty());
}

TEST_CASE("TracedCommunicator numbers every collective and records them in issue order") {
  const int n = world().world_size();
  CommsLogOptions log_options;
  log_options.enabled = true;
  CommsLog log(log_options);
  TracedCommunicator c(world(), "world", {.comms_log = &log, .recording = true});
  std::int64_t seq = 0;
  for (const std::size_t count : kOddCounts) {
    TracedCommunicator::LabelScope scope(c, "unit" + std::to_string(count));
    const auto kinds = run_sequence(c, count);
    const auto records = c.take_records();
    REQUIRE(records.size() == kinds.size());
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      const CollectiveRecord& r = records[i];
      CHECK(r.seq == ++seq);
      CHECK(r.kind == kinds[i]);
      CHECK(r.label == "unit" + std::to_string(count));
      CHECK(r.bytes == collective_bytes(kinds[i], kinds[i] == CollectiveKind::barrier ? 0 : count,
                                        DType::f32, n));
      CHECK(r.issue_ns <= r.end_ns);
      CHECK(r.blocking == (i == 0 || i == 2 || i == 5));
      if (i == 3) {
        CHECK(r.wait_begin_ns == -1);  // completed by test()
      } else {
        CHECK(r.wait_begin_ns >= r.issue_ns);
        CHECK(r.wait_begin_ns <= r.end_ns);
      }
    }
  }
  CHECK(c.label().empty());
  CHECK(c.last_seq() == seq);
  // Exact log figures: one collective of each kind per count, bytes exact.
  const auto rows = log.rows();
  std::uint64_t logged = 0;
  for (const CommsLogRow& r : rows) {
    logged += r.count;
    CHECK(r.world_size == n);
    CHECK(r.total_bytes == r.count * r.message_bytes);
    if (r.total_ms > 0) {
      CHECK(r.busbw_gbps == doctest::Approx(r.algbw_gbps * bus_bandwidth_factor(r.kind, n)));
    }
    if (r.kind == CollectiveKind::barrier) {
      CHECK(r.count == kOddCounts.size());
      CHECK(r.message_bytes == 0);
    } else if (r.kind == CollectiveKind::all_gather) {
      bool found = false;
      for (const std::size_t count : kOddCounts) found |= r.message_bytes == count * 4 * n;
      CHECK(found);
    }
  }
  CHECK(logged == 6 * kOddCounts.size());
  // count 0 gives one row per kind at 0 bytes (all six: barrier included).
  std::size_t zero_rows = 0;
  for (const CommsLogRow& r : rows) zero_rows += r.message_bytes == 0 ? 1 : 0;
  CHECK(zero_rows == 6);
}

TEST_CASE("cross_host_bytes: the direct-exchange model per kind") {
  // Ranks 0, 1 on host 0; 2, 3 on host 1; 4 on host 2.
  const std::vector<int> hosts = {0, 0, 1, 1, 2};
  // Rank 0: three remote ranks; 10 f32 elements per block = 40 bytes.
  CHECK(cross_host_bytes(CollectiveKind::all_gather, 10, DType::f32, 0, -1, -1, hosts) == 120);
  CHECK(cross_host_bytes(CollectiveKind::all_to_all, 10, DType::bf16, 0, -1, -1, hosts) == 60);
  CHECK(cross_host_bytes(CollectiveKind::reduce_scatter, 10, DType::u8, 4, -1, -1, hosts) == 40);
  CHECK(cross_host_bytes(CollectiveKind::all_reduce, 10, DType::f32, 0, -1, -1, hosts) == 2 * 40 * 3 / 5);
  CHECK(cross_host_bytes(CollectiveKind::broadcast, 10, DType::f32, 2, 2, -1, hosts) == 120);
  CHECK(cross_host_bytes(CollectiveKind::broadcast, 10, DType::f32, 3, 2, -1, hosts) == 0);
  CHECK(cross_host_bytes(CollectiveKind::send, 10, DType::f32, 0, -1, 1, hosts) == 0);
  CHECK(cross_host_bytes(CollectiveKind::send, 10, DType::f32, 0, -1, 4, hosts) == 40);
  CHECK(cross_host_bytes(CollectiveKind::recv, 10, DType::f32, 0, -1, 4, hosts) == 0);
  CHECK(cross_host_bytes(CollectiveKind::barrier, 0, DType::f32, 0, -1, -1, hosts) == 0);
  CHECK(cross_host_bytes(CollectiveKind::all_gather, 10, DType::f32, 0, -1, -1, {}) == 0);
}

TEST_CASE("TracedCommunicator with a comms log counts the bytes each collective sends to other hosts") {
  // Ranks 2k and 2k + 1 stand for one host.
  const int n = world().world_size(), me = world().rank();
  CommsLogOptions log_options;
  log_options.enabled = true;
  CommsLog log(log_options);
  TracedCommunicator c(world(), "world", {.comms_log = &log, .host_id = "host-" + std::to_string(me / 2)});
  REQUIRE(c.node_of_rank().size() == static_cast<std::size_t>(n));
  std::uint64_t remote = 0;
  for (int r = 0; r < n; ++r) {
    CHECK(c.node_of_rank()[static_cast<std::size_t>(r)] == r / 2);
    remote += r / 2 != me / 2 ? 1 : 0;
  }
  const std::size_t count = 57;
  run_sequence(c, count);
  const std::uint64_t block = count * 4;
  std::uint64_t total = 0;
  for (const CommsLogRow& r : log.rows()) {
    CAPTURE(to_string(r.kind));
    std::uint64_t want = 0;
    switch (r.kind) {
      case CollectiveKind::all_gather:
      case CollectiveKind::all_to_all:
      case CollectiveKind::reduce_scatter: want = block * remote; break;
      case CollectiveKind::all_reduce: want = 2 * block * remote / static_cast<std::uint64_t>(n); break;
      case CollectiveKind::broadcast: want = me == 0 ? block * remote : 0; break;
      default: break;
    }
    CHECK(r.cross_host_bytes == want);
    total += want;
  }
  CHECK(log.cross_host_bytes() == total);
  // A split of the traced communicator exchanges its own ranks' hosts.
  auto odd = c.split(me % 2, me, "parity");
  for (int r = 0; r < odd->world_size(); ++r) {
    CHECK(odd->node_of_rank()[static_cast<std::size_t>(r)] == r);  // ranks of one parity: one per host
  }
  // Without a log nothing is exchanged.
  TracedCommunicator quiet(world(), "quiet");
  CHECK(quiet.node_of_rank().empty());
}

TEST_CASE("TracedCommunicator: spans on the comm thread, comm_wait accounting, nothing when off") {
  Tracer tracer;
  TracedCommunicator c(world(), "dp", {.tracer = &tracer});
  std::vector<float> buf(57, 1.0f);
  c.all_reduce(buf.data(), 57, DType::f32, ReduceOp::sum);  // tracer inactive: no span
  CHECK(tracer.span_count() == 0);
  tracer.set_spans(true);
  tracer.set_accounting(true);
  {
    TracedCommunicator::LabelScope scope(c, "fc1");
    c.iall_reduce(buf.data(), 57, DType::f32, ReduceOp::sum).wait();
    c.barrier();
  }
  const StepTimes times = tracer.take_step(Tracer::now_ns());
  auto [all, counters] = tracer.take_all();
  // Each collective's span on the comm thread, and where the caller waited
  // for it a "wait <kind>" span on the engine's thread inside it.
  std::vector<TraceSpan> spans, waits;
  for (TraceSpan& s : all) (s.thread == TraceThread::comm ? spans : waits).push_back(s);
  for (const TraceSpan& w : waits) {
    CHECK(w.thread == TraceThread::engine);
    CHECK(w.name.rfind("wait ", 0) == 0);
    const TraceSpan& of = spans.at(static_cast<std::size_t>(w.seq - 2));
    CHECK(w.name == "wait " + of.name);
    CHECK(w.begin_ns >= of.begin_ns);
    CHECK(w.end_ns == of.end_ns);
  }
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].name == "all_reduce");
  CHECK(spans[0].thread == TraceThread::comm);
  CHECK(spans[0].unit == "fc1");
  CHECK(spans[0].bytes == 57 * 4);
  CHECK(spans[0].seq == 2);
  CHECK(spans[1].name == "barrier");
  CHECK(spans[1].seq == 3);
  CHECK(spans[1].end_ns >= spans[1].begin_ns);
  CHECK(times[TimeCategory::comm_wait] >= 0);
  CHECK(times[TimeCategory::comm_wait] <= times.wall_ns);
  // Recording off: nothing kept, numbering goes on.
  c.barrier();
  CHECK(c.take_records().empty());
  CHECK(c.last_seq() == 4);
}

TEST_CASE("TracedCommunicator::split numbers its own collectives") {
  TracedCommunicator c(world(), "world");
  auto half = c.split(world().rank() % 2, world().rank(), "half");
  half->set_recording(true);
  half->barrier();
  const auto records = half->take_records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].seq == 1);
  CHECK(half->name() == "half");
  CHECK(half->world_size() == (world().world_size() + 1 - world().rank() % 2) / 2);
}

TEST_CASE("estimate_clock_offset: |offset| within the bound on one host") {
  // Every rank of a test job shares this host's steady clock: the true
  // offset is 0, so |estimate| <= bound must hold (plus 1 us of slack for
  // the rounding of the midpoint).
  const ClockOffset o = estimate_clock_offset(world(), 8);
  MESSAGE("rank " << world().rank() << ": offset " << o.offset_ns << " ns, bound " << o.bound_ns
                  << " ns");
  CHECK(o.bound_ns >= 0);
  CHECK(o.bound_ns < 50'000'000);
  CHECK(std::llabs(o.offset_ns) <= o.bound_ns + 1000);
  if (world().rank() == 0) {
    CHECK(o.offset_ns == 0);
    CHECK(o.bound_ns == 0);
  }
  CHECK_THROWS_AS(estimate_clock_offset(world(), 0), InvariantError);
}

TEST_CASE("CollectiveWatchdog::format_report groups ranks and names the unreachable") {
  // Statuses as the watchdog encodes them (version, reason, timeout, state, text).
  const auto st = [](const char* reason, const char* state, const std::string& text) {
    return std::string("zsw1\x1f") + reason + "\x1f" + "5\x1f" + state + "\x1f" + text;
  };
  const std::string rs = "reduce_scatter #811 (dp, unit fc3, 1024 f32)";
  const std::vector<std::string> statuses = {
      st("peer", "in", rs), st("timeout", "in", rs),
      st("peer", "in", "all_gather #812 (dp, unit fc2, 262144 f32)"), st("peer", "in", rs), ""};
  CHECK(CollectiveWatchdog::format_report(statuses) ==
        "zeroshard: collective timeout after 5 s: ranks 0, 1, 3 are in " + rs +
            "; rank 2 is in all_gather #812 (dp, unit fc2, 262144 f32); rank 4 unreachable");
  CHECK(CollectiveWatchdog::format_report({st("error", "failed", "x: boom"), st("peer", "idle", "")}) ==
        "zeroshard: collective error: rank 0 failed in x: boom; rank 1 is in no collective (last "
        "completed: none)");
  // Ranks that failed in the same collective are one group; the error of
  // its lowest rank (a sixth field) is quoted once.
  const std::string ag = "all_gather #16 (dp, unit u0, 256 f32)";
  CHECK(CollectiveWatchdog::format_report({st("error", "failed", ag + "\x1fMPI_ERR_TRUNCATE on rank 0"),
                                           st("error", "failed", ag + "\x1fMPI_ERR_TRUNCATE on rank 1"),
                                           st("peer", "in", rs)}) ==
        "zeroshard: collective error: ranks 0, 1 failed in " + ag + ": MPI_ERR_TRUNCATE on rank 0; rank 2 is in " + rs);
}

TEST_CASE("a watched communicator runs collectives normally and stops its watchdog") {
  for (int round = 0; round < 2; ++round) {  // the watchdog starts again after it stopped
    TracedCommunicator c(world(), "dp", {.timeout_s = 30});
    std::vector<float> buf(7, 1.0f);
    c.all_reduce(buf.data(), 7, DType::f32, ReduceOp::sum);
    c.iall_reduce(buf.data(), 7, DType::f32, ReduceOp::sum).wait();
    CHECK(buf[0] == static_cast<float>(world().world_size() * world().world_size()));
    c.barrier();
  }
}

TEST_CASE("check_fingerprints: the same CommError on every rank names the odd rank") {
  Communicator& w = world();
  TracedCommunicator c(w, "dp", {.check_fingerprints = true});
  std::vector<float> buf(7 * static_cast<std::size_t>(w.world_size()), 1.0f);
  {
    TracedCommunicator::LabelScope scope(c, "fc2");
    c.all_reduce(buf.data(), 7, DType::f32, ReduceOp::sum);  // all agree: runs
  }
  CHECK(buf[0] == static_cast<float>(w.world_size()));
  if (w.world_size() < 2) return;
  const bool odd = w.rank() == w.world_size() - 1;
  std::string what;
  try {
    TracedCommunicator::LabelScope scope(c, "fc3");
    if (odd) {
      c.barrier();
    } else {
      c.all_reduce(buf.data(), 7, DType::f32, ReduceOp::sum);
    }
  } catch (const CommError& e) {
    what = e.what();
  }
  const int last = w.world_size() - 1;
  std::string others = w.world_size() == 2 ? "rank 0 calls" : "ranks 0";
  CHECK(what.find("collective mismatch on communicator dp: " + others) == 0);
  CHECK(what.find("all_reduce #2 (dp, unit fc3, 7 f32)") != std::string::npos);
  CHECK(what.find("rank " + std::to_string(last) + " calls barrier #2 (dp, unit fc3)") !=
        std::string::npos);
  // Nothing was issued: the communicator goes on.
  c.barrier();
  CHECK(c.last_seq() == 3);
}

TEST_CASE("TracedCommunicator: sends and receives are numbered per peer, recorded and logged") {
  // Each rank sends three messages to the next rank and receives three from
  // the previous one (one blocking, two not), then runs a collective: the
  // messages leave the collective sequence alone, so every rank numbers the
  // all_reduce #1 even with fingerprint checks on.
  Communicator& w = world();
  const int n = w.world_size(), me = w.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  CommsLogOptions log_options;
  log_options.enabled = true;
  CommsLog log(log_options);
  Tracer tracer;
  tracer.set_spans(true);
  TracedCommunicator c(w, "pp", {.tracer = &tracer, .comms_log = &log, .recording = true,
                                 .check_fingerprints = true});
  std::vector<float> out(57, static_cast<float>(me)), in(57, -1.0f);
  {
    TracedCommunicator::LabelScope scope(c, "act");
    std::vector<CommWork> work;
    work.push_back(c.isend(out.data(), 7, DType::f32, next));
    work.push_back(c.irecv(in.data(), 7, DType::f32, prev));
    for (CommWork& x : work) x.wait();
    work.push_back(c.isend(out.data(), 1, DType::f32, next));
    work.push_back(c.irecv(in.data() + 7, 1, DType::f32, prev));
    test::poll_until_done(work[3]);
    work[2].wait();
    if (me % 2 == 0 || n == 1) {
      CommWork s = c.isend(out.data(), 57, DType::f32, next);
      c.recv(in.data(), 57, DType::f32, prev);
      s.wait();
    } else {
      CommWork r = c.irecv(in.data(), 57, DType::f32, prev);
      c.send(out.data(), 57, DType::f32, next);
      r.wait();
    }
  }
  CHECK(in[0] == static_cast<float>(prev));
  CHECK(in[56] == static_cast<float>(prev));
  CHECK(c.last_send_seq(next) == 3);
  CHECK(c.last_recv_seq(prev) == 3);
  CHECK(c.last_send_seq(n) == 0);
  CHECK(c.last_seq() == 0);
  float one = 1.0f;
  c.all_reduce(&one, 1, DType::f32, ReduceOp::sum);
  CHECK(one == static_cast<float>(n));
  CHECK(c.last_seq() == 1);
  const auto records = c.take_records();
  REQUIRE(records.size() == 7);
  int sends = 0, recvs = 0;
  for (const CollectiveRecord& r : records) {
    if (r.kind == CollectiveKind::all_reduce) {
      CHECK(r.peer == -1);
      continue;
    }
    REQUIRE(is_point_to_point(r.kind));
    const bool send = r.kind == CollectiveKind::send;
    CHECK(r.peer == (send ? next : prev));
    CHECK(r.seq == ++(send ? sends : recvs));
    CHECK(r.label == "act");
    CHECK(r.bytes == r.count * 4);
    CHECK(r.issue_ns <= r.end_ns);
  }
  CHECK(sends == 3);
  CHECK(recvs == 3);
  std::uint64_t logged = 0;
  for (const CommsLogRow& r : log.rows()) {
    if (is_point_to_point(r.kind)) {
      logged += r.count;
      if (r.total_ms > 0) CHECK(r.busbw_gbps == doctest::Approx(r.algbw_gbps));
    }
  }
  CHECK(logged == 6);
  int spans = 0;
  for (const TraceSpan& s : tracer.take_all().first) spans += (s.name == "send" || s.name == "recv") ? 1 : 0;
  CHECK(spans == 6);
  // A bad peer fails like a bad collective argument, on this rank only.
  CHECK_THROWS_AS(c.isend(out.data(), 1, DType::f32, n), CommError);
  CHECK(c.last_send_seq(next) == 3);
}

TEST_CASE("describe names a point-to-point message's peer and its number") {
  CollectiveFingerprint fp{CollectiveKind::send, 1024, DType::f32, -1, "", 1};
  CHECK(describe(fp, 3, "pp") == "send #3 (pp, to rank 1, 1024 f32)");
  fp = {CollectiveKind::recv, 7, DType::bf16, -1, "act 2", 0};
  CHECK(describe(fp, 4, "pp") == "recv #4 (pp, from rank 0, unit act 2, 7 bf16)");
  CHECK(collective_bytes(CollectiveKind::send, 7, DType::f64, 4) == 56);
  CHECK(collective_bytes(CollectiveKind::recv, 7, DType::bf16, 2) == 14);
  CHECK(bus_bandwidth_factor(CollectiveKind::send, 4) == 1.0);
  CollectiveKind k{};
  CHECK(parse_collective_kind("recv", k));
  CHECK(k == CollectiveKind::recv);
  CHECK(std::string(to_string(CollectiveKind::send)) == "send");
}
