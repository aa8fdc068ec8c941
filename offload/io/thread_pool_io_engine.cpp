#include "offload/io/thread_pool_io_engine.h"

#include <cerrno>

#include <unistd.h>

#include "core/error.h"

namespace zeroshard {

namespace {

// One pread or pwrite of the piece's remainder: bytes transferred or -errno.
std::int64_t transfer_once(const IoPiece& p) {
  const ssize_t n = p.op == IoOp::read
                        ? ::pread(p.fd, p.buffer, p.length, static_cast<off_t>(p.offset))
                        : ::pwrite(p.fd, p.buffer, p.length, static_cast<off_t>(p.offset));
  return n < 0 ? -static_cast<std::int64_t>(errno) : static_cast<std::int64_t>(n);
}

}  // namespace

ThreadPoolIoEngine::ThreadPoolIoEngine(const AioConfig& cfg) : cfg_(cfg), table_(cfg.block_size) {
  cfg_.validate();
  workers_.reserve(static_cast<std::size_t>(cfg_.intra_op_parallelism));
  try {
    for (int i = 0; i < cfg_.intra_op_parallelism; ++i) workers_.emplace_back([this] { run(); });
  } catch (...) {
    table_.request_stop();
    throw;
  }
}

ThreadPoolIoEngine::~ThreadPoolIoEngine() {
  table_.request_stop();
  workers_.clear();  // joins; workers drain the queue first
}

IoTicket ThreadPoolIoEngine::submit(std::span<const IoRequest> batch) { return table_.submit(batch); }

void ThreadPoolIoEngine::wait(IoTicket ticket) { table_.wait(ticket); }

bool ThreadPoolIoEngine::is_done(IoTicket ticket) { return table_.is_done(ticket); }

bool ThreadPoolIoEngine::register_buffers(std::span<const std::span<std::byte>>) {
  std::lock_guard lk(table_.mutex());
  ZS_CHECK(table_.idle_locked(), "register_buffers called while I/O batches are outstanding");
  return false;
}

void ThreadPoolIoEngine::run() {
  std::unique_lock lk(table_.mutex());
  for (;;) {
    IoPiece p;
    if (!table_.next_piece_locked(p)) {
      if (table_.stop_requested_locked()) return;
      table_.wait_for_work_locked(lk);
      continue;
    }
    lk.unlock();
    PieceNext next = PieceNext::resubmit;
    while (next == PieceNext::resubmit) {
      std::int64_t result;
      if (p.inject_errno != 0) {
        result = -static_cast<std::int64_t>(p.inject_errno);
        p.inject_errno = 0;
      } else {
        result = transfer_once(p);
      }
      lk.lock();
      next = table_.complete_locked(p, result);
      lk.unlock();
    }
    lk.lock();
  }
}

}  // namespace zeroshard
