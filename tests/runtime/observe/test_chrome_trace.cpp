// Chrome traces (runtime/observe/chrome_trace.h): a rank's trace parses back with
// the expected events, pids/tids, microsecond times with the clock offset
// applied, args and counters; the atomic write; the merge of three rank
// files into one sorted timeline, and the errors naming a bad file.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/observe/chrome_trace.h"
#include "tests/support/scratch_files.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// A fresh scratch directory for one test case.
fs::path scratch(const char* name) {
  return zeroshard::testing::fresh_scratch_dir(std::string("chrome-trace-") + name);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

/// The events of `trace` with phase `ph`.
std::vector<json> events_of(const json& trace, const char* ph) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

std::vector<TraceSpan> sample_spans(std::int64_t t0) {
  return {
      {"forward", TraceThread::loop, "fc1", 0, t0 + 1'000, t0 + 251'500, -1},
      {"all_gather", TraceThread::comm, "fc2", 262144 * 4, t0 + 2'000, t0 + 12'000, 812},
      {"swap_read", TraceThread::io, "", 4096, t0 + 3'000, t0 + 2'000, -1},  // end before begin: dur 0
  };
}

}  // namespace

TEST_CASE("chrome_trace: events, ids, microseconds with the clock offset, args, counters, otherData") {
  const std::int64_t origin = 1'000'000'000;
  const std::int64_t t0 = origin + 5'000;  // this rank's local times
  const ClockAlignment clock{-2'000, 150};  // rank-0 time = local - 2 µs, +-150 ns
  const std::vector<TraceSpan> spans = sample_spans(t0);
  const std::vector<TraceCounter> counters = {
      {"memory", t0 + 500, {{"parameters", 1048576.0}, {"gradients", 524288.0}}}};
  const json trace = chrome_trace(2, spans, counters, clock, origin);

  CHECK(trace["displayTimeUnit"] == "ms");
  CHECK(trace["otherData"]["rank"] == 2);
  CHECK(trace["otherData"]["offset_ns"] == -2'000);
  CHECK(trace["otherData"]["bound_ns"] == 150);
  CHECK(trace["otherData"]["origin_ns"] == origin);
  // The text parses back to the same document.
  const json back = json::parse(trace.dump());
  CHECK(back == trace);

  const auto x = events_of(back, "X");
  REQUIRE(x.size() == 3);
  for (const json& e : x) CHECK(e["pid"] == 3);  // rank 2 -> pid 3 (pid 0 is special in Perfetto)
  CHECK(x[0]["name"] == "forward");
  CHECK(x[0]["tid"] == static_cast<int>(TraceThread::loop) + 1);
  CHECK(x[0]["cat"] == "loop");
  // (t0 + 1000 - 2000 - origin) ns = 4000 ns = 4 µs; 250500 ns = 250.5 µs.
  CHECK(x[0]["ts"].get<double>() == doctest::Approx(4.0));
  CHECK(x[0]["dur"].get<double>() == doctest::Approx(250.5));
  CHECK(x[0]["args"] == json{{"unit", "fc1"}});
  CHECK(x[1]["tid"] == static_cast<int>(TraceThread::comm) + 1);
  CHECK(x[1]["ts"].get<double>() == doctest::Approx(5.0));
  CHECK(x[1]["dur"].get<double>() == doctest::Approx(10.0));
  CHECK(x[1]["args"] == json{{"unit", "fc2"}, {"bytes", 262144 * 4}, {"seq", 812}});
  CHECK(x[2]["dur"].get<double>() == 0.0);
  CHECK(x[2]["args"] == json{{"bytes", 4096}});

  const auto c = events_of(back, "C");
  REQUIRE(c.size() == 1);
  CHECK(c[0]["name"] == "memory");
  CHECK(c[0]["pid"] == 3);
  CHECK(c[0]["ts"].get<double>() == doctest::Approx(3.5));
  CHECK(c[0]["args"]["parameters"].get<double>() == 1048576.0);
  CHECK(c[0]["args"]["gradients"].get<double>() == 524288.0);

  // Metadata: the process is "rank 2", sorted at 2; the threads used (loop,
  // comm, io, not engine) are named and sorted by their TraceThread value.
  std::map<std::string, std::vector<json>> meta;
  for (const json& e : events_of(back, "M")) meta[e["name"].get<std::string>()].push_back(e);
  REQUIRE(meta["process_name"].size() == 1);
  CHECK(meta["process_name"][0]["args"]["name"] == "rank 2");
  CHECK(meta["process_name"][0]["pid"] == 3);
  CHECK(meta["process_sort_index"][0]["args"]["sort_index"] == 2);
  std::map<int, std::string> thread_names;
  for (const json& e : meta["thread_name"]) thread_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  CHECK(thread_names == std::map<int, std::string>{{1, "loop"}, {3, "comm"}, {4, "io"}});
  CHECK(meta["thread_sort_index"].size() == 3);
}

TEST_CASE("chrome_trace: spans of one thread that partly overlap go to lanes of their own") {
  const int comm = static_cast<int>(TraceThread::comm) + 1;
  const int comm2 = comm + 4;  // lane 1
  const std::vector<TraceSpan> spans = {
      {"reduce_scatter", TraceThread::comm, "b1", 0, 0, 10'000, 1},
      {"reduce_scatter", TraceThread::comm, "b2", 0, 5'000, 15'000, 2},   // overlaps b1's end: lane 1
      {"inner", TraceThread::comm, "", 0, 2'000, 3'000, -1},            // nested in b1: lane 0
      {"all_gather", TraceThread::comm, "u1", 0, 20'000, 30'000, 3},      // after both: lane 0
      {"all_gather", TraceThread::comm, "u2", 0, 25'000, 40'000, 4},      // overlaps u1: lane 1
      {"all_gather", TraceThread::comm, "u3", 0, 26'000, 41'000, 5},      // overlaps both: lane 2
      {"forward", TraceThread::loop, "", 0, 5'000, 15'000, -1},
  };
  const json trace = chrome_trace(0, spans, {}, {}, 0);
  std::map<std::string, int> tid;
  for (const json& e : events_of(trace, "X")) tid[e["args"].value("unit", e["name"].get<std::string>())] = e["tid"];
  CHECK(tid["b1"] == comm);
  CHECK(tid["b2"] == comm2);
  CHECK(tid["inner"] == comm);
  CHECK(tid["u1"] == comm);
  CHECK(tid["u2"] == comm2);
  CHECK(tid["u3"] == comm + 8);
  CHECK(tid["forward"] == 1);
  std::map<int, std::string> names;
  for (const json& e : events_of(trace, "M")) {
    if (e["name"] == "thread_name") names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  CHECK(names == std::map<int, std::string>{{1, "loop"}, {comm, "comm"}, {comm2, "comm 2"}, {comm + 8, "comm 3"}});
}

TEST_CASE("chrome_trace: no spans or counters is still a valid trace; a negative rank is refused") {
  const json trace = chrome_trace(0, {}, {}, {}, 0);
  CHECK(trace["traceEvents"].size() == 2);  // process name and sort index
  CHECK(events_of(trace, "X").empty());
  CHECK_THROWS_AS(chrome_trace(-1, {}, {}, {}, 0), InvariantError);
}

TEST_CASE("write_chrome_trace: atomic replace, no temporary left; an unwritable path is named") {
  const fs::path dir = scratch("write");
  const fs::path path = dir / chrome_trace_file_name(1);
  CHECK(path.filename() == "trace-rank1.json");
  const auto spans = sample_spans(0);
  write_chrome_trace(path.string(), 1, spans, {}, {}, 0);
  write_chrome_trace(path.string(), 1, spans, {}, {}, 0);  // replaces
  CHECK(events_of(read_json(path), "X").size() == 3);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  CHECK(files == 1);
  const std::string bad = (dir / "no-such-dir" / "trace-rank0.json").string();
  const std::string msg = testing::error_message<IoError>([&] { write_chrome_trace(bad, json::object()); });
  CHECK(msg.find("no-such-dir") != std::string::npos);
  CHECK(msg.find("errno") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("merge_chrome_traces: three ranks become one timeline sorted by ts, clocks kept") {
  const fs::path dir = scratch("merge");
  const std::int64_t origin = 500'000;
  // Each rank's local clock runs ahead of rank 0's by r * 1 ms; the offsets
  // put the same instant at the same ts. Written out of rank order.
  for (int r : {2, 0, 1}) {
    const std::int64_t ahead = r * 1'000'000;
    std::vector<TraceSpan> spans;
    for (int i = 0; i < 4; ++i) {
      const std::int64_t begin = origin + ahead + i * 100'000 + r * 1'000;  // rank r enters r µs later
      spans.push_back({"all_gather", TraceThread::comm, "fc1", 64, begin, begin + 50'000, i});
    }
    const std::vector<TraceCounter> counters = {{"memory", origin + ahead, {{"parameters", 1.0 * r}}}};
    write_chrome_trace((dir / chrome_trace_file_name(r)).string(), r, spans, counters,
                       ClockAlignment{-ahead, 100 * (r + 1)}, origin);
  }
  const std::vector<std::string> paths = find_rank_traces(dir.string());
  REQUIRE(paths.size() == 3);
  CHECK(fs::path(paths[0]).filename() == "trace-rank0.json");
  CHECK(fs::path(paths[2]).filename() == "trace-rank2.json");

  const json merged = merge_chrome_traces(paths);
  const json& events = merged["traceEvents"];
  CHECK(events.size() == 3 * (2 + 2 + 4 + 1));  // process meta, comm thread meta, spans, counter
  bool seen_timed = false;
  double last = -1e300;
  for (const json& e : events) {
    if (e["ph"] == "M") {
      CHECK_FALSE(seen_timed);  // metadata first
      continue;
    }
    seen_timed = true;
    CHECK(e["ts"].get<double>() >= last);
    last = e["ts"].get<double>();
  }
  // The collective with seq 1 of every rank: ranks in arrival order, 1 µs apart.
  std::vector<std::pair<double, int>> seq1;
  for (const json& e : events) {
    if (e["ph"] == "X" && e["args"]["seq"] == 1) seq1.emplace_back(e["ts"].get<double>(), e["pid"].get<int>() - 1);
  }
  REQUIRE(seq1.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(seq1[static_cast<std::size_t>(r)].second == r);
    CHECK(seq1[static_cast<std::size_t>(r)].first == doctest::Approx(100.0 + r));
  }
  const json& other = merged["otherData"];
  CHECK(other["max_bound_ns"] == 300);
  CHECK(other["origin_ns"] == origin);
  REQUIRE(other["ranks"].size() == 3);
  CHECK(other["ranks"][1]["rank"] == 1);
  CHECK(other["ranks"][1]["offset_ns"] == -1'000'000);
  CHECK(other["ranks"][1]["bound_ns"] == 200);

  // Written and read back the same way.
  const fs::path out = dir / "merged.json";
  write_chrome_trace(out.string(), merged);
  CHECK(read_json(out) == merged);
  fs::remove_all(dir);
}

TEST_CASE("merge_chrome_traces: a bad file is named with what is wrong") {
  const fs::path dir = scratch("bad");
  const std::string good0 = (dir / "trace-rank0.json").string();
  const std::string good1 = (dir / "trace-rank1.json").string();
  write_chrome_trace(good0, 0, sample_spans(0), {}, {}, 0);
  write_chrome_trace(good1, 1, sample_spans(0), {}, {}, 0);
  auto merge_error = [&](const std::string& bad) {
    return testing::required_error_message<Error>([&] { merge_chrome_traces({good0, bad}); },
                                                  "merge_chrome_traces accepted a bad file");
  };
  auto contains = [](const std::string& msg, const std::string& part) {
    INFO(msg);
    CHECK(msg.find(part) != std::string::npos);
  };

  const std::string not_json = (dir / "not-json.json").string();
  write_text(not_json, "{\"traceEvents\": [");
  contains(merge_error(not_json), not_json);
  contains(merge_error(not_json), "not JSON");

  const std::string no_events = (dir / "no-events.json").string();
  write_text(no_events, R"({"otherData": {"rank": 3, "offset_ns": 0, "bound_ns": 0, "origin_ns": 0}})");
  contains(merge_error(no_events), no_events);
  contains(merge_error(no_events), "traceEvents");

  const std::string not_ours = (dir / "not-ours.json").string();
  write_text(not_ours, R"({"traceEvents": []})");
  contains(merge_error(not_ours), "otherData");

  const std::string array = (dir / "array.json").string();
  write_text(array, "[]");
  contains(merge_error(array), "not an object");

  const std::string deep = (dir / "deep.json").string();
  write_text(deep, std::string(100000, '[') + std::string(100000, ']'));
  contains(merge_error(deep), "deeper");

  const std::string dup = (dir / "dup.json").string();
  write_chrome_trace(dup, 0, {}, {}, {}, 0);
  const std::string dup_msg = merge_error(dup);
  contains(dup_msg, dup);
  contains(dup_msg, "rank 0 again");
  contains(dup_msg, good0);

  const std::string other_run = (dir / "other-run.json").string();
  write_chrome_trace(other_run, 2, {}, {}, {}, 12345);
  contains(merge_error(other_run), "origin_ns");

  const std::string missing = (dir / "missing.json").string();
  const std::string missing_msg = testing::required_error_message<IoError>(
      [&] { merge_chrome_traces({good0, missing}); }, "a missing file was accepted");
  contains(missing_msg, missing);

  CHECK_THROWS_AS(merge_chrome_traces({}), Error);
  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  CHECK_THROWS_AS(find_rank_traces(empty.string()), Error);
  CHECK_THROWS_AS(find_rank_traces((dir / "absent").string()), IoError);
  CHECK(merge_chrome_traces({good0, good1})["otherData"]["ranks"].size() == 2);
  fs::remove_all(dir);
}

TEST_CASE("chrome_trace: a Tracer's own spans and counters, end to end") {
  Tracer tracer;
  tracer.set_spans(true);
  if (!tracer.spans_on()) return;  // built with -Dtracing=disabled: nothing is kept
  const std::int64_t origin = Tracer::now_ns();
  {
    TraceScope outer(&tracer, "forward", TraceThread::loop, TimeCategory::compute, "fc1");
    TraceScope inner(&tracer, "wait_all_gather", TraceThread::engine, TimeCategory::comm_wait, "fc2", 1024);
  }
  tracer.add_counter({"memory", Tracer::now_ns(), {{"parameters", 4096.0}}});
  const auto [spans, counters] = tracer.take_all();
  const json trace = chrome_trace(0, spans, counters, {}, origin);
  const auto x = events_of(trace, "X");
  REQUIRE(x.size() == 2);
  std::map<std::string, json> by_name;
  for (const json& e : x) by_name[e["name"].get<std::string>()] = e;
  const json& fwd = by_name["forward"];
  const json& wait = by_name["wait_all_gather"];
  CHECK(fwd["pid"] == 1);
  CHECK(fwd["tid"] == 1);
  CHECK(wait["tid"] == 2);
  CHECK(wait["args"]["bytes"] == 1024);
  // The inner span lies inside the outer one, both after the origin.
  CHECK(fwd["ts"].get<double>() >= 0.0);
  CHECK(wait["ts"].get<double>() >= fwd["ts"].get<double>());
  CHECK(wait["ts"].get<double>() + wait["dur"].get<double>() <=
        fwd["ts"].get<double>() + fwd["dur"].get<double>() + 1e-3);
  CHECK(events_of(trace, "C").size() == 1);
}
