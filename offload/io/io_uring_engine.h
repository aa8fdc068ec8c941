// IoUringEngine: the IoEngine on one io_uring (see [Note: I/O engine model]
// in offload/io/io_engine.h). Only compiled when liburing is found
// (ZS_HAVE_IO_URING); make_io_engine() is the one place that refers to it.
#pragma once

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "offload/io/io_batch.h"
#include "offload/io/io_engine.h"

namespace zeroshard {

/// io_uring engine. One reaper thread owns the ring: it keeps up to
/// queue_depth pieces of block_size bytes in flight (refilling on each
/// completion when overlap_events is set, in waves otherwise), resubmits the
/// remainder of short transfers and retries -EAGAIN/-EINTR completions.
/// Pieces that lie inside registered buffers use READ_FIXED/WRITE_FIXED.
/// Thread safety: as IoEngine. The destructor finishes every submitted batch
/// (errors of unwaited batches are dropped), then tears down the ring.
class IoUringEngine final : public IoEngine {
 public:
  /// Sets up a ring of cfg.queue_depth entries and starts the reaper.
  /// Returns nullptr and sets `err` (a positive errno) if
  /// io_uring_queue_init fails. Throws ConfigError for an invalid cfg,
  /// std::system_error if the thread cannot start.
  static std::unique_ptr<IoUringEngine> try_create(const AioConfig& cfg, int& err);
  struct Ring;
  /// Restricts construction to try_create (a passkey).
  class Key {
    friend class IoUringEngine;
    Key() = default;
  };
  /// Use try_create. Takes ownership of an initialised ring.
  IoUringEngine(Key, const AioConfig& cfg, std::unique_ptr<Ring> ring);
  ~IoUringEngine() override;
  IoUringEngine(const IoUringEngine&) = delete;
  IoUringEngine& operator=(const IoUringEngine&) = delete;

  IoTicket submit(std::span<const IoRequest> batch) override;
  void wait(IoTicket ticket) override;
  bool is_done(IoTicket ticket) override;
  /// io_uring_register_buffers on the given spans (split into pieces of at
  /// most 1 GiB, the kernel's limit per buffer). See IoEngine.
  bool register_buffers(std::span<const std::span<std::byte>> buffers) override;
  std::string_view name() const override { return "io_uring"; }
  const AioConfig& config() const override { return cfg_; }

 private:
  struct Registered {
    std::byte* base;
    std::size_t length;
    int index;
  };
  void run();
  int fixed_index_locked(const std::byte* p, std::size_t n) const;

  AioConfig cfg_;
  IoBatchTable table_;
  std::unique_ptr<Ring> ring_;
  std::vector<Registered> registered_;  // sorted by base; guarded by table_.mutex()
  std::jthread reaper_;
};

}  // namespace zeroshard
