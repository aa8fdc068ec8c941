// The phases of a checkpoint save (docs/checkpoint-format.md, "The atomic
// save protocol"), shared by Engine::save_checkpoint (engine_save.cpp),
// which runs them back to back, and Engine::save_checkpoint_async
// (engine_save_async.cpp), which snapshots the bytes into host memory,
// writes them on a thread and commits at a later step ([Note: async
// checkpoint]). Internal to the engine; every function runs on the engine's
// thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/background_writer.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/save_folder.h"
#include "runtime/checkpoint/state_checks.h"
#include "runtime/engine/engine_state.h"
#include "runtime/sharding/array_store.h"

namespace zeroshard {

/// Receives a file's bytes in order (`bytes` bytes at `data`).
using ByteSink = std::function<void(const void* data, std::size_t bytes)>;

/// Where a save goes. Plain value type.
struct SaveTarget {
  std::string mesh_save_dir;  ///< the save_dir the loop passed
  std::string save_dir;       ///< this rank's folder (mesh_checkpoint_root)
  std::string tag;
  std::string tmp_dir;        ///< <save_dir>/.tmp-<tag>: the save is written here
  std::string final_dir;      ///< <save_dir>/<tag>: its name once published
  bool mesh_folders = false;  ///< a mesh with one folder per (pipeline stage, tp rank)
};

/// Phase 1 on every rank, inside an agreed_over_world: save_target, then
/// prepare_save_folder agreed over the host communicator. Throws what those
/// throw.
SaveTarget begin_save(EngineState& s, const char* call, const std::string& mesh_save_dir, const std::string& tag);

/// Phase 1's checks (after finalize(), usable, at the end of an
/// accumulation cycle: Error naming `call` otherwise; the same outcome on
/// every rank) and the folders of the save. Local.
SaveTarget save_target(const EngineState& s, const char* call, const std::string& mesh_save_dir,
                       const std::string& tag);

/// On rank 0: the save folder created, swept of leftovers
/// (sweep_leftovers), and .tmp-<tag> created. Nothing on the others.
/// Throws IoError or std::filesystem::filesystem_error; the caller agrees.
void prepare_save_folder(const EngineState& s, const SaveTarget& t);

/// The manifest of the state as it is now, without files (and weights).
Manifest make_manifest(const EngineState& s, const std::string& tag, const nlohmann::json& client_state);

/// The async save's way with arrays on the nvme tier: offered the bytes
/// [begin, begin + bytes) of array `a` of unit u that come next in the
/// rank file, and how they are checked (`check`, `source`); returns true
/// when it took them as hard links of the swap files
/// (ArrayStore::link_range), which its writer then reads and checks, or
/// false to have them read and sunk as usual.
using LinkHook = std::function<bool(UnitId u, ArrayRef a, std::uint64_t begin, std::uint64_t bytes,
                                    FiniteCheck check, const StateSource& source)>;

/// This rank's rank-NNNNN.bin (docs/checkpoint-format.md): per unit, the
/// fp32 master window then each state array's window as stored, each
/// checked finite as it is sunk (IoError naming the tensor, `file` and the
/// element: "nothing was saved"; the sink may have had part of the file).
/// `after_unit(u)` runs after unit u's bytes. Reads nvme arrays, unless
/// `link` takes them (not for packed state arrays). Local.
void produce_rank_file(EngineState& s, const Manifest& m, const std::string& file, const ByteSink& sink,
                       const std::function<void(UnitId)>& after_unit, const LinkHook& link = {});

/// The consolidated weights of `m` (zero_optimization.
/// stage3_gather_16bit_weights_on_model_save): rank 0's `open()` then
/// `sink` receive the whole model.safetensors; at stage 3 each unit's
/// shards are all-gathered first. Every phase agreed over the host
/// communicator (AgreedIoError on every rank). Collective.
void produce_checkpoint_weights(EngineState& s, const Manifest& m, const std::function<void()>& open,
                                const ByteSink& sink);

/// Phases 2-4: the ranks' file sizes and CRC-32s gathered, rank 0's
/// manifest (with `m.weights` as set) written to tmp_dir, the checkpoint
/// renamed into place and, outside a mesh folder, `latest` switched and
/// keep_last applied. Each step agreed over the host communicator.
/// `file_crc32` and `file_bytes` are this rank's file's. With `pruned`,
/// keep_last's checkpoints are renamed (mark_pruned) and their new paths
/// appended there, for the caller to remove; else removed. Collective.
void commit_save(EngineState& s, const SaveTarget& t, Manifest& m, std::uint32_t file_crc32, std::uint64_t file_bytes,
                 int keep_last, std::vector<std::string>* pruned = nullptr);

/// On a mesh with one folder per (pipeline stage, tp rank), after every
/// folder's commit_save: world rank 0 writes <mesh_save_dir>/latest, then
/// each folder's `latest` and pruning ([Note: mesh checkpoint commit]).
/// Collective over the world.
void commit_mesh_save(EngineState& s, const SaveTarget& t, int keep_last);

/// The manifest's entry of the consolidated weights written as a file of
/// `bytes` bytes with CRC-32 `crc32` (kWeightsFileName, compute dtype).
ManifestWeights checkpoint_weights_entry(const EngineState& s, std::uint64_t bytes, std::uint32_t crc32);

/// Removes `t.tmp_dir` on rank 0 after a failed save (errors ignored: the
/// next save's sweep removes what is left).
void discard_save(const EngineState& s, const SaveTarget& t);

// ---- the async save (engine_save_async.cpp, [Note: async checkpoint]) ----

/// The engine's async saves: the staging area, the writer, the save in
/// flight. Owned by EngineState (made at the first async save, or by
/// finalize() with checkpoint.async); only engine_save_async.cpp changes
/// it. The destructor waits for a write still running and says on stderr
/// (rank 0) that its save was not committed.
struct AsyncCheckpoint {
  AsyncCheckpoint() = default;
  AsyncCheckpoint(const AsyncCheckpoint&) = delete;
  AsyncCheckpoint& operator=(const AsyncCheckpoint&) = delete;
  ~AsyncCheckpoint();
  int rank = 0;            ///< this rank in the data-parallel group
  HostBuffer staging;      ///< the snapshot's bytes (MemCategory::checkpoint_staging), kept between saves
  BackgroundWriter writer;  ///< declared after `staging`: joined before it is freed
  FolderRemover pruning;    ///< rank 0: removes what keep_last pruned at the last commit
  bool in_flight = false;  ///< a save snapshotted and not yet committed or failed
  double poll_flag = 0;    ///< this rank's writer finished (1) at the last poll; the poll's buffer
  CommWork poll;           ///< that poll's all-reduce (min over the world), declared after its buffer
  SaveTarget target;       ///< that save's folders
  Manifest manifest;       ///< its manifest (files and weights filled in at the commit)
  int keep_last = 0;
  std::uint64_t staging_bytes = 0;  ///< bytes it staged (and writes)
  std::shared_ptr<AsyncSaveStatus> status;  ///< shared with its handles
};

/// Bytes of host memory this rank's snapshot stages: its rank file, and on
/// rank 0 the consolidated weights when configured. After finalize().
std::size_t checkpoint_staging_bytes(const EngineState& s);

/// finalize()'s part with checkpoint.async: leases the staging area
/// (checkpoint_staging_bytes; none when over checkpoint.staging_memory,
/// which the save then refuses). Local.
void reserve_checkpoint_staging(EngineState& s);

/// At the start of a boundary step() while an async save is in flight:
/// completes the poll that the previous boundary step started (a
/// non-blocking all-reduce of "this rank's writer has finished"; done by
/// now, so the step does not wait on the other ranks) and, when every
/// writer had finished, commits (throwing its agreed error if it failed);
/// else starts the next poll. Collective over the world.
void poll_async_checkpoint(EngineState& s);

/// Before wait_for_checkpoints, a save or a load: waits for this rank's
/// writer and commits the save in flight, if any (throwing its agreed error
/// if it failed). Collective over the world while a save is in flight.
void finish_async_checkpoint(EngineState& s);

}  // namespace zeroshard
