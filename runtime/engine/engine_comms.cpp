// EngineComms: see runtime/engine/engine_comms.h.
#include "runtime/engine/engine_comms.h"

#include <iostream>

#include <fmt/format.h>

#include "comm/mesh.h"
#include "core/error.h"

namespace zeroshard {

namespace {

// comms_logger's log for `config` (null when off); verbose lines go to
// stdout on rank 0 only.
std::unique_ptr<CommsLog> make_comms_log(const ObserveConfig& config, int rank) {
  if (!config.comms_logger.enabled) return nullptr;
  return std::make_unique<CommsLog>(config.comms_logger, rank == 0 ? &std::cout : nullptr);
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

std::string EngineComms::make_zeropp_groups(const ZeroppConfig& z, int stage, const std::string& source) {
  const int world = dp_->world_size(), rank = dp_->rank();
  const bool hpz = stage == 3 && z.hpz();
  const bool qgz = stage >= 2 && z.quantized_gradients;
  if (!hpz && !qgz) return "";
  for (const auto& [key, size] : {std::pair{"zero_optimization.zero_hpz_partition_size", hpz ? z.hpz_partition_size : 1},
                                  std::pair{"zeroshard.zeropp.ranks_per_node", qgz ? z.ranks_per_node : 0}}) {
    if (size > 0 && (size > world || world % size != 0)) {
      throw ConfigError(fmt::format("{}: \"{}\" = {} does not divide the data-parallel world size {}", source, key,
                                    size, world));
    }
  }
  const int per_node = static_cast<int>(z.ranks_per_node);
  nodes_ = split_by_node(*dp_, per_node > 0 ? fmt::format("zeropp-node-{}", rank / per_node) : this_host_id());
  if (!hpz) return "";
  const int k = static_cast<int>(z.hpz_partition_size);
  hpz_ = dp_->split(rank / k, rank);
  const std::vector<int>& node = nodes_.node_of_rank;
  bool inside = true;
  for (int r = 0; r < world; ++r) {
    inside = inside && node[static_cast<std::size_t>(r)] == node[static_cast<std::size_t>(r / k * k)];
  }
  return fmt::format("hpZ: secondary shards over groups of {} ranks, {}", k,
                     inside ? "each inside a node" : "spanning nodes (their all-gathers cross hosts)");
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
