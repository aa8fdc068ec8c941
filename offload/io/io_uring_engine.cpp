#include "offload/io/io_uring_engine.h"

#include <algorithm>
#include <cerrno>
#include <deque>

#include <fmt/format.h>
#include <liburing.h>
#include <sys/uio.h>

#include "core/error.h"
#include "offload/io/os_error.h"

namespace zeroshard {

namespace {

constexpr std::size_t kMaxRegisteredBytes = std::size_t{1} << 30;  // kernel limit per fixed buffer

bool transient(int err) { return err == EINTR || err == EAGAIN || err == EBUSY || err == ETIME; }

}  // namespace

/// The owning type of one struct io_uring.
struct IoUringEngine::Ring {
  io_uring ring{};
  bool live = false;  // io_uring_queue_init succeeded
  Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring() {
    if (live) io_uring_queue_exit(&ring);
  }
};

std::unique_ptr<IoUringEngine> IoUringEngine::try_create(const AioConfig& cfg, int& err) {
  cfg.validate();
  auto ring = std::make_unique<Ring>();
  const int rc = io_uring_queue_init(static_cast<unsigned>(cfg.queue_depth), &ring->ring, 0);
  if (rc < 0) {
    err = -rc;
    return nullptr;
  }
  ring->live = true;
  err = 0;
  return std::make_unique<IoUringEngine>(Key{}, cfg, std::move(ring));
}

IoUringEngine::IoUringEngine(Key, const AioConfig& cfg, std::unique_ptr<Ring> ring)
    : cfg_(cfg), table_(cfg.block_size), ring_(std::move(ring)) {
  reaper_ = std::jthread([this] { run(); });
}

IoUringEngine::~IoUringEngine() {
  table_.request_stop();
  if (reaper_.joinable()) reaper_.join();
}

IoTicket IoUringEngine::submit(std::span<const IoRequest> batch) { return table_.submit(batch); }

void IoUringEngine::wait(IoTicket ticket) { table_.wait(ticket); }

bool IoUringEngine::is_done(IoTicket ticket) { return table_.is_done(ticket); }

bool IoUringEngine::register_buffers(std::span<const std::span<std::byte>> buffers) {
  std::lock_guard lk(table_.mutex());
  ZS_CHECK(table_.idle_locked(), "register_buffers called while I/O batches are outstanding");
  if (!registered_.empty()) {
    io_uring_unregister_buffers(&ring_->ring);
    registered_.clear();
  }
  std::vector<iovec> iov;
  std::vector<Registered> regs;
  for (const std::span<std::byte>& b : buffers) {
    for (std::size_t off = 0; off < b.size(); off += kMaxRegisteredBytes) {
      const std::size_t n = std::min(kMaxRegisteredBytes, b.size() - off);
      iov.push_back(iovec{b.data() + off, n});
      regs.push_back(Registered{b.data() + off, n, static_cast<int>(regs.size())});
    }
  }
  if (iov.empty()) return true;
  const int rc = io_uring_register_buffers(&ring_->ring, iov.data(), static_cast<unsigned>(iov.size()));
  if (rc < 0) {
    log_once(fmt::format("io_uring_register_buffers of {} buffers failed: {}; I/O continues with "
                         "unregistered buffers",
                         iov.size(), errno_text(-rc)));
    return false;
  }
  std::sort(regs.begin(), regs.end(), [](const Registered& a, const Registered& b) { return a.base < b.base; });
  registered_ = std::move(regs);
  return true;
}

int IoUringEngine::fixed_index_locked(const std::byte* p, std::size_t n) const {
  auto it = std::upper_bound(registered_.begin(), registered_.end(), p,
                             [](const std::byte* x, const Registered& r) { return x < r.base; });
  if (it == registered_.begin()) return -1;
  --it;
  return p + n <= it->base + it->length ? it->index : -1;
}

void IoUringEngine::run() {
  io_uring* ring = &ring_->ring;
  const auto qd = static_cast<unsigned>(cfg_.queue_depth);
  std::vector<IoPiece> slots(qd);
  std::vector<unsigned> free_slots(qd);
  for (unsigned i = 0; i < qd; ++i) free_slots[i] = qd - 1 - i;
  std::deque<IoPiece> resubmit;  // remainders of short transfers, retries
  unsigned inflight = 0;
  struct Reaped {
    unsigned slot;
    int res;
  };
  std::vector<Reaped> reaped;
  reaped.reserve(2 * qd);

  const auto fatal = [&](int err, const char* call) {
    table_.fail_all_locked(fmt::format(
        "io_uring engine failed: {} returned {}; every outstanding I/O batch failed, and new batches "
        "will be refused (set ZS_FORCE_NO_IO_URING=1 to use the pread/pwrite engine)",
        call, errno_text(err)));
    resubmit.clear();
    inflight = 0;
    free_slots.resize(qd);
    for (unsigned i = 0; i < qd; ++i) free_slots[i] = qd - 1 - i;
  };

  std::unique_lock lk(table_.mutex());
  for (;;) {
    if (cfg_.overlap_events || inflight == 0) {
      while (inflight < qd) {
        IoPiece p;
        if (!resubmit.empty()) {
          p = resubmit.front();
          resubmit.pop_front();
        } else if (!table_.next_piece_locked(p)) {
          break;
        }
        if (p.inject_errno != 0) {
          const int e = p.inject_errno;
          p.inject_errno = 0;
          if (table_.complete_locked(p, -e) == PieceNext::resubmit) resubmit.push_back(p);
          continue;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (sqe == nullptr) {  // SQ full of unsubmitted entries: submit below, retry later
          resubmit.push_front(p);
          break;
        }
        const unsigned s = free_slots.back();
        free_slots.pop_back();
        slots[s] = p;
        const auto len = static_cast<unsigned>(p.length);
        const int fixed = fixed_index_locked(p.buffer, p.length);
        if (p.op == IoOp::read) {
          if (fixed >= 0) {
            io_uring_prep_read_fixed(sqe, p.fd, p.buffer, len, p.offset, fixed);
          } else {
            io_uring_prep_read(sqe, p.fd, p.buffer, len, p.offset);
          }
        } else {
          if (fixed >= 0) {
            io_uring_prep_write_fixed(sqe, p.fd, p.buffer, len, p.offset, fixed);
          } else {
            io_uring_prep_write(sqe, p.fd, p.buffer, len, p.offset);
          }
        }
        io_uring_sqe_set_data64(sqe, s);
        ++inflight;
        if (cfg_.single_submit) {
          const int rc = io_uring_submit(ring);
          if (rc < 0 && !transient(-rc)) {
            fatal(-rc, "io_uring_submit");
            break;
          }
        }
      }
    }
    if (inflight == 0) {
      if (!resubmit.empty()) continue;
      if (table_.stop_requested_locked()) return;
      table_.wait_for_work_locked(lk);
      continue;
    }
    lk.unlock();
    const int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && !transient(-rc)) {
      lk.lock();
      fatal(-rc, "io_uring_submit_and_wait");
      continue;
    }
    unsigned head;
    unsigned n = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(ring, head, cqe) {
      reaped.push_back(Reaped{static_cast<unsigned>(io_uring_cqe_get_data64(cqe)), cqe->res});
      ++n;
    }
    io_uring_cq_advance(ring, n);
    lk.lock();
    for (const Reaped& r : reaped) {
      IoPiece& p = slots[r.slot];
      free_slots.push_back(r.slot);
      --inflight;
      if (table_.complete_locked(p, r.res) == PieceNext::resubmit) resubmit.push_back(p);
    }
    reaped.clear();
  }
}

}  // namespace zeroshard
