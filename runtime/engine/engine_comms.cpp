// EngineComms: see runtime/engine/engine_comms.h.
#include "runtime/engine/engine_comms.h"

#include <iostream>

#include "comm/mesh.h"
#include "core/error.h"

namespace zeroshard {

namespace {

// comms_logger's log for `config` (null when off); verbose lines go to
// stdout on rank 0 only.
std::unique_ptr<CommsLog> make_comms_log(const ObserveConfig& config, int rank) {
  const CommsLoggerConfig& c = config.comms_logger;
  if (!c.enabled) return nullptr;
  const CommsLogOptions o{.enabled = true, .verbose = c.verbose, .prof_all = c.prof_all, .prof_ops = c.prof_ops,
                          .debug = c.debug};
  return std::make_unique<CommsLog>(o, rank == 0 ? &std::cout : nullptr);
}

}  // namespace

EngineComms::EngineComms(Communicator& device, Communicator& host, const Mesh* mesh, const ObserveConfig& observe,
                         Tracer* tracer)
    : log_(make_comms_log(observe, device.rank())) {
  const TracedOptions o{.tracer = observe.records() ? tracer : nullptr,
                        .comms_log = log_.get(),
                        .timeout_s = observe.collective_timeout_s,
                        .recording = observe.records(),
                        .check_fingerprints = observe.collective_check};
  dp_ = std::make_unique<TracedCommunicator>(device, "dp", o);
  if (&host != &device) host_ = std::make_unique<TracedCommunicator>(host, "dp.host", o);
  if (mesh != nullptr) {
    ZS_CHECK(&device == &mesh->dp_group(), "EngineComms: on a mesh the device communicator is its dp_group()");
    world_ = std::make_unique<TracedCommunicator>(mesh->world(), "world", o);
    tp_ = std::make_unique<TracedCommunicator>(mesh->tp_group(), "tp", o);
    pp_ = std::make_unique<TracedCommunicator>(mesh->pp_group(), "pp", o);
  }
}

double EngineComms::world_min(double v) {
  ZS_CHECK(world_ != nullptr, "world_min() without a mesh");
  world_->all_reduce(&v, 1, DType::f64, ReduceOp::min);
  return v;
}

Communicator& EngineComms::raw_world() {
  if (world_) return world_->inner();
  return host_ ? host_->inner() : dp_->inner();
}

std::vector<TracedCommunicator*> EngineComms::traced() const {
  std::vector<TracedCommunicator*> out;
  for (TracedCommunicator* t : {dp_.get(), host_.get(), world_.get(), tp_.get(), pp_.get()}) {
    if (t != nullptr) out.push_back(t);
  }
  return out;
}

void EngineComms::forget_records() {
  for (TracedCommunicator* t : traced()) t->take_records();
}

void EngineComms::take_step_records(std::vector<Interval>& intervals, std::vector<std::int64_t>& arrivals) {
  for (TracedCommunicator* t : traced()) {
    const bool dp = t == dp_.get();
    const bool pp = t == pp_.get();
    for (const CollectiveRecord& r : t->take_records()) {
      if (pp) continue;
      intervals.emplace_back(r.issue_ns, r.end_ns);
      if (dp) arrivals.push_back(r.issue_ns);
    }
  }
}

}  // namespace zeroshard
