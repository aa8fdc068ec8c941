// A training job's checkpoint saves and what they cost the training, as the
// examples report them (issue: checkpoints that do not stop training): each
// save synchronous, or with checkpoint.async through
// Engine::save_checkpoint_async ([Note: async checkpoint]); the stall of
// each (the seconds the call held the loop: the whole save, or the
// snapshot), this rank's background write time, and the loop's step times
// split by whether a save was being written while the step ran.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// See the file comment. Thread safety: the loop's thread.
class CheckpointSaves {
 public:
  /// Saves `engine`'s state to `dir` (synchronously, or asynchronously with
  /// checkpoint.async) with `client`, keep_last and `tag` ("": the
  /// engine's step-NNNNNNNN), timing the call. Returns the tag. Collective;
  /// throws what the save throws.
  std::string save(Engine& engine, const std::string& dir, const nlohmann::json& client, int keep_last,
                   const std::string& tag = "");
  /// The stall of the last save (seconds).
  double last_stall() const { return stalls_.empty() ? 0.0 : stalls_.back(); }
  /// Records a step of `seconds` whose start saw `writing`
  /// (engine.checkpoint_in_flight() before the step's work). The first
  /// step recorded is left out (warm-up).
  void step(bool writing, double seconds);
  /// Commits a save still in flight (Engine::wait_for_checkpoints), timing
  /// it, and collects the async saves' write times. Collective.
  void finish(Engine& engine);
  /// {"async", "saves", "stall_s" (per save), "saves_waiting" (async saves
  /// called while the previous one was in flight: their stall includes the
  /// rest of its write), "median_stall_s",
  /// "median_write_s" (async: this rank's background writes), "final_wait_s",
  /// "checkpoint_bytes" (the last checkpoint's files; 0 without one),
  /// "median_step_s_writing", "steps_writing", "median_step_s_other"}.
  /// After finish().
  nlohmann::json figures() const;
  /// One line of `figures` for the job's summary ("" without saves).
  static std::string line(const nlohmann::json& figures);

 private:
  bool async_ = false;
  std::vector<double> stalls_, writes_, steps_writing_, steps_other_;
  std::vector<CheckpointHandle> handles_;
  std::size_t waited_ = 0, steps_seen_ = 0;
  double final_wait_ = 0;
  std::uint64_t bytes_ = 0;
  std::string last_dir_;
};

}  // namespace zeroshard::examples
