// CrossHostMeter; see examples/report/cross_host_meter.h.
#include "examples/report/cross_host_meter.h"

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

void CrossHostMeter::before_step() {
  if (active_) before_ = log_total();
}

void CrossHostMeter::after_step() {
  if (!active_) return;
  if (++steps_ > 1) measured_ += log_total() - before_;
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
  j["computed_per_step"] =
      active_ && ranks_per_host_ > 0 && dp_size_ == world.world_size()
          ? static_cast<double>(cross_host_traffic(engine_.layout(), engine_.config(), ranks_per_host_).total())
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
