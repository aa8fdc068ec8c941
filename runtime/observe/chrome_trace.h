// Chrome traces: one JSON file per rank in the Trace Event Format that
// Perfetto (ui.perfetto.dev) and chrome://tracing open, and the merge of
// those files into one timeline.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tracer.h"

// [Note: chrome trace layout]
// A per-rank file is {"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": {...}}:
//  - each TraceSpan is a complete event: {"ph": "X", "name", "cat",
//    "pid", "tid", "ts", "dur", "args"}; args carry "unit", "bytes" and
//    "seq" when the span has them;
//  - each TraceCounter is a counter event {"ph": "C", "name", "pid",
//    "ts", "args": {series: value, ...}} (one track per name, its series
//    stacked, e.g. the memory ledger's bytes per category);
//  - metadata events ("ph": "M") name the process "rank r" and each thread
//    used (to_string(TraceThread)), and fix their order (process_sort_index
//    r, thread_sort_index 100 * TraceThread value + lane).
// Ranks are processes and TraceThreads are threads, but both ids are
// shifted by one (pid = rank + 1, tid = TraceThread value + 1): Perfetto
// treats pid 0 / tid 0 as the kernel's swapper and its maintainers advise
// synthetic traces to start at 1 (google/perfetto#394). The names and the
// "rank" field of otherData carry the rank itself.
// Lanes: the format requires the "X" events of one thread to nest, and
// Perfetto drops those that partly overlap (google/perfetto#4280); but two
// collectives (or swap reads) in flight at once do. Such a span goes to the
// TraceThread's next lane, a thread of its own named "comm 2", "comm 3", ...
// with tid = TraceThread value + 1 + 4 * lane; spans that nest or follow
// each other stay in lane 0.
//
// Times: spans are steady-clock nanoseconds of their own process. A rank's
// clock is aligned to rank 0's by `offset_ns` (rank-0 time = local time +
// offset_ns, known to within +-bound_ns), and every rank subtracts the same
// origin (rank 0's start), so ts = (t + offset_ns - origin_ns) / 1000 and
// dur = (end - begin) / 1000, in microseconds as the format requires
// (fractional: nanosecond resolution is kept). otherData records "rank",
// "offset_ns", "bound_ns" and "origin_ns".
//
// A merged file holds every rank's events sorted by ts (metadata first) and
// otherData {"ranks": [{"rank", "offset_ns", "bound_ns", "file"}, ...],
// "max_bound_ns", "origin_ns"}: two ranks' events are ordered correctly on
// the common timeline when they are more than 2 * max_bound_ns apart.

namespace zeroshard {

/// This rank's clock relative to rank 0's: rank-0 time = local time +
/// offset_ns, with an error of at most +-bound_ns (both nanoseconds; zero
/// for rank 0 itself and for ranks sharing rank 0's host clock).
struct ClockAlignment {
  std::int64_t offset_ns = 0;
  std::int64_t bound_ns = 0;
};

/// The Chrome trace of one rank (see [Note: chrome trace layout]): `spans`
/// and `counters` as recorded by Tracer (steady-clock ns of this process),
/// shifted by `clock.offset_ns` and measured from `origin_ns` (rank 0's
/// start on rank 0's clock, the same on every rank). Spans whose end is
/// before their begin get dur 0. Pure function, thread-safe.
/// Throws InvariantError if rank < 0.
nlohmann::json chrome_trace(int rank, std::span<const TraceSpan> spans,
                            std::span<const TraceCounter> counters, ClockAlignment clock,
                            std::int64_t origin_ns);

/// Writes `trace` (compact JSON) to `path` atomically and durably: a
/// temporary file in the same directory, fsync, rename over `path`.
/// Throws IoError naming the path and errno. Thread-safe for distinct paths.
void write_chrome_trace(const std::string& path, const nlohmann::json& trace);

/// `chrome_trace` then `write_chrome_trace`: what a rank calls at the end
/// of a run with Tracer::take_all()'s spans and counters.
void write_chrome_trace(const std::string& path, int rank, std::span<const TraceSpan> spans,
                        std::span<const TraceCounter> counters, ClockAlignment clock,
                        std::int64_t origin_ns);

/// The conventional per-rank file name: "trace-rank<r>.json".
std::string chrome_trace_file_name(int rank);

/// The per-rank trace files in `dir` (names "trace-rank<digits>.json"),
/// sorted by rank number. Throws IoError if `dir` cannot be listed, Error
/// if it holds none.
std::vector<std::string> find_rank_traces(const std::string& dir);

/// Reads the per-rank files written by write_chrome_trace and merges them
/// into one timeline (see [Note: chrome trace layout]): events concatenated
/// and stably sorted by ts (metadata events first), each rank's clock
/// alignment kept in otherData with the largest bound. Throws IoError if a
/// file cannot be read and Error, naming the file, if it is not JSON, has
/// no "traceEvents" array or no integer otherData.rank, repeats a rank of
/// an earlier file (both named), or has another origin_ns than the first
/// (traces of different runs); Error if `paths` is empty.
nlohmann::json merge_chrome_traces(const std::vector<std::string>& paths);

}  // namespace zeroshard
