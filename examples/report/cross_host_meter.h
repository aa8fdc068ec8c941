// The bytes a training step sends between hosts, as the examples report
// them: the comms log's count (comm/traced/comms_log.h: each rank's bytes to
// other hosts, Engine::observe_report's "comms_cross_host_bytes") over the
// steps after the first, summed over the ranks, beside the count computed
// from the sizes (runtime/plan/cost_model.h): cross_host_traffic's
// gradient reduction and norm per step and, at stage 3, each all-gather
// the engine counted (Engine::unit_all_gathers: how often the loop's
// unshards gather each unit, over the world or in hpZ's group) times its
// unit's bytes (cross_host_gather_bytes). bench/
// zeropp prints the two side by side, and the multinode test requires
// them equal.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// Measures steps 2, 3, ... of a run (the first records the unshard order
/// and keeps no unit: not a steady step). Active only with comms_logger
/// enabled. Thread safety: the loop's thread.
class CrossHostMeter {
 public:
  /// `engine` (finalized) and `dp` (its data-parallel group, for the hosts'
  /// layout: collective, like the constructor's split_by_node) must outlive
  /// the meter.
  CrossHostMeter(const Engine& engine, Communicator& dp);
  /// Around each optimizer step's work (its micro-batches and step()); not
  /// collectives. Evaluations between steps are left out.
  void before_step();
  void after_step();
  /// The figures over every rank: collective over `world` (one
  /// all-reduce). {"measured_per_step", "computed_per_step",
  /// "ranks_per_host", "steps"}; measured is -1 with fewer than 2 steps or
  /// no comms log, computed -1 when the data-parallel group is not laid out
  /// host by host or is not the world (on a mesh the world holds several
  /// groups, and tensor- and pipeline-parallel traffic besides).
  nlohmann::json figures(Communicator& world);
  /// figures() as one line ("" without a comms log).
  static std::string line(const nlohmann::json& figures);

 private:
  std::uint64_t log_total() const;
  std::vector<std::pair<std::int64_t, std::int64_t>> gathers() const;
  double computed_total() const;
  const Engine& engine_;
  bool active_ = false;
  int ranks_per_host_ = 0;  ///< 0: not host by host
  int dp_size_ = 0;
  std::int64_t steps_ = 0;
  std::uint64_t before_ = 0;
  std::uint64_t measured_ = 0;  ///< this rank's bytes in steps 2, 3, ...
  std::vector<std::pair<std::int64_t, std::int64_t>> gathers_before_;
  std::vector<std::int64_t> world_gathers_, group_gathers_;  ///< per unit, in steps 2, 3, ...
};

}  // namespace zeroshard::examples
