#include "runtime/observe/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

#include "core/error.h"
#include "core/durable_file.h"
#include "runtime/config/json_text.h"

namespace zeroshard {
namespace {

constexpr std::size_t kThreads = 4;  // TraceThread values
constexpr int kMaxTraceDepth = 16;   // a trace nests 4 levels; more is not ours

/// Microseconds of the common timeline for a local steady-clock time.
double to_us(std::int64_t t_ns, ClockAlignment clock, std::int64_t origin_ns) {
  return static_cast<double>(t_ns + clock.offset_ns - origin_ns) / 1000.0;
}

int pid_of(int rank) { return rank + 1; }
/// Lane 0 of thread t is tid t + 1; further lanes follow all lane-0 ids.
int tid_of(std::size_t thread, std::size_t lane) { return static_cast<int>(thread + 1 + lane * kThreads); }
std::size_t thread_index(TraceThread t) { return static_cast<std::size_t>(t) % kThreads; }

/// The lane of each span: within one thread's lane, spans nest or are
/// disjoint, as the format requires of "X" events on one thread; a span
/// that partly overlaps one of a lane (two collectives in flight) goes to
/// the first lane where it does not. Greedy over spans sorted by begin
/// (longest first on ties), each lane keeping the ends of its open spans.
std::vector<std::size_t> assign_lanes(std::span<const TraceSpan> spans) {
  auto end_of = [&](std::size_t i) { return std::max(spans[i].begin_ns, spans[i].end_ns); };
  std::vector<std::size_t> order(spans.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (spans[a].begin_ns != spans[b].begin_ns) return spans[a].begin_ns < spans[b].begin_ns;
    return end_of(a) > end_of(b);
  });
  std::array<std::vector<std::vector<std::int64_t>>, kThreads> open;  // [thread][lane] open ends
  std::vector<std::size_t> lane(spans.size(), 0);
  for (const std::size_t i : order) {
    auto& lanes = open[thread_index(spans[i].thread)];
    const std::int64_t begin = spans[i].begin_ns, end = end_of(i);
    std::size_t l = 0;
    for (;; ++l) {
      if (l == lanes.size()) lanes.emplace_back();
      std::vector<std::int64_t>& stack = lanes[l];
      while (!stack.empty() && stack.back() <= begin) stack.pop_back();
      if (stack.empty() || stack.back() >= end) break;
    }
    lanes[l].push_back(end);
    lane[i] = l;
  }
  return lane;
}

nlohmann::json metadata(const char* name, int pid, int tid, nlohmann::json args) {
  nlohmann::json e = {{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

/// Error for a bad trace file.
[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error(fmt::format("chrome trace {}: {}", path, what));
}

/// One per-rank file read and checked.
struct RankTrace {
  std::string path;
  int rank = 0;
  std::int64_t offset_ns = 0;
  std::int64_t bound_ns = 0;
  std::int64_t origin_ns = 0;
  nlohmann::json events;
};

std::int64_t int_field(const nlohmann::json& other, const char* key, const std::string& path) {
  const auto it = other.find(key);
  if (it == other.end() || !it->is_number_integer()) {
    bad_file(path, fmt::format("otherData.{} is missing or not an integer: not a zeroshard per-rank trace "
                               "(write_chrome_trace writes one)", key));
  }
  return it->get<std::int64_t>();
}

RankTrace read_rank_trace(const std::string& path) {
  const std::string text = read_text_file(path);
  if (const auto at = json_too_deep_at(text, kMaxTraceDepth)) {
    bad_file(path, fmt::format("not a trace: JSON nested deeper than {} levels at byte {}", kMaxTraceDepth, *at));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    const JsonTextError err = describe_json_error(text, e);
    bad_file(path, fmt::format("not JSON: {} at byte {}", err.reason, err.byte));
  }
  if (!j.is_object()) bad_file(path, "not a trace: the top-level JSON value is not an object");
  const auto events = j.find("traceEvents");
  if (events == j.end() || !events->is_array()) bad_file(path, "no \"traceEvents\" array");
  const auto other = j.find("otherData");
  if (other == j.end() || !other->is_object()) {
    bad_file(path, "no \"otherData\" object: not a zeroshard per-rank trace (write_chrome_trace writes one)");
  }
  RankTrace r;
  r.path = path;
  const std::int64_t rank = int_field(*other, "rank", path);
  if (rank < 0 || rank > (1 << 24)) bad_file(path, fmt::format("otherData.rank {} is out of range", rank));
  r.rank = static_cast<int>(rank);
  r.offset_ns = int_field(*other, "offset_ns", path);
  r.bound_ns = int_field(*other, "bound_ns", path);
  r.origin_ns = int_field(*other, "origin_ns", path);
  for (const nlohmann::json& e : *events) {
    if (!e.is_object()) bad_file(path, "an element of \"traceEvents\" is not an object");
    const auto ts = e.find("ts");
    if (ts != e.end() && !ts->is_number()) bad_file(path, "an event's \"ts\" is not a number");
  }
  r.events = std::move(*events);
  return r;
}

/// Sort key: metadata events (and any without ts) first, then by ts.
double sort_ts(const nlohmann::json& e) {
  const auto ph = e.find("ph");
  if (ph != e.end() && ph->is_string() && ph->get_ref<const std::string&>() == "M") return -1e300;
  const auto ts = e.find("ts");
  return ts == e.end() ? -1e300 : ts->get<double>();
}

}  // namespace

nlohmann::json chrome_trace(int rank, std::span<const TraceSpan> spans, std::span<const TraceCounter> counters,
                            ClockAlignment clock, std::int64_t origin_ns) {
  ZS_CHECK(rank >= 0, "chrome_trace: rank {} is negative", rank);
  const int pid = pid_of(rank);
  nlohmann::json events = nlohmann::json::array();
  events.push_back(metadata("process_name", pid, -1, {{"name", fmt::format("rank {}", rank)}}));
  events.push_back(metadata("process_sort_index", pid, -1, {{"sort_index", rank}}));

  const std::vector<std::size_t> lanes = assign_lanes(spans);
  std::array<std::size_t, kThreads> lanes_used{};  // per thread: highest lane + 1
  for (std::size_t i = 0; i < spans.size(); ++i) {
    std::size_t& used = lanes_used[thread_index(spans[i].thread)];
    used = std::max(used, lanes[i] + 1);
  }
  for (std::size_t t = 0; t < kThreads; ++t) {
    for (std::size_t l = 0; l < lanes_used[t]; ++l) {
      const char* name = to_string(static_cast<TraceThread>(t));
      const int tid = tid_of(t, l);
      events.push_back(metadata("thread_name", pid, tid, {{"name", l == 0 ? name : fmt::format("{} {}", name, l + 1)}}));
      events.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", static_cast<int>(t * 100 + l)}}));
    }
  }

  for (std::size_t i = 0; i < spans.size(); ++i) {
    const TraceSpan& s = spans[i];
    nlohmann::json args = nlohmann::json::object();
    if (!s.unit.empty()) args["unit"] = s.unit;
    if (s.bytes != 0) args["bytes"] = s.bytes;
    if (s.seq >= 0) args["seq"] = s.seq;
    const std::int64_t dur_ns = std::max<std::int64_t>(0, s.end_ns - s.begin_ns);
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"cat", to_string(s.thread)},
                      {"pid", pid},
                      {"tid", tid_of(thread_index(s.thread), lanes[i])},
                      {"ts", to_us(s.begin_ns, clock, origin_ns)},
                      {"dur", static_cast<double>(dur_ns) / 1000.0},
                      {"args", std::move(args)}});
  }
  for (const TraceCounter& c : counters) {
    nlohmann::json args = nlohmann::json::object();
    for (const auto& [series, value] : c.values) args[series] = value;
    events.push_back({{"ph", "C"},
                      {"name", c.name},
                      {"pid", pid},
                      {"ts", to_us(c.ts_ns, clock, origin_ns)},
                      {"args", std::move(args)}});
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"rank", rank},
            {"offset_ns", clock.offset_ns},
            {"bound_ns", clock.bound_ns},
            {"origin_ns", origin_ns},
            {"producer", "zeroshard"}}}};
}

