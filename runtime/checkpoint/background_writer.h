// BackgroundWriter: writes staged checkpoint files on a thread of its own
// while training goes on (Engine::save_checkpoint_async; [Note: async
// checkpoint] in runtime/engine/engine_save_async.cpp). It knows files and
// bytes, not engines: each file is written through a DurableFileWriter
// (running CRC-32, fsync) in slices of kSliceBytes, from staging
// memory or from hard links of nvme swap files (read and checked finite on
// the way), and its size and CRC, or the first error, are kept for the
// engine's commit.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "runtime/checkpoint/state_checks.h"
#include "runtime/sharding/array_store.h"

namespace zeroshard {

struct Manifest;

/// Puts the calling thread below the training threads: SCHED_IDLE (Linux),
/// so that it runs on cores the ranks leave idle and takes no time slices
/// from ranks that share cores. With nice 10 instead, the GPT's steps
/// during a write ran 1.30-1.37x the others' at 4 ranks on 2 cores; with
/// SCHED_IDLE 0.87-1.10x ([Note: async checkpoint]). Best effort: a
/// failure leaves the thread as it was.
void run_below_training();

/// Bytes of host memory an async save of manifest `m` (its units, tensors,
/// state format; tag, step, world size, stage and compute dtype for the
/// weights' header) stages on `rank`: one rank file (m.file_bytes()), and
/// on rank 0 with `weights` (stage3_gather_16bit_weights_on_model_save)
/// the consolidated model.safetensors in `dtype`. Pure. Throws IoError as
/// plan_checkpoint_safetensors.
std::uint64_t async_staging_bytes(const Manifest& m, bool weights, DType dtype, int rank);

/// A run of a staged file's bytes: `bytes` bytes at `data` (the caller's
/// staging memory, unchanged until the write is joined), or, with `data`
/// null, the `extents` (hard links of nvme swap files, or zeros; their
/// bytes add up to `bytes`), read and checked (`check`, `source`: the
/// snapshot did not see them) as they are written. The writer removes the
/// extents' links when it ends, written or not.
struct StagedPiece {
  /// `bytes` bytes of staging memory at `data`.
  static StagedPiece memory(const void* data, std::uint64_t bytes) {
    StagedPiece p;
    p.data = data;
    p.bytes = bytes;
    return p;
  }
  /// `bytes` bytes from `extents`, checked as `check` says.
  static StagedPiece linked(std::vector<FileExtent> extents, std::uint64_t bytes, FiniteCheck check,
                            StateSource source) {
    StagedPiece p;
    p.extents = std::move(extents);
    p.bytes = bytes;
    p.check = check;
    p.source = std::move(source);
    return p;
  }
  const void* data = nullptr;
  std::vector<FileExtent> extents;
  std::uint64_t bytes = 0;
  FiniteCheck check = FiniteCheck::none;
  StateSource source;
};

/// Bytes of a rank file that an async save takes as hard links of nvme
/// swap files instead of staging them (ArrayStore::link_range): for each
/// of `units` units, the fp32 master window (shard(u) elements; the master
/// array when `mixed`, else the parameters) when that array is on the nvme
/// tier, and the window (UnitStates::window_numel for `rank`) of each state
/// array that is on the nvme tier and not packed. 0 at stage 0 (no
/// offload). Pure.
std::uint64_t linked_snapshot_bytes(UnitId units, int stage, bool mixed, int rank,
                                    const std::function<MemTier(UnitId, ArrayRef)>& tier,
                                    const std::function<const UnitStates&(UnitId)>& states,
                                    const std::function<std::size_t(UnitId)>& shard);

/// Removes the hard links among `pieces`' extents and the folders that
/// held them (when empty). Never throws.
void remove_snapshot_links(const std::vector<StagedPiece>& pieces) noexcept;

/// One file of a background write: its pieces, in order, go to `path`.
struct StagedFile {
  std::string path;
  std::vector<StagedPiece> pieces;
};

/// What a finished file holds: its size in bytes and CRC-32 (zlib's).
struct WrittenFile {
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

/// See the file comment. One write at a time. Thread safety: start, join,
/// results and the destructor from one thread (the engine's); finished()
/// from any.
class BackgroundWriter {
 public:
  /// The granularity of the test hooks' delays (bytes;
  /// runtime/checkpoint/save_hooks.h).
  static constexpr std::size_t kPieceBytes = std::size_t{8} << 20;
  /// Bytes the writer reads, checks and writes between two sched_yield()s:
  /// a rank that waits in a collective by yielding (Open MPI's
  /// mpi_yield_when_idle, ranks sharing cores) gets its core back within
  /// about 0.1 ms. With 8 MiB slices the GPT's steps during a write ran
  /// 1.14-1.46x the others' (4 ranks on 2 cores), with these 0.89-1.04x.
  static constexpr std::size_t kSliceBytes = std::size_t{256} << 10;

  BackgroundWriter() = default;
  /// Joins a write still running (its files stay as far as they got).
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// Starts writing `files` in order on a new thread; `rank` is for the
  /// test hooks. InvariantError while a write is running (not joined). A
  /// thread that cannot start is the write's error (finished() at once).
  void start(std::vector<StagedFile> files, int rank);
  /// True while a started write has not been joined.
  bool running() const { return thread_.joinable(); }
  /// True once the thread has written every file or failed (then join()
  /// does not block).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  /// Waits for the thread, first raising it to the caller's priority
  /// (run_below_training: the loop now waits on it). No-op when nothing
  /// runs.
  void join();
  /// After join(): each file's size and CRC-32, in start()'s order.
  /// Rethrows the write's error (an IoError naming the file) if it failed.
  const std::vector<WrittenFile>& results() const;
  /// After join(): the write's error message, "" when it succeeded.
  std::string error() const;
  /// After join(): seconds from start() to the end of the last file's
  /// fsync (or the failure).
  double seconds() const;
  /// After join(): the write's start and end on Tracer::now_ns()'s clock
  /// (for its trace span).
  std::int64_t begin_ns() const { return begin_ns_; }
  std::int64_t end_ns() const { return end_ns_; }

 private:
  void run(std::vector<StagedFile> files, int rank);

  std::thread thread_;
  std::mutex tid_mutex_;  // guards tid_ against the thread's end
  int tid_ = 0;           // the writer thread's id while it runs, else 0
  std::atomic<bool> finished_{false};
  std::vector<WrittenFile> results_;
  std::exception_ptr error_;
  std::int64_t begin_ns_ = 0, end_ns_ = 0;
};

}  // namespace zeroshard
