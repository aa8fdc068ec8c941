// Engine: the observability calls (runtime/config/observe_config.h): the
// observer's start, the end of an observed step (breakdown, straggler view,
// memory counters, a parameter-server worker's push, pull wait and
// staleness), the run report and the Chrome traces. The traced
// communicators are EngineComms' (runtime/engine/engine_comms.h).
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "comm/traced/clock_sync.h"
#include "core/error.h"
#include "runtime/observe/chrome_trace.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

void start_observer(EngineState& s) {
  if (!s.observer->gathering()) return;
  // World rank 0's clock is the common one; its start is the trace's origin.
  Communicator& world = s.comms.raw_world();
  const ClockOffset c = estimate_clock_offset(world);
  // A double holds steady-clock nanoseconds exactly for 104 days of uptime
  // and to a few nanoseconds beyond: plenty for a trace's origin.
  double origin = static_cast<double>(Tracer::now_ns());
  world.broadcast(&origin, 1, DType::f64, 0);
  s.observer->start(world, c.offset_ns, c.bound_ns, static_cast<std::int64_t>(origin));
  // The first step starts now: forget finalize()'s collectives and time.
  s.comms.forget_records();
  s.observer->tracer().take_step(Tracer::now_ns());
}

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
  s.comms.take_step_records(intervals, arrivals);
  if (const ParameterServerClient* client = s.ps_client.get()) {
    const ParameterServerClientStats& st = client->stats();
    s.observer->note_parameter_server(st.push_s, st.wait_s, client->pushed() - client->version());
  }
  s.observer->end_step(s.progress.boundary_steps, intervals, arrivals, std::cout);
}

nlohmann::json Engine::observe_report() const {
  nlohmann::json j = s_->observer->report();
  nlohmann::json rows = nlohmann::json::array();
  if (const CommsLog* log = s_->comms.log()) {
    for (const CommsLogRow& r : log->rows()) {
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
  j["comms_cross_host_bytes"] = s_->comms.log() != nullptr ? s_->comms.log()->cross_host_bytes() : 0;
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
  const CommsLog* log = s_->comms.log();
  return log != nullptr ? log->summary() : std::string("comms_logger is off");
}

const StepFigures& Engine::last_step_figures() const { return s_->observer->last_figures(); }

void open_monitor(EngineState& s) {
  const CsvMonitorConfig& c = s.config.observe.csv_monitor;
  if (!c.enabled) return;
  Communicator& world = s.comms.raw_world();
  run_agreed(world, [&] {
    if (world.rank() == 0) s.monitor = std::make_unique<CsvMonitor>(c);
  });
}

void write_monitor_step(EngineState& s, const StepResult& r) {
  const std::int64_t per_micro = s.config.train_micro_batch_size_per_gpu * s.world();
  MonitorStep m;
  m.samples = s.progress.micro_steps * per_micro;
  m.step_samples = s.config.gradient_accumulation_steps * per_micro;
  // The rate this step used: a skipped step does not advance the schedule.
  const std::int64_t applied = s.progress.optimizer_steps;
  m.lr = s.optimizer.lr_at(0, r.applied ? applied - 1 : applied);
  m.grad_norm = r.grad_norm;
  if (s.config.compute_dtype == DType::f16) m.loss_scale = r.loss_scale;
  m.skipped_steps = s.progress.scaler.state().overflows;
  s.monitor->write(m);
}

void Engine::report_loss(double loss) {
  if (s_->monitor) s_->monitor->add_loss(loss);
}

}  // namespace zeroshard