void write_chrome_trace(const std::string& path, const nlohmann::json& trace) {
  write_file_atomic(path, trace.dump());
}

void write_chrome_trace(const std::string& path, int rank, std::span<const TraceSpan> spans,
                        std::span<const TraceCounter> counters, ClockAlignment clock, std::int64_t origin_ns) {
  write_chrome_trace(path, chrome_trace(rank, spans, counters, clock, origin_ns));
}

std::string chrome_trace_file_name(int rank) { return fmt::format("trace-rank{}.json", rank); }

std::vector<std::string> find_rank_traces(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw IoError(fmt::format("listing {}: {} (errno {})", dir, ec.message(), ec.value()));
  std::vector<std::pair<long, std::string>> found;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw IoError(fmt::format("listing {}: {} (errno {})", dir, ec.message(), ec.value()));
    const std::string name = it->path().filename().string();
    constexpr std::string_view prefix = "trace-rank", suffix = ".json";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      continue;
    }
    found.emplace_back(std::strtol(digits.c_str(), nullptr, 10), it->path().string());
  }
  if (found.empty()) throw Error(fmt::format("{} holds no trace-rank<r>.json files", dir));
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [rank, path] : found) paths.push_back(std::move(path));
  return paths;
}

nlohmann::json merge_chrome_traces(const std::vector<std::string>& paths) {
  if (paths.empty()) throw Error("merge_chrome_traces: no trace files given");
  std::vector<RankTrace> traces;
  std::map<int, std::string> file_of_rank;
  for (const std::string& path : paths) {
    RankTrace t = read_rank_trace(path);
    if (const auto [it, fresh] = file_of_rank.emplace(t.rank, path); !fresh) {
      bad_file(path, fmt::format("rank {} again (already read from {})", t.rank, it->second));
    }
    if (!traces.empty() && t.origin_ns != traces.front().origin_ns) {
      bad_file(path, fmt::format("origin_ns {} differs from {}'s {}: traces of different runs?", t.origin_ns,
                                 traces.front().path, traces.front().origin_ns));
    }
    traces.push_back(std::move(t));
  }
  std::size_t total = 0;
  for (const RankTrace& t : traces) total += t.events.size();
  std::vector<nlohmann::json> all;
  all.reserve(total);
  nlohmann::json ranks = nlohmann::json::array();
  std::int64_t max_bound = 0;
  for (RankTrace& t : traces) {
    for (nlohmann::json& e : t.events) all.push_back(std::move(e));
    ranks.push_back({{"rank", t.rank}, {"offset_ns", t.offset_ns}, {"bound_ns", t.bound_ns}, {"file", t.path}});
    max_bound = std::max(max_bound, t.bound_ns < 0 ? -t.bound_ns : t.bound_ns);
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const nlohmann::json& a, const nlohmann::json& b) { return sort_ts(a) < sort_ts(b); });
  return {{"traceEvents", std::move(all)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"ranks", std::move(ranks)},
            {"max_bound_ns", max_bound},
            {"origin_ns", traces.front().origin_ns},
            {"producer", "zeroshard"}}}};
}

}  // namespace zeroshard
