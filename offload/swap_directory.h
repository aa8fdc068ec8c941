// SwapDirectory: named swap files under one directory, written and read
// whole through an IoEngine; the layer the swapper of the NVMe offload tier
// builds on.
//
// [Note: swap file format and update protocol]
// A file holds the caller's bytes padded with zeros to a multiple of 4 KiB,
// so O_DIRECT can transfer it; the logical size is kept in the SwapFile
// record, not on disk, and a read returns exactly the bytes written. A write
// never touches the current file: it goes to "<name>.<generation>.tmp",
// which is fdatasync'ed when every piece has completed and only then renamed
// over "<name>" (then the directory is fsync'ed). A failed write (ENOSPC,
// EIO, a short write) removes the temporary file and leaves the previous
// generation intact and readable. The directory decides once, at
// construction, between O_DIRECT and buffered I/O: O_DIRECT unless
// force_buffered_io / ZS_FORCE_BUFFERED_IO=1 is set or the filesystem
// rejects it with EINVAL (logged once, naming the directory). The records
// (logical sizes) live in memory: swap files belong to one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "offload/io/file_handle.h"
#include "offload/io/io_engine.h"

namespace zeroshard {

class Tracer;  // core/tracer.h

/// What the directory knows about one swap file. Plain value.
struct SwapFile {
  std::string key;               ///< the caller's key
  std::filesystem::path path;    ///< current file
  std::uint64_t logical_size = 0;  ///< bytes written by the caller
  std::uint64_t padded_size = 0;   ///< bytes on disk: logical_size rounded up to 4096
  std::uint64_t generation = 0;    ///< completed writes of this key (1 after the first)
};

/// One file of a batch. For a write, `buffer` holds `bytes` bytes of data
/// and must be at least padded_size(bytes) long (the pad is zeroed in
/// place); for a read, `buffer` receives the file and must be at least its
/// padded_size long (`bytes` is ignored). With O_DIRECT the buffer address
/// must be 4 KiB aligned (HostBuffer and AlignedBuffer are).
struct SwapItem {
  std::string_view key;
  std::span<std::byte> buffer;
  std::uint64_t bytes = 0;
};

class SwapDirectory;

/// Writes or reads in flight, started by SwapDirectory::write/read. wait()
/// completes them: for writes it also fsyncs and switches the files. The
/// buffers and the directory must outlive the batch. Move-only. Thread
/// safety: use from the thread that drives the directory.
class SwapBatch {
 public:
  SwapBatch(SwapBatch&& o) noexcept;
  SwapBatch& operator=(SwapBatch&& o) noexcept;
  SwapBatch(const SwapBatch&) = delete;
  SwapBatch& operator=(const SwapBatch&) = delete;
  /// Waits if wait() was not called; an error is then logged, not thrown.
  ~SwapBatch();

  /// Blocks until every file of the batch is transferred (and, for writes,
  /// synced and renamed into place). Throws IoError naming the file, offset,
  /// length and errno text of the first failure; all the batch's I/O has
  /// stopped by then, and for a failed write every key keeps its previous
  /// file. Later calls return at once.
  void wait();
  /// True when wait() would not block on I/O.
  bool done() const;
  /// When the batch was submitted: steady-clock nanoseconds
  /// (core/tracer.h's Tracer::now_ns), for the I/O spans of a trace.
  std::int64_t issued_ns() const { return issued_ns_; }
  /// Bytes the batch transfers (padded sizes, as submitted).
  std::uint64_t bytes() const { return bytes_; }

