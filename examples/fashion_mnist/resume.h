// Saving and resuming the Fashion-MNIST job: the data position stored as a
// checkpoint's client_state, and loading the latest checkpoint of a save
// directory into an Engine. Header-only.
//
// [Note: resume at another world size]
// The engine re-shards the saved state for any world size and stage. The
// data position is global: (epoch, epoch_sample) says how many samples of
// the epoch's permutation the global batches before the checkpoint
// consumed, and a resumed run continues from exactly there with its own
// global batch (micro-batch x accumulation x ranks); see
// data_parallel.h, [Note: resuming the data order]. To keep the global
// batch (and so the optimization) unchanged across world sizes, keep
// micro-batch x accumulation x ranks constant (ds_config
// train_micro_batch_size_per_gpu / gradient_accumulation_steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/error.h"
#include "runtime/checkpoint/save_folder.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// Where training is in the data, after some optimizer steps.
struct DataPosition {
  int epoch = 0;                    ///< 0-based epoch in progress (or the next one)
  std::int64_t step_in_epoch = 0;   ///< optimizer steps taken in this epoch
  std::uint64_t epoch_sample = 0;   ///< samples of this epoch's permutation consumed (all ranks)
  std::int64_t global_step = 0;     ///< optimizer steps (global batches) since the start of training
  std::uint64_t samples_seen = 0;   ///< training samples consumed since the start (all ranks)
};

/// The client_state saved with every checkpoint of the job:
/// {"epoch", "step_in_epoch", "epoch_sample", "global_step", "samples_seen",
///  "seed" (the shuffling seed), "global_batch", "world_size"}.
inline nlohmann::json to_client_state(const DataPosition& p, std::uint64_t seed, std::size_t global_batch,
                               int world_size) {
  return {{"epoch", p.epoch},
          {"step_in_epoch", p.step_in_epoch},
          {"epoch_sample", p.epoch_sample},
          {"global_step", p.global_step},
          {"samples_seen", p.samples_seen},
          {"seed", seed},
          {"global_batch", global_batch},
          {"world_size", world_size}};
}

/// A resume failure that every rank raised with the same message (so one
/// rank, rank 0, reports it; rank() is the rank that threw this copy).
/// Thread safety: plain value type.
class ResumeError : public Error, public AgreedError {
 public:
  ResumeError(const std::string& what, int rank) : Error(what), AgreedError(rank) {}
};

/// What resume_latest loaded.
struct Resumed {
  std::string dir;              ///< <save_dir>/<tag>
  std::string tag;              ///< the checkpoint's tag
  DataPosition position;        ///< where the saved run was
  std::uint64_t seed = 0;       ///< its shuffling seed
  std::size_t global_batch = 0; ///< its global batch
  int world_size = 0;           ///< the number of ranks that saved it
};

/// Loads the checkpoint that <save_dir>/latest names into `engine` (which
/// re-shards it for its world size and stage) and parses the job's
/// client_state. Every failure is agreed across the ranks of `comm` (the
/// engine's communicator) and thrown on all of them as ResumeError: no
/// checkpoint in save_dir (no `latest`), what Engine::load_checkpoint
/// throws as an AgreedError (a different model, corrupted shards or
/// manifest: nothing is loaded; a failed commit: the engine is unusable),
/// or a client_state without the job's keys or with values no run of the
/// job saves (epoch outside [0, 10^6), epoch_sample beyond `dataset_size`,
/// negative counters, global_batch or world_size 0; the engine's state has then been
/// replaced). Any other exception (not agreed) propagates unchanged.
/// Collective.
inline Resumed resume_latest(Engine& engine, Communicator& comm, const std::string& save_dir,
                             std::size_t dataset_size) {
  Resumed r;
  try {
    const std::string latest = save_dir + "/latest";
    // Missing on any rank: every rank reports it.
    double missing = std::filesystem::is_regular_file(latest) ? 0.0 : 1.0;
    comm.all_reduce(&missing, 1, DType::f64, ReduceOp::max);
    if (missing != 0.0) {
      throw ResumeError(fmt::format("--resume: no checkpoint in {} ({} does not exist); run with --save-dir {} first",
                                    save_dir, latest, save_dir),
                        comm.rank());
    }
    run_agreed(comm, [&] { r.tag = read_latest_tag(save_dir); });
    r.dir = save_dir + "/" + r.tag;
    const nlohmann::json cs = engine.load_checkpoint(save_dir, r.tag);
    // load_checkpoint agreed on the manifest: what follows is the same on every rank.
    const std::string where = r.dir + "/manifest.json: client_state";
    try {
      r.position.epoch = cs.at("epoch").get<int>();
      r.position.step_in_epoch = cs.at("step_in_epoch").get<std::int64_t>();
      r.position.epoch_sample = cs.at("epoch_sample").get<std::uint64_t>();
      r.position.global_step = cs.at("global_step").get<std::int64_t>();
      r.position.samples_seen = cs.at("samples_seen").get<std::uint64_t>();
      r.seed = cs.at("seed").get<std::uint64_t>();
      r.global_batch = cs.at("global_batch").get<std::size_t>();
      r.world_size = cs.at("world_size").get<int>();
    } catch (const nlohmann::json::exception& e) {
      throw ResumeError(fmt::format("{} {} is not fashion_mnist's data position ({})", where, cs.dump(), e.what()),
                        comm.rank());
    }
    auto refuse = [&](const char* key, const std::string& why) {
      throw ResumeError(fmt::format("{}.{}: {}", where, key, why), comm.rank());
    };
    if (r.position.epoch < 0 || r.position.epoch >= 1000000) {
      refuse("epoch", fmt::format("{} is not an epoch of a run (0 to 999999)", r.position.epoch));
    }
    if (r.position.epoch_sample > dataset_size) {
      refuse("epoch_sample", fmt::format("{} is beyond the {} training samples of an epoch", r.position.epoch_sample,
                                         dataset_size));
    }
    if (r.position.global_step < 0) refuse("global_step", fmt::format("{} is negative", r.position.global_step));
    if (r.position.step_in_epoch < 0 || r.position.step_in_epoch > r.position.global_step) {
      refuse("step_in_epoch", fmt::format("{} is not between 0 and global_step ({})", r.position.step_in_epoch,
                                          r.position.global_step));
    }
    if (r.global_batch == 0) refuse("global_batch", "0 is not a batch size");
    if (r.world_size < 1) refuse("world_size", fmt::format("{} is not a number of ranks", r.world_size));
  } catch (const ResumeError&) {
    throw;
  } catch (const Error& e) {
    if (!is_agreed(e)) throw;  // this rank's alone: the caller ends the job
    throw ResumeError(e.what(), comm.rank());
  }
  return r;
}

}  // namespace zeroshard::examples
