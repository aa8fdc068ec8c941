// Engine::save_checkpoint_async: checkpoints that do not stop training.

// [Note: async checkpoint]
// A synchronous save stops every rank while its shard goes to disk. The
// async save splits the same protocol (runtime/engine/save_phases.h)
// in two:
//   snapshot  (the stall) in save_checkpoint_async, agreed over the world:
//             the checks and the tag, the manifest of the state as it is
//             (step, loss scaler, client_state), and the exact bytes of this
//             rank's file copied into a staging area in host memory: the
//             fp32 master weights and every optimizer state array, read from
//             their tier, each checked finite piece by piece as it is
//             copied. Arrays on the nvme tier are not read: their swap files
//             are hard-linked (ArrayStore::link_range), which is a snapshot
//             because a swap write never changes a current file, it renames
//             a new one over the name ([Note: swap file format and update
//             protocol]); the writer reads and checks them, so a non-finite
//             value there fails the save at its commit (an agreed IoError
//             naming it, nothing saved). Where the file system has no hard
//             links they are staged like the rest (read back at the disk's
//             speed). The links hold the old generation of those files
//             until the write ends: one more copy of the nvme state on disk
//             while a save is in flight. Rank 0's .tmp-<tag>/, the lease
//             and the copy share one agreement. With
//             stage3_gather_16bit_weights_on_model_save rank 0 also stages
//             model.safetensors (all-gathered at stage 3).
//             After the last collective a BackgroundWriter thread starts
//             writing .tmp-<tag>/ and the call returns (started earlier, the
//             writers took the shared cores from ranks still in the
//             collective: the stall doubled with 4 ranks on 2 cores);
//   commit    at the first of: the start of a boundary step(), wait(),
//             wait_for_checkpoints(), another save, a load. step() asks the
//             world whether every rank's writer has finished with a
//             non-blocking all-reduce of a flag, started at one boundary
//             step and read at the next (a blocking one made every step of
//             the write a meeting point of the ranks: 1.2-1.3x slower
//             steps at 4 ranks on 2 cores); the others wait for this rank's
//             writer first. When all have, the ranks agree
//             on the writers' outcome (a failure is the same AgreedIoError,
//             naming the file, on every rank) and run the synchronous save's
//             phases 2-4: sizes and CRC-32s gathered, the manifest, the
//             rename into place, `latest`, keep_last, and on a mesh the
//             world's commit. keep_last's checkpoints are renamed to
//             .pruned-<tag> and removed by a FolderRemover thread of rank 0
//             (removing 129 MB took 36 ms of every rank's step when the
//             commit did it); wait_for_checkpoints joins it.
// The snapshot owns its bytes: the steps that run during the write change
// the engine's arrays, never the staging area, so the checkpoint holds the
// state at the call bit for bit (PyTorch #144657 wrote values from after the
// next step because staging CPU tensors was a no-op; the manifest and the
// files here come from the same instant, unlike NVIDIA resiliency-ext #376's
// torn step-2/step-1 checkpoints). The staging area is one HostPool lease
// (MemCategory::checkpoint_staging) kept between saves and grown when a
// snapshot needs more; with checkpoint.async finalize() leases it, so that
// the ledger and the memory estimate count it from the start. Crash safety
// is the synchronous save's: nothing is renamed before every file is
// complete and fsynced, so a kill at any point leaves `latest` on a complete
// checkpoint ([Note: crash points of a save]; the async save adds the points
// "snapshot", after the staging, and "writing", in the middle of rank 0's
// background write). One save is in flight at a time
// (checkpoint.async_in_flight). The writer thread touches only the staging
// area and its files: no collectives, no engine state. It runs at
// SCHED_IDLE (run_below_training) and yields the core after every
// BackgroundWriter::kSliceBytes: on cores the ranks share it takes only
// what they leave idle, and a rank that waits in a collective by yielding
// gets its core back within about 0.1 ms (with 8 MiB slices the GPT's
// steps beside a write ran 1.14-1.46x slower at 4 ranks on 2 cores). A
// call that waits for it (wait(), another save, a load) raises it to the
// loop's priority first, where the system permits (root, CAP_SYS_NICE, or
// RLIMIT_NICE of 20; otherwise that wait runs at idle priority).
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "comm/collective_error.h"
#include "core/error.h"
#include "runtime/checkpoint/background_writer.h"
#include "runtime/checkpoint/mesh_folders.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/save_hooks.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_state.h"
#include "runtime/engine/save_phases.h"