 private:
  friend class SwapDirectory;
  struct PendingWrite {
    std::string key;
    std::filesystem::path tmp;
    std::filesystem::path final_path;
    std::uint64_t logical = 0;
    std::uint64_t padded = 0;
    FileHandle file;
  };
  explicit SwapBatch(SwapDirectory* dir) : dir_(dir) {}
  void finish();
  SwapDirectory* dir_ = nullptr;
  IoTicket ticket_;
  bool waited_ = true;
  std::vector<PendingWrite> writes_;
  std::vector<FileHandle> reads_;
  std::int64_t issued_ns_ = 0;
  std::uint64_t bytes_ = 0;
};

/// batch.wait(), and when `tracer` is set (core/tracer.h): the time blocked
/// is charged to io_wait (a "swap_read_wait"/"swap_write_wait" span) and
/// the batch is kept as an I/O span ("swap_read"/"swap_write") from its
/// submission to the end of the wait. `write` says which the batch is.
/// Throws what wait() throws.
void wait_traced(SwapBatch& batch, Tracer* tracer, bool write);

/// Swap files under one directory, named from keys (offload/swap_naming.h).
/// Thread safety: not thread safe; drive it and its batches from one
/// thread. Must outlive its batches.
class SwapDirectory {
 public:
  /// Creates `dir` if needed and decides between O_DIRECT and buffered I/O
  /// (see the Note). `engine` must outlive the directory. Throws IoError if
  /// the directory cannot be created or opened.
  SwapDirectory(IoEngine& engine, std::filesystem::path dir, const AioConfig& cfg = {});
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  /// Bytes a payload of `bytes` takes on disk (rounded up to 4096).
  static std::uint64_t padded_size(std::uint64_t bytes);

  /// Starts writing every item as the new content of its key. Throws
  /// InvariantError for a buffer that is too short or misaligned, a key
  /// written twice in the batch or already being written by another batch;
  /// IoError if a temporary file cannot be created (nothing is then left
  /// behind). I/O errors are thrown by SwapBatch::wait().
  SwapBatch write(std::span<const SwapItem> items);
  /// One-item write.
  SwapBatch write(std::string_view key, std::span<std::byte> buffer, std::uint64_t bytes);
  /// Starts reading every item's key into its buffer (the file's
  /// padded_size bytes; the first logical_size are the data). A key with a
  /// write in flight reads its previous generation. Throws InvariantError
  /// for an unknown key or a short or misaligned buffer, IoError if a file
  /// cannot be opened.
  SwapBatch read(std::span<const SwapItem> items);
  /// One-item read.
  SwapBatch read(std::string_view key, std::span<std::byte> buffer);

  /// The record of `key`, or nullptr if it was never written.
  const SwapFile* find(std::string_view key) const;
  /// Hard-links the current file of `key` to `to` (on the same file
  /// system): a snapshot of its content, which no later write changes (a
  /// write renames a new file over the name; see the Note). The link holds
  /// the key's padded_size bytes, its logical_size first. Returns false,
  /// making nothing, when the file system does not do hard links (EXDEV,
  /// EPERM, EMLINK, EOPNOTSUPP): the caller copies instead. Throws
  /// InvariantError for an unknown key or one being written, IoError naming
  /// both paths for another failure.
  bool link_current(std::string_view key, const std::filesystem::path& to) const;
  /// Deletes the file of `key` (no-op for an unknown key). Throws
  /// InvariantError while a write of it is in flight, IoError if unlink
  /// fails.
  void remove(std::string_view key);
  /// Deletes every file this directory wrote.
  void remove_all();

  /// Path the file of `key` has (or would have).
  std::filesystem::path path_for(std::string_view key) const;
  const std::filesystem::path& path() const { return dir_; }
  /// Whether files are opened with O_DIRECT.
  bool direct() const { return direct_; }
  /// Sum of padded_size over all files, bytes.
  std::uint64_t disk_bytes() const;
  IoEngine& engine() const { return engine_; }

 private:
  friend class SwapBatch;
  void abandon(std::vector<SwapBatch::PendingWrite>& writes) noexcept;
  void commit(std::vector<SwapBatch::PendingWrite>& writes);
  IoEngine& engine_;
  std::filesystem::path dir_;
  FileHandle dir_fd_;
  bool direct_ = true;
  std::uint64_t next_generation_ = 1;
  std::map<std::string, SwapFile, std::less<>> files_;
  std::set<std::string, std::less<>> writing_;
};

}  // namespace zeroshard
