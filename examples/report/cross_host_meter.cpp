// CrossHostMeter; see examples/report/cross_host_meter.h.
#include "examples/report/cross_host_meter.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "comm/node_groups.h"
#include "runtime/plan/cost_model.h"

namespace zeroshard::examples {

CrossHostMeter::CrossHostMeter(const Engine& engine, Communicator& dp) : engine_(engine) {
  active_ = engine.config().observe.comms_logger.enabled;
  if (!active_) return;
  // Hosts of equal size, ranks placed host by host: cross_host_traffic's layout.
  const NodeGroups g = split_by_node(dp);
  const int n = dp.world_size(), per = n / g.num_nodes;
  dp_size_ = n;
  bool blocks = per * g.num_nodes == n;
  for (int r = 0; r < n && blocks; ++r) blocks = g.node_of_rank[static_cast<std::size_t>(r)] == r / per;
  ranks_per_host_ = blocks ? per : 0;
}

std::uint64_t CrossHostMeter::log_total() const {
  return engine_.observe_report().value("comms_cross_host_bytes", std::uint64_t{0});
}

std::vector<std::pair<std::int64_t, std::int64_t>> CrossHostMeter::gathers() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (UnitId u = 0; u < static_cast<UnitId>(engine_.layout().units().size()); ++u) {
    out.push_back(engine_.unit_all_gathers(u));
  }
  return out;
}

void CrossHostMeter::before_step() {
  if (!active_) return;
  before_ = log_total();
  gathers_before_ = gathers();
}

void CrossHostMeter::after_step() {
  if (!active_ || ++steps_ == 1) return;
  measured_ += log_total() - before_;
  const auto now = gathers();
  world_gathers_.resize(now.size(), 0);
  group_gathers_.resize(now.size(), 0);
  for (std::size_t u = 0; u < now.size(); ++u) {
    const std::int64_t all = now[u].first - gathers_before_[u].first;
    const std::int64_t group = now[u].second - gathers_before_[u].second;
    world_gathers_[u] += all - group;
    group_gathers_[u] += group;
  }
}

double CrossHostMeter::computed_total() const {
  const FlatLayout& l = engine_.layout();
  const EngineConfig& c = engine_.config();
  const CrossHostTraffic t = cross_host_traffic(l, c, ranks_per_host_);
  const auto measured_steps = static_cast<double>(steps_ - 1);
  // Stage 3: the gathers the engine counted, each of its unit's bytes (the
  // loop decides how often a unit is gathered); the rest per step.
  double params = measured_steps * static_cast<double>(t.parameter_gathers);
  if (c.zero.stage == 3) {
    params = 0;
    for (std::size_t u = 0; u < world_gathers_.size(); ++u) {
      params += static_cast<double>(world_gathers_[u]) *
                    static_cast<double>(cross_host_gather_bytes(l, c, ranks_per_host_, static_cast<UnitId>(u), false)) +
                static_cast<double>(group_gathers_[u]) *
                    static_cast<double>(cross_host_gather_bytes(l, c, ranks_per_host_, static_cast<UnitId>(u), true));
    }
  }
  return params + measured_steps * static_cast<double>(t.gradient_reduction + t.norm);
}

nlohmann::json CrossHostMeter::figures(Communicator& world) {
  double sum = static_cast<double>(measured_);  // exact below 2^53 bytes
  world.all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  nlohmann::json j;
  j["steps"] = steps_;
  j["ranks_per_host"] = ranks_per_host_;
  j["measured_per_step"] = active_ && steps_ > 1 ? sum / static_cast<double>(steps_ - 1) : -1.0;
  // The computed count is one data-parallel group's: comparable only when
  // that group is the world (no mesh).
  j["computed_per_step"] = active_ && steps_ > 1 && ranks_per_host_ > 0 && dp_size_ == world.world_size()
                               ? computed_total() / static_cast<double>(steps_ - 1)
                               : -1.0;
  return j;
}

std::string CrossHostMeter::line(const nlohmann::json& f) {
  if (f.value("measured_per_step", -1.0) < 0) return "";
  return fmt::format("cross-host bytes per step: measured {:.0f} (comms log, steps 2-{}, all ranks), computed {} "
                     "(from the sizes, hosts of {} ranks)\n",
                     f["measured_per_step"].get<double>(), f["steps"].get<std::int64_t>(),
                     f["computed_per_step"].get<double>() < 0
                         ? std::string("n/a")
                         : fmt::format("{:.0f}", f["computed_per_step"].get<double>()),
                     f["ranks_per_host"].get<int>());
}

}  // namespace zeroshard::examples
