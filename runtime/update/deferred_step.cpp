// DeferredStep: see runtime/update/deferred_step.h.
#include "runtime/update/deferred_step.h"

#include <cstring>
#include <utility>

#include "core/error.h"

namespace zeroshard {

DeferredStep::DeferredStep(ArrayStore& store, ShardOptimizer& optimizer, Tracer* tracer, int max_handoffs)
    : store_(store), optimizer_(optimizer), tracer_(tracer), max_handoffs_(max_handoffs) {
  ZS_CHECK(max_handoffs >= 0, "DeferredStep: max_handoffs {} must be >= 0", max_handoffs);
}

DeferredStep::~DeferredStep() { discard(); }

void DeferredStep::start(std::int64_t step, float grad_scale) {
  ZS_CHECK(!thread_.joinable(), "DeferredStep::start: step {} begins before the previous one finished", step);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = 0;
    ended_ = false;
    error_ = nullptr;
    handoffs_.clear();
    handoffs_.resize(store_.unit_count());
    held_ = 0;
    closing_ = false;
    waiting_for_ = -1;
  }
  try {
    thread_ = std::thread([this, step, grad_scale] { run(step, grad_scale); });
  } catch (...) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
    throw;
  }
}

void DeferredStep::run(std::int64_t step, float grad_scale) noexcept {
  std::exception_ptr error;
  try {
    const TraceScope span(tracer_, "deferred_optimizer_step", TraceThread::engine, TimeCategory::optimizer);
    optimizer_.step(store_, step, grad_scale,
                    [this](UnitId u, std::size_t g, const std::byte* params, std::size_t begin, std::size_t end) {
                      on_updated(u, g, params, begin, end);
                    });
  } catch (...) {
    error = std::current_exception();
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  if (error) {
    error_ = error;
  } else {
    done_ = static_cast<UnitId>(store_.unit_count());
  }
  ended_ = true;
  changed_.notify_all();
}

void DeferredStep::on_updated(UnitId u, std::size_t g, const std::byte* params, std::size_t begin, std::size_t end) {
  const ArrayRef p{ArrayKind::params};
  HostBuffer& mine = handoffs_[static_cast<std::size_t>(u)];
  if (g == 0) {
    bool make = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_ = u;  // every earlier unit is updated
      changed_.notify_all();
      if (store_.tier(u, p) == MemTier::nvme) {
        // Room for u's handoff once the engine takes an earlier one; not
        // if it waits for u or a later unit (it would take none first), or
        // ends the step.
        changed_.wait(lock, [&] { return held_ < max_handoffs_ || closing_ || waiting_for_ >= u; });
        make = !closing_ && (held_ < max_handoffs_ || waiting_for_ == u);
        if (make) ++held_;
      }
    }
    // Outside the lock: the engine looks at unit u's buffer only once done_ > u.
    if (make) {
      const std::size_t bytes = store_.numel(u, p) * dtype_size(store_.dtype(u, p));
      mine = store_.host_pool().acquire(bytes, MemCategory::unsharded);
    }
  }
  if (mine.valid() && end > begin) {
    const std::size_t e = dtype_size(store_.dtype(u, p));
    std::memcpy(mine.data() + begin * e, params, (end - begin) * e);
  }
  if (g + 1 == store_.subgroups(u).size()) {
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = u + 1;
    changed_.notify_all();
  }
}

HostBuffer DeferredStep::wait_unit(UnitId u) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!(done_ > u || ended_)) {
    lock.unlock();
    const TraceScope span(tracer_, "wait_optimizer_step", TraceThread::engine, TimeCategory::optimizer);
    lock.lock();
    waiting_for_ = u;
    changed_.notify_all();  // the thread may be holding back u's handoff
    changed_.wait(lock, [&] { return done_ > u || ended_; });
    waiting_for_ = -1;
  }
  if (done_ > u) {
    if (static_cast<std::size_t>(u) >= handoffs_.size()) return {};  // finished: the handoffs are dropped
    HostBuffer& h = handoffs_[static_cast<std::size_t>(u)];
    if (h.valid()) --held_;
    return std::move(h);
  }
  if (error_) std::rethrow_exception(error_);
  return {};
}

HostBuffer DeferredStep::take_ready(UnitId u) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done_ <= u || static_cast<std::size_t>(u) >= handoffs_.size()) return {};
  HostBuffer& h = handoffs_[static_cast<std::size_t>(u)];
  if (h.valid()) --held_;
  return std::move(h);
}

bool DeferredStep::ended() const noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

// Lets a thread waiting for room for a handoff go on without one.
void DeferredStep::close() noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  closing_ = true;
  changed_.notify_all();
}

void DeferredStep::finish() {
  close();
  if (thread_.joinable()) thread_.join();
  std::vector<HostBuffer> drop;
  std::exception_ptr error;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    drop.swap(handoffs_);
    held_ = 0;
    error = error_;
  }
  drop.clear();  // the buffers go back to the pool outside the lock
  if (error) std::rethrow_exception(error);
}

void DeferredStep::discard() noexcept {
  close();
  if (thread_.joinable()) thread_.join();
  std::vector<HostBuffer> drop;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    drop.swap(handoffs_);
    held_ = 0;
    error_ = nullptr;
    done_ = 0;
    ended_ = true;
  }
}

}  // namespace zeroshard
