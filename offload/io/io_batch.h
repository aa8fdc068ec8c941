// IoBatchTable: the bookkeeping both I/O engines share (see [Note: I/O
// engine model] in offload/io/io_engine.h): tickets, the FIFO of batches with
// pieces left to issue, splitting requests into pieces, completion of
// pieces (short transfers, retries, errors) and waiting. An engine adds only
// the part that moves bytes: a ring (IoUringEngine) or threads calling
// pread/pwrite (ThreadPoolIoEngine).
//
// Locking: one mutex, returned by mutex(). Functions whose names end in
// _locked must be called with it held; the others take it themselves.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "offload/io/io_engine.h"

namespace zeroshard {

class IoBatch;

/// A part of one request, at most block_size bytes, that an engine issues as
/// one pread/pwrite or one io_uring SQE. offset/buffer/length describe the
/// bytes still to transfer (they advance after a short transfer).
struct IoPiece {
  IoBatch* batch = nullptr;
  std::uint32_t request = 0;  ///< index of the request in its batch
  IoOp op = IoOp::read;
  int fd = -1;
  std::uint64_t offset = 0;    ///< file offset, bytes
  std::byte* buffer = nullptr;
  std::uint64_t length = 0;    ///< bytes still to transfer
  int inject_errno = 0;  ///< test hook: complete with this errno instead of doing the I/O
  int retries = 0;       ///< EINTR/EAGAIN retries so far
};

/// What an engine does with a piece after complete_locked().
enum class PieceNext {
  retire,    ///< nothing more to do (finished, failed, or its batch failed)
  resubmit,  ///< issue the piece again for its (updated) remainder
};

/// Shared batch bookkeeping of the I/O engines. Thread safe as described in
/// the file comment.
class IoBatchTable {
 public:
  explicit IoBatchTable(std::uint64_t block_size);
  ~IoBatchTable();
  IoBatchTable(const IoBatchTable&) = delete;
  IoBatchTable& operator=(const IoBatchTable&) = delete;

  std::mutex& mutex() { return mu_; }

  // --- caller side ---

  /// Validates the requests (InvariantError), applies the fault-injection
  /// hook, queues the batch and wakes the workers. Throws IoError when the
  /// engine was marked broken.
  IoTicket submit(std::span<const IoRequest> batch);
  /// Blocks until the batch is done, forgets it, throws its IoError if any.
  void wait(IoTicket ticket);
  /// True when the batch is done (or the ticket is the empty ticket).
  bool is_done(IoTicket ticket);
  /// True when every known batch is done (nothing in flight or queued).
  bool idle_locked() const;

  // --- worker side (mutex held) ---

  /// Takes the next piece to issue, in FIFO order of batches; false when
  /// there is none. Counts the piece as in flight in its batch.
  bool next_piece_locked(IoPiece& out);
  /// Blocks (releasing the mutex) until a piece may be available or stop was
  /// requested.
  void wait_for_work_locked(std::unique_lock<std::mutex>& lk);
  /// Applies the result of issuing `p` once: `result` is the byte count
  /// transferred or -errno. Advances `p` after a short transfer.
  PieceNext complete_locked(IoPiece& p, std::int64_t result);
  /// Fails every unfinished batch with `message` and marks them done; later
  /// submit() calls throw IoError. For unrecoverable engine errors.
  void fail_all_locked(const std::string& message);
  /// Asks workers to exit once nothing is left to issue.
  void request_stop();
  bool stop_requested_locked() const { return stop_; }

 private:
  void retire_locked(IoBatch& b);
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::uint64_t block_size_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<IoBatch>> batches_;
  std::deque<IoBatch*> active_;  // batches that may have pieces left to issue
  bool stop_ = false;
  std::string broken_;  // non-empty after fail_all_locked
};

}  // namespace zeroshard
