// ThreadPoolIoEngine: the fallback IoEngine that moves bytes with
// pread/pwrite on AioConfig::intra_op_parallelism threads (see [Note: I/O
// engine model] in offload/io/io_engine.h). Used when io_uring is unavailable
// or disabled; also works for files opened without O_DIRECT.
#pragma once

#include <thread>
#include <vector>

#include "offload/io/io_batch.h"
#include "offload/io/io_engine.h"

namespace zeroshard {

/// pread/pwrite engine. Each worker takes the next piece (block_size bytes)
/// and transfers it completely, continuing after short transfers and
/// retrying EINTR. Thread safety: as IoEngine. The destructor finishes every
/// submitted batch (errors of unwaited batches are dropped) and joins the
/// threads.
class ThreadPoolIoEngine final : public IoEngine {
 public:
  /// Starts cfg.intra_op_parallelism threads. Throws ConfigError for an
  /// invalid cfg, std::system_error if a thread cannot start.
  explicit ThreadPoolIoEngine(const AioConfig& cfg);
  ~ThreadPoolIoEngine() override;
  ThreadPoolIoEngine(const ThreadPoolIoEngine&) = delete;
  ThreadPoolIoEngine& operator=(const ThreadPoolIoEngine&) = delete;

  IoTicket submit(std::span<const IoRequest> batch) override;
  void wait(IoTicket ticket) override;
  bool is_done(IoTicket ticket) override;
  /// Registration has no meaning for pread/pwrite: checks that no batch is
  /// outstanding and returns false.
  bool register_buffers(std::span<const std::span<std::byte>> buffers) override;
  std::string_view name() const override { return "thread_pool"; }
  const AioConfig& config() const override { return cfg_; }

 private:
  void run();
  AioConfig cfg_;
  IoBatchTable table_;
  std::vector<std::jthread> workers_;
};

}  // namespace zeroshard