namespace zeroshard {

using nlohmann::json;

AsyncCheckpoint::~AsyncCheckpoint() {
  if (!in_flight) return;
  writer.join();
  if (rank == 0) {
    fmt::print(stderr,
               "zeroshard: the engine was destroyed with checkpoint {} still in flight: it was not committed (the "
               "previous checkpoint stays the latest); call wait_for_checkpoints() before the engine goes\n",
               target.tag);
  }
}

namespace {

// The engine's async state, made on first use.
AsyncCheckpoint& async_state(EngineState& s) {
  if (!s.async_checkpoint) {
    s.async_checkpoint = std::make_unique<AsyncCheckpoint>();
    s.async_checkpoint->rank = s.rank();
  }
  return *s.async_checkpoint;
}

// Phases 2-4 of the save in flight, after every rank's writer finished.
void commit_in_flight(EngineState& s, AsyncCheckpoint& a) {
  a.poll.wait();  // a poll every rank started (a no-op when none is pending)
  a.writer.join();
  a.in_flight = false;
  a.status->write_seconds = a.writer.seconds();
  // The write on its own row of the trace; the commit holds the loop ([Note: step breakdown]).
  s.tracer()->add_span(TraceSpan{.name = "checkpoint_write",
                                 .thread = TraceThread::io,
                                 .unit = a.target.tag,
                                 .bytes = a.staging_bytes,
                                 .begin_ns = a.writer.begin_ns(),
                                 .end_ns = a.writer.end_ns()});
  const TraceScope span(s.tracer(), "checkpoint_async_commit", TraceThread::engine, TimeCategory::checkpoint,
                        a.target.tag);
  std::vector<std::string> pruned;  // rank 0: keep_last's folders, renamed, removed in the background
  try {
    s.comms.agreed_over_world([&] {
      try {
        std::vector<WrittenFile> files;
        run_agreed(s.comms.host(), [&] { files = a.writer.results(); });
        checkpoint_crash_point("files", s.rank());
        if (files.size() > 1) {
          a.manifest.weights = checkpoint_weights_entry(s, files[1].bytes, files[1].crc32);
        }
        commit_save(s, a.target, a.manifest, files[0].crc32, files[0].bytes, a.keep_last, &pruned);
      } catch (const AgreedError&) {
        discard_save(s, a.target);
        throw;
      }
      return 0;
    });
    if (a.target.mesh_folders) commit_mesh_save(s, a.target, a.keep_last);
  } catch (const std::exception& e) {
    a.status->error = e.what();
    a.status->failure = std::current_exception();
    throw;
  }
  a.status->committed = true;
  a.pruning.start(std::move(pruned));
}

// Grows the staging area to at least `bytes` bytes (a new lease, keeping
// its first `keep` bytes). ConfigError naming both sizes over
// checkpoint.staging_memory (`dir`: the save's, for the message).
void grow_staging(EngineState& s, AsyncCheckpoint& a, std::size_t bytes, std::size_t keep, const std::string& dir) {
  if (bytes == 0 || (a.staging.valid() && a.staging.capacity() >= bytes)) return;
  const std::int64_t limit = s.config.checkpoint.staging_memory;
  if (limit > 0 && bytes > static_cast<std::size_t>(limit)) {
    throw ConfigError(fmt::format("save_checkpoint_async(\"{}\"): rank {}'s snapshot needs {} bytes of staging memory, "
                                  "over checkpoint.staging_memory = {}; raise the limit or save with save_checkpoint",
                                  dir, s.rank(), bytes, limit));
  }
  HostBuffer grown = s.store().host_pool().acquire(bytes, MemCategory::checkpoint_staging);
  if (keep > 0) std::memcpy(grown.data(), a.staging.data(), keep);
  a.staging = std::move(grown);
}

// Bytes of this rank's file that a snapshot hard-links (nvme arrays).
std::size_t linked_bytes(const EngineState& s) {
  return linked_snapshot_bytes(
      s.units(), s.stage(), s.mixed(), s.rank(), [&s](UnitId u, ArrayRef a) { return s.store().tier(u, a); },
      [&s](UnitId u) -> const UnitStates& { return s.store().states(u); },
      [&s](UnitId u) { return s.info(u).shard; });
}

}  // namespace

void finish_async_checkpoint(EngineState& s) {
  if (!s.async_checkpoint) return;
  AsyncCheckpoint& a = *s.async_checkpoint;
  if (a.in_flight) commit_in_flight(s, a);
  a.pruning.join();  // before a save's sweep of the folder, a load, or the loop's exit
}

void poll_async_checkpoint(EngineState& s) {
  if (!s.async_checkpoint || !s.async_checkpoint->in_flight) return;
  AsyncCheckpoint& a = *s.async_checkpoint;
  if (a.poll.pending()) {
    a.poll.wait();  // started at the previous boundary step on every rank: done by now
    if (a.poll_flag > 0) {
      commit_in_flight(s, a);
      return;
    }
  }
  a.poll_flag = a.writer.finished() ? 1.0 : 0.0;
  Communicator& world = s.comms.on_mesh() ? *s.comms.world() : s.comms.host();
  a.poll = world.iall_reduce(&a.poll_flag, 1, DType::f64, ReduceOp::min);
}

void reserve_checkpoint_staging(EngineState& s) {
  if (!s.config.checkpoint.async) return;
  const std::size_t bytes = checkpoint_staging_bytes(s);
  const std::int64_t limit = s.config.checkpoint.staging_memory;
  if (limit > 0 && bytes > static_cast<std::size_t>(limit)) return;  // refused at the save, naming both sizes
  grow_staging(s, async_state(s), bytes, 0, "");
}

std::size_t checkpoint_staging_bytes(const EngineState& s) {
  // The tag a save at this step takes by default (the weights' header holds it).
  const Manifest m = make_manifest(s, fmt::format("step-{:08d}", s.progress.optimizer_steps), json::object());
  return async_staging_bytes(m, s.config.zero.gather_16bit_weights_on_model_save, s.dtype(), s.rank()) -
         linked_bytes(s);
}

CheckpointHandle Engine::save_checkpoint_async(const std::string& mesh_save_dir, const json& client_state,
                                               int keep_last, const std::string& tag_in) {
  EngineState& s = *s_;
  refuse_with_servers(s, "save_checkpoint_async()",
                      "the servers' state travels to the workers' files during the save; use save_checkpoint()");
  AsyncCheckpoint& a = async_state(s);
  if (a.in_flight) {
    if (s.config.checkpoint.in_flight == AsyncInFlight::refuse) {
      throw Error(
          fmt::format("save_checkpoint_async(\"{}\"): the save of {} is still in flight and "
                      "checkpoint.async_in_flight is \"refuse\"; call wait() on its handle or "
                      "wait_for_checkpoints() first",
                      mesh_save_dir, a.target.tag));
    }
    finish_async_checkpoint(s);
  }
  settle_deferred_step(s, "save_checkpoint_async()");
  const TraceScope span(s.tracer(), "checkpoint_snapshot", TraceThread::engine, TimeCategory::checkpoint, tag_in);
  const int r = s.rank();
  SaveTarget staged;  // this folder's save once its snapshot is staged
  std::vector<StagedPiece> pieces;  // of the rank file, while the snapshot runs
  std::vector<StagedFile> files;
  try {
    a.target = s.comms.agreed_over_world([&] {
      SaveTarget t = save_target(s, "save_checkpoint_async()", mesh_save_dir, tag_in);
      try {
        a.manifest = make_manifest(s, t.tag, client_state);
        const std::size_t file_bytes = a.manifest.file_bytes();
        const std::size_t all_bytes =
            async_staging_bytes(a.manifest, s.config.zero.gather_16bit_weights_on_model_save, s.dtype(), r);
        // The rank file's pieces: runs of the staging area (at `offsets`,
        // made addresses once the area stops growing) and hard-linked nvme
        // arrays (offset npos).
        std::vector<std::size_t> offsets;
        std::size_t at = 0, run_start = 0;
        auto close_run = [&] {
          if (at == run_start) return;
          pieces.push_back(StagedPiece::memory(nullptr, at - run_start));
          offsets.push_back(run_start);
          run_start = at;
        };
        auto copy = [&](const void* data, std::size_t n) {
          grow_staging(s, a, at + n, at, mesh_save_dir);
          std::memcpy(static_cast<std::byte*>(a.staging.data()) + at, data, n);
          at += n;
        };
        auto link = [&](UnitId u, ArrayRef ar, std::uint64_t begin, std::uint64_t n, FiniteCheck check,
                        const StateSource& source) {
          std::optional<std::vector<FileExtent>> extents;
          if (!checkpoint_hard_links_refused()) extents = s.store().link_range(u, ar, begin, n);
          if (!extents) {
            grow_staging(s, a, all_bytes, at, mesh_save_dir);  // no hard links here: stage everything
            return false;
          }
          close_run();
          pieces.push_back(StagedPiece::linked(std::move(*extents), n, check, source));
          offsets.push_back(std::string::npos);
          return true;
        };
        // One agreement for the folder, the lease and the copy (each costs a collective).
        run_agreed(s.comms.host(), [&] {
          grow_staging(s, a, all_bytes - linked_bytes(s), 0, mesh_save_dir);
          prepare_save_folder(s, t);
          produce_rank_file(s, a.manifest, t.final_dir + "/" + rank_file_name(r), copy, [](UnitId) {}, link);
        });
        close_run();
        const std::size_t weights_start = at;
        if (s.config.zero.gather_16bit_weights_on_model_save) {
          produce_checkpoint_weights(s, a.manifest, [] {}, copy);
        }
        checkpoint_crash_point("snapshot", r);
        auto* staging = static_cast<std::byte*>(a.staging.data());
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          if (offsets[i] != std::string::npos) pieces[i].data = staging + offsets[i];
        }
        files.push_back(StagedFile{.path = t.tmp_dir + "/" + rank_file_name(r), .pieces = std::move(pieces)});
        if (at > weights_start) {
          files.push_back(StagedFile{.path = t.tmp_dir + "/" + kWeightsFileName,
                                     .pieces = {StagedPiece::memory(staging + weights_start, at - weights_start)}});
        }
        a.staging_bytes = file_bytes + (at - weights_start);
      } catch (const AgreedError&) {
        remove_snapshot_links(pieces);
        discard_save(s, t);
        throw;
      }
      staged = t;
      return t;
    });
  } catch (const AgreedError&) {
    // Another folder of the mesh failed after this one staged its snapshot.
    if (!staged.tmp_dir.empty()) discard_save(s, staged);
    for (const StagedFile& f : files) remove_snapshot_links(f.pieces);
    throw;
  }
  // After the last collective: a writer running beside a collective would
  // take the cores its peers wait on. A writer that cannot start fails its
  // write, which the commit agrees on.
  a.writer.start(std::move(files), r);
  a.in_flight = true;
  a.keep_last = keep_last;
  a.status = std::make_shared<AsyncSaveStatus>();
  a.status->tag = a.target.tag;
  return CheckpointHandle(this, a.status);
}

void Engine::wait_for_checkpoints() { finish_async_checkpoint(*s_); }

bool Engine::checkpoint_in_flight() const { return s_->async_checkpoint && s_->async_checkpoint->in_flight; }

void CheckpointHandle::wait() {
  if (!done()) engine_->wait_for_checkpoints();
  if (status_->failure) std::rethrow_exception(status_->failure);
}

}  // namespace zeroshard
