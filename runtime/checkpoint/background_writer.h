// BackgroundWriter: writes staged checkpoint files on a thread of its own
// while training goes on (Engine::save_checkpoint_async; [Note: async
// checkpoint] in runtime/engine/engine_save_async.cpp). It knows files and
// bytes, not engines: each file is written through a DurableFileWriter
// (running CRC-32, fsync) in pieces of kPieceBytes, and its size and CRC,
// or the first error, are kept for the engine's commit.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace zeroshard {

struct Manifest;

/// Bytes of host memory an async save of manifest `m` (its units, tensors,
/// state format; tag, step, world size, stage and compute dtype for the
/// weights' header) stages on `rank`: one rank file (m.file_bytes()), and
/// on rank 0 with `weights` (stage3_gather_16bit_weights_on_model_save)
/// the consolidated model.safetensors in `dtype`. Pure. Throws IoError as
/// plan_checkpoint_safetensors.
std::uint64_t async_staging_bytes(const Manifest& m, bool weights, DType dtype, int rank);

/// One file of a background write: `bytes` bytes at `data` (the caller's
/// staging memory, unchanged until the write is joined) go to `path`.
struct StagedFile {
  std::string path;
  const void* data = nullptr;
  std::size_t bytes = 0;
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
  /// Size of one write(2) of the writer (bytes): the granularity of the
  /// test hooks' delays and injected errors (runtime/checkpoint/save_hooks.h).
  static constexpr std::size_t kPieceBytes = std::size_t{8} << 20;
  /// The writer thread's nice value (Linux: per thread), above the
  /// training threads' 0 so that a write on shared cores yields to them.
  static constexpr int kNice = 10;

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
  /// Waits for the thread. No-op when nothing runs.
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
  std::atomic<bool> finished_{false};
  std::vector<WrittenFile> results_;
  std::exception_ptr error_;
  std::int64_t begin_ns_ = 0, end_ns_ = 0;
};

}  // namespace zeroshard
