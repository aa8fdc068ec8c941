// IoEngine: asynchronous reads and writes of whole buffers to and from open
// files, the I/O layer under the NVMe offload tier.
//
// [Note: I/O engine model]
// A caller submits a batch of requests and gets a ticket; wait(ticket)
// blocks until every request of the batch has finished and throws IoError if
// any failed. Each request is split into pieces of AioConfig::block_size
// bytes; short transfers are continued for the remainder. Two engines
// implement the interface:
//   - IoUringEngine (offload/io/io_uring_engine.h): one ring with up to
//     queue_depth pieces in flight, driven by one reaper thread, registered
//     buffers where the caller registered them;
//   - ThreadPoolIoEngine (offload/io/thread_pool_io_engine.h): pread/pwrite on
//     intra_op_parallelism threads, used when io_uring is unavailable.
// make_io_engine() picks one and says on stderr (once) why it fell back.
// Batches are served in submission order. After a piece fails, no new piece
// of that batch is issued, the pieces already in flight are reaped, and then
// wait() throws; a batch never hangs on an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "offload/io/aio_config.h"
#include "offload/io/file_handle.h"

namespace zeroshard {

/// Direction of a request.
enum class IoOp { read, write };

/// One whole-buffer transfer: `length` bytes between `buffer` and `file` at
/// byte `offset`. For a file opened with O_DIRECT, buffer, offset and
/// length must be multiples of kDirectIoAlignment (an InvariantError
/// otherwise). The file and buffer must stay valid until the batch is
/// waited for (or the engine is destroyed).
struct IoRequest {
  IoOp op = IoOp::read;
  const FileHandle* file = nullptr;
  std::uint64_t offset = 0;   ///< bytes into the file
  std::byte* buffer = nullptr;
  std::uint64_t length = 0;   ///< bytes; 0 is allowed and does nothing
};

/// Names a submitted batch. Plain value; wait on each ticket exactly once.
struct IoTicket {
  std::uint64_t id = 0;  ///< 0: an empty batch, already complete
};

/// Asynchronous whole-buffer I/O engine (see [Note: I/O engine model]).
/// Thread safety: submit, wait, is_done may be called from any thread
/// concurrently; register_buffers only when no batch is outstanding.
class IoEngine {
 public:
  virtual ~IoEngine() = default;

  /// Starts every request of `batch` and returns at once. An empty batch
  /// returns the ticket {0}. Throws InvariantError for a misaligned O_DIRECT
  /// request or a null file/buffer, and IoError if the engine is broken.
  virtual IoTicket submit(std::span<const IoRequest> batch) = 0;

  /// Blocks until the batch is complete. Throws IoError (naming the file,
  /// offset, length and errno text of the first failure, and how many more
  /// failed) after every in-flight piece of the batch has been reaped. An
  /// unknown or already-waited ticket is an InvariantError.
  virtual void wait(IoTicket ticket) = 0;

  /// True when wait(ticket) would not block. Does not consume the ticket.
  virtual bool is_done(IoTicket ticket) = 0;

  /// Registers host buffers with the kernel (io_uring fixed buffers) so that
  /// pieces inside them skip per-I/O page pinning; replaces any earlier
  /// registration; an empty span unregisters. Returns true if registered,
  /// false if this engine does not use registration or the kernel refused
  /// (logged once; I/O then works unregistered). Requires that no batch is
  /// outstanding (InvariantError otherwise). The buffers must stay
  /// allocated until they are unregistered or the engine is destroyed.
  virtual bool register_buffers(std::span<const std::span<std::byte>> buffers) = 0;

  /// "io_uring" or "thread_pool".
  virtual std::string_view name() const = 0;

  /// The configuration the engine runs with.
  virtual const AioConfig& config() const = 0;
};

/// Creates the io_uring engine, or the thread-pool engine when the build has
/// no liburing, when `cfg.force_no_io_uring` or ZS_FORCE_NO_IO_URING=1 is
/// set, or when io_uring_queue_init fails (ENOSYS under seccomp, EPERM from
/// kernel.io_uring_disabled, EOPNOTSUPP, ENOMEM); the fallback is logged to
/// stderr once per cause, naming it. Throws ConfigError for an invalid
/// `cfg` and std::system_error if threads cannot be started.
std::unique_ptr<IoEngine> make_io_engine(const AioConfig& cfg);

}  // namespace zeroshard
