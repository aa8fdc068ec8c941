// Engine: the observability calls (runtime/config/observe_config.h): traced
// communicators, the end of an observed step (breakdown, straggler view,
// memory counters), the run report and the Chrome traces.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "comm/clock_sync.h"
#include "core/error.h"
#include "runtime/observe/chrome_trace.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

std::unique_ptr<CommsLog> make_comms_log(const ObserveConfig& config, int rank) {
  const CommsLoggerConfig& c = config.comms_logger;
  if (!c.enabled) return nullptr;
  const CommsLogOptions o{.enabled = true, .verbose = c.verbose, .prof_all = c.prof_all, .prof_ops = c.prof_ops,
                          .debug = c.debug};
  return std::make_unique<CommsLog>(o, rank == 0 ? &std::cout : nullptr);
}

TracedOptions EngineState::traced_options() const {
  const ObserveConfig& o = config.observe;
  return TracedOptions{.tracer = o.records() ? &observer->tracer() : nullptr,
                       .comms_log = comms_log.get(),
                       .timeout_s = o.collective_timeout_s,
                       .recording = o.records(),
                       .check_fingerprints = o.collective_check};
}

std::vector<TracedCommunicator*> EngineState::traced_all() const {
  std::vector<TracedCommunicator*> out;
  for (TracedCommunicator* t : {traced_comm.get(), traced_host.get(), traced_world.get(), traced_tp.get(), traced_pp.get()}) {
    if (t != nullptr) out.push_back(t);
  }
  return out;
}

Communicator& raw_world(const EngineState& s) {
  if (s.traced_world) return s.traced_world->inner();
  return s.traced_host ? s.traced_host->inner() : s.traced_comm->inner();
}

void start_observer(EngineState& s) {
  if (!s.observer->gathering()) return;
  // World rank 0's clock is the common one; its start is the trace's origin.
  Communicator& world = raw_world(s);
  const ClockOffset c = estimate_clock_offset(world);
  // A double holds steady-clock nanoseconds exactly for 104 days of uptime
  // and to a few nanoseconds beyond: plenty for a trace's origin.
  double origin = static_cast<double>(Tracer::now_ns());
  world.broadcast(&origin, 1, DType::f64, 0);
  s.observer->start(world, c.offset_ns, c.bound_ns, static_cast<std::int64_t>(origin));
  // The first step starts now: forget finalize()'s collectives and time.
  for (TracedCommunicator* t : s.traced_all()) t->take_records();
  s.observer->tracer().take_step(Tracer::now_ns());
}

namespace {

// This step's collectives of every traced communicator as [issue,
// completion) intervals, and the issue times of the data-parallel ones.
// The pipeline group's sends and receives are left out of the intervals: a
// receive posted ahead is "in flight" while the previous stage computes, so
// counting it would report that wait as hidden communication. Their waits
// still count as comm_wait.
void collect_step_collectives(EngineState& s, std::vector<Interval>& intervals,
                              std::vector<std::int64_t>& arrivals) {
  for (TracedCommunicator* t : s.traced_all()) {
    const bool dp = t == s.traced_comm.get();
    const bool pp = t == s.traced_pp.get();
    for (const CollectiveRecord& r : t->take_records()) {
      if (pp) continue;
      intervals.emplace_back(r.issue_ns, r.end_ns);
      if (dp) arrivals.push_back(r.issue_ns);
    }
  }
}

}  // namespace

void end_observed_step(EngineState& s) {
  Tracer& tracer = s.observer->tracer();
  if (tracer.spans_on()) {
    // The ledger's totals by category, as a counter track.
    TraceCounter c{"memory (MiB)", Tracer::now_ns(), {}};
    for (int k = 0; k < static_cast<int>(MemCategory::count); ++k) {
      const auto cat = static_cast<MemCategory>(k);
      c.values.emplace_back(std::string(mem_category_name(cat)),
                            static_cast<double>(s.ledger.current(cat)) / (1024.0 * 1024.0));
    }
    tracer.add_counter(std::move(c));
  }
  std::vector<Interval> intervals;
  std::vector<std::int64_t> arrivals;
  collect_step_collectives(s, intervals, arrivals);
  s.observer->end_step(s.boundary_steps, intervals, arrivals, std::cout);
}

nlohmann::json Engine::observe_report() const {
  nlohmann::json j = s_->observer->report();
  nlohmann::json rows = nlohmann::json::array();
  if (s_->comms_log) {
    for (const CommsLogRow& r : s_->comms_log->rows()) {
      rows.push_back({{"kind", to_string(r.kind)},
                      {"message_bytes", r.message_bytes},
                      {"world_size", r.world_size},
                      {"count", r.count},
                      {"total_bytes", r.total_bytes},
                      {"cross_host_bytes", r.cross_host_bytes},
                      {"total_ms", r.total_ms},
                      {"mean_ms", r.mean_ms},
                      {"algbw_gbps", r.algbw_gbps},
                      {"busbw_gbps", r.busbw_gbps}});
    }
  }
  j["comms"] = rows;
  j["comms_cross_host_bytes"] = s_->comms_log ? s_->comms_log->cross_host_bytes() : 0;
  return j;
}

std::string Engine::write_trace() {
  EngineState& s = *s_;
  StepObserver& o = *s.observer;
  if (!o.config().trace) return "";
  ZS_CHECK(o.gather_comm() != nullptr, "write_trace() before finalize()");
  Communicator& world = *o.gather_comm();
  const std::filesystem::path dir = o.config().trace_output_path;
  const std::string mine = (dir / chrome_trace_file_name(world.rank())).string();
  const auto kept = o.tracer().take_all();  // (spans, counters); not a structured binding: the lambda uses them
  const std::vector<TraceSpan>& spans = kept.first;
  const std::vector<TraceCounter>& counters = kept.second;
  run_agreed(world, [&] {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError(fmt::format("{}: cannot create the trace directory: {}", dir.string(), ec.message()));
    write_chrome_trace(mine, world.rank(), spans, counters, ClockAlignment{o.clock_offset_ns(), o.clock_bound_ns()},
                       o.clock_origin_ns());
  });
  const std::string merged = (dir / "trace.json").string();
  run_agreed(world, [&] {
    if (world.rank() != 0) return;
    std::vector<std::string> paths;
    for (int r = 0; r < world.world_size(); ++r) paths.push_back((dir / chrome_trace_file_name(r)).string());
    write_chrome_trace(merged, merge_chrome_traces(paths));
  });
  return world.rank() == 0 ? merged : mine;
}

std::string Engine::comms_summary() const {
  return s_->comms_log ? s_->comms_log->summary() : std::string("comms_logger is off");
}

const StepFigures& Engine::last_step_figures() const { return s_->observer->last_figures(); }

}  // namespace zeroshard
