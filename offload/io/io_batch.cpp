#include "offload/io/io_batch.h"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "core/error.h"
#include "offload/io/fault_injection.h"
#include "offload/io/os_error.h"

namespace zeroshard {

namespace {

// A piece that keeps getting EINTR/EAGAIN is failed after this many retries
// rather than spinning forever.
constexpr int kMaxRetries = 1000;

const char* op_name(IoOp op) { return op == IoOp::read ? "read of" : "write of"; }

}  // namespace

/// One submitted batch: its requests, the cursor of the next piece to issue,
/// the pieces in flight and the first error.
class IoBatch {
 public:
  std::vector<IoRequest> requests;
  std::vector<int> inject;        // per request: errno for its last piece, or 0
  std::uint32_t next_request = 0;  // cursor of the next piece to issue
  std::uint64_t next_offset = 0;   // bytes into requests[next_request]
  int inflight = 0;                // pieces handed out and not retired
  bool done = false;
  std::string error;               // first failure
  std::uint64_t more_failures = 0;

  bool failed() const { return !error.empty(); }
  bool all_issued() const { return next_request >= requests.size(); }
  bool finished() const { return inflight == 0 && (failed() || all_issued()); }

  void skip_empty() {
    while (next_request < requests.size() && requests[next_request].length == 0) ++next_request;
  }

  void record(std::string message) {
    if (error.empty()) {
      error = std::move(message);
    } else {
      ++more_failures;
    }
  }
};

IoBatchTable::IoBatchTable(std::uint64_t block_size) : block_size_(block_size) {}

IoBatchTable::~IoBatchTable() = default;

IoTicket IoBatchTable::submit(std::span<const IoRequest> batch) {
  auto b = std::make_unique<IoBatch>();
  b->requests.assign(batch.begin(), batch.end());
  b->inject.assign(batch.size(), 0);
  bool any = false;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const IoRequest& r = batch[i];
    ZS_CHECK(r.file != nullptr && r.file->valid(), "I/O request {} of a batch has no open file", i);
    if (r.length == 0) continue;
    ZS_CHECK(r.buffer != nullptr, "I/O request {} on {} has a null buffer", i, r.file->path().string());
    if (r.file->direct()) {
      const auto addr = reinterpret_cast<std::uintptr_t>(r.buffer);
      ZS_CHECK(addr % kDirectIoAlignment == 0 && r.offset % kDirectIoAlignment == 0 &&
                   r.length % kDirectIoAlignment == 0,
               "O_DIRECT request on {} is not 4 KiB aligned (buffer {:#x}, offset {}, length {}); "
               "pad it (see SwapDirectory) or open the file without O_DIRECT",
               r.file->path().string(), addr, r.offset, r.length);
    }
    any = true;
  }
  if (!any) return IoTicket{0};
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].length != 0) b->inject[i] = take_io_fault(batch[i].op);
  }
  b->skip_empty();
  std::unique_lock lk(mu_);
  if (!broken_.empty()) throw IoError(broken_);
  const std::uint64_t id = next_id_++;
  active_.push_back(b.get());
  batches_.emplace(id, std::move(b));
  lk.unlock();
  work_cv_.notify_all();
  return IoTicket{id};
}

void IoBatchTable::wait(IoTicket ticket) {
  if (ticket.id == 0) return;
  std::unique_lock lk(mu_);
  const auto it = batches_.find(ticket.id);
  ZS_CHECK(it != batches_.end(), "I/O ticket {} is unknown or was already waited for", ticket.id);
  IoBatch* b = it->second.get();
  done_cv_.wait(lk, [b] { return b->done; });
  std::string error = std::move(b->error);
  const std::uint64_t more = b->more_failures;
  batches_.erase(ticket.id);
  lk.unlock();
  if (!error.empty()) {
    if (more != 0) error += fmt::format(" (and {} more failed pieces in the same batch)", more);
    throw IoError(error);
  }
}

bool IoBatchTable::is_done(IoTicket ticket) {
  if (ticket.id == 0) return true;
  std::lock_guard lk(mu_);
  const auto it = batches_.find(ticket.id);
  ZS_CHECK(it != batches_.end(), "I/O ticket {} is unknown or was already waited for", ticket.id);
  return it->second->done;
}

bool IoBatchTable::idle_locked() const {
  return std::all_of(batches_.begin(), batches_.end(), [](const auto& kv) { return kv.second->done; });
}

bool IoBatchTable::next_piece_locked(IoPiece& out) {
  while (!active_.empty()) {
    IoBatch& b = *active_.front();
    if (b.failed() || b.all_issued()) {
      active_.pop_front();
      continue;
    }
    const std::uint32_t i = b.next_request;
    const IoRequest& r = b.requests[i];
    const std::uint64_t n = std::min(block_size_, r.length - b.next_offset);
    out = IoPiece{};
    out.batch = &b;
    out.request = i;
    out.op = r.op;
    out.fd = r.file->fd();
    out.offset = r.offset + b.next_offset;
    out.buffer = r.buffer + b.next_offset;
    out.length = n;
    b.next_offset += n;
    if (b.next_offset == r.length) {
      out.inject_errno = b.inject[i];
      ++b.next_request;
      b.next_offset = 0;
      b.skip_empty();
    }
    ++b.inflight;
    if (b.all_issued()) active_.pop_front();  // a done batch may be freed by wait()
    return true;
  }
  return false;
}

void IoBatchTable::wait_for_work_locked(std::unique_lock<std::mutex>& lk) {
  work_cv_.wait(lk, [this] { return !active_.empty() || stop_; });
}

PieceNext IoBatchTable::complete_locked(IoPiece& p, std::int64_t result) {
  IoBatch& b = *p.batch;
  const IoRequest& r = b.requests[p.request];
  if (result < 0) {
    const int err = static_cast<int>(-result);
    const bool transient = err == EINTR || err == EAGAIN;
    if (transient && p.retries < kMaxRetries && !b.failed()) {
      ++p.retries;
      return PieceNext::resubmit;
    }
    if (!(transient && b.failed())) b.record(io_failure_message(op_name(p.op), r.file->path(), p.offset, p.length, err));
  } else if (result == 0) {
    b.record(fmt::format("{} {} failed at offset {} ({} bytes): {}", op_name(p.op), r.file->path().string(),
                         p.offset, p.length,
                         p.op == IoOp::read ? "unexpected end of file (the file is shorter than the request)"
                                            : "no progress (0 bytes written)"));
  } else {
    const auto n = std::min<std::uint64_t>(static_cast<std::uint64_t>(result), p.length);
    p.offset += n;
    p.buffer += n;
    p.length -= n;
    if (p.length != 0 && !b.failed()) return PieceNext::resubmit;
  }
  retire_locked(b);
  return PieceNext::retire;
}

void IoBatchTable::retire_locked(IoBatch& b) {
  --b.inflight;
  if (b.finished()) {
    b.done = true;
    // A failed batch may still be queued; wait() may free it from now on.
    const auto it = std::find(active_.begin(), active_.end(), &b);
    if (it != active_.end()) active_.erase(it);
    done_cv_.notify_all();
  }
}

void IoBatchTable::fail_all_locked(const std::string& message) {
  broken_ = message;
  for (auto& [id, b] : batches_) {
    if (b->done) continue;
    b->record(message);
    b->inflight = 0;
    b->done = true;
  }
  active_.clear();
  done_cv_.notify_all();
}

void IoBatchTable::request_stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
}

}  // namespace zeroshard
