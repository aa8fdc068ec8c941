#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace zeroshard::kernels {

namespace {

// True while this thread runs a chunk of some pool's job: a nested
// parallel_for then runs inline (try_lock on a mutex the thread already owns
// would be undefined behaviour).
thread_local bool t_in_chunk = false;

struct InChunk {
  InChunk() { t_in_chunk = true; }
  ~InChunk() { t_in_chunk = false; }
};

}  // namespace

ThreadPool::ThreadPool(int threads) { start(threads); }

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int threads) {
  ZS_CHECK(threads >= 1, "thread pool needs at least 1 thread, got {}", threads);
  stop_ = false;
  threads_.store(threads, std::memory_order_relaxed);
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  const std::uint32_t gen = generation_.load(std::memory_order_relaxed);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i, gen] { worker(i, gen); });
}

void ThreadPool::stop() {
  if (workers_.empty()) return;
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  threads_.store(1, std::memory_order_relaxed);
}

void ThreadPool::resize(int threads) {
  ZS_CHECK(threads >= 1, "thread pool needs at least 1 thread, got {}", threads);
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (threads == size()) return;
  stop();
  start(threads);
}

std::size_t ThreadPool::chunk_count(std::size_t n, std::size_t min_chunk) const {
  const std::size_t by_size = min_chunk == 0 ? n : n / min_chunk;
  return std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(size()), by_size));
}

std::size_t ThreadPool::bound(std::size_t k) const {
  if (k >= job_chunks_) return job_n_;
  // n * k / chunks without overflow for any realistic n (n < 2^64 / chunks).
  const std::size_t b = job_n_ / job_chunks_ * k + job_n_ % job_chunks_ * k / job_chunks_;
  return b / job_align_ * job_align_;
}

void ThreadPool::parallel_for(std::size_t n, std::size_t align, std::size_t min_chunk,
                              ChunkFn fn) {
  if (n == 0) return;
  if (t_in_chunk) {
    fn(0, 0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(run_mutex_, std::try_to_lock);
  const std::size_t chunks = lock.owns_lock() ? chunk_count(n, min_chunk) : 1;
  if (chunks <= 1 || workers_.empty()) {
    if (lock.owns_lock()) lock.unlock();  // a nested call may use the workers
    fn(0, 0, n);
    return;
  }
  job_fn_ = &fn;
  job_n_ = n;
  job_align_ = align == 0 ? 1 : align;
  job_chunks_ = chunks;
  // Every worker acknowledges every job (also those with no chunk), so no
  // worker can still be reading the job fields when the next job is set.
  pending_.store(static_cast<std::uint32_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  {
    const InChunk mark;
    fn(0, bound(0), bound(1));
  }
  for (std::uint32_t p = pending_.load(std::memory_order_acquire); p != 0;
       p = pending_.load(std::memory_order_acquire)) {
    pending_.wait(p, std::memory_order_acquire);
  }
  job_fn_ = nullptr;
}

void ThreadPool::worker(int index, std::uint32_t seen) {
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    const auto k = static_cast<std::size_t>(index);
    if (k < job_chunks_) {
      const InChunk mark;
      (*job_fn_)(k, bound(k), bound(k + 1));
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

int default_num_threads() {
  if (const char* env = std::getenv("ZS_NUM_THREADS"); env != nullptr && *env != '\0') {
    int v = 0;
    const char* end = env + std::strlen(env);
    const auto r = std::from_chars(env, end, v);
    if (r.ec != std::errc() || r.ptr != end || v < 1 || v > 4096) {
      throw ConfigError(fmt::format(
          "environment variable ZS_NUM_THREADS='{}' is not a thread count in [1, 4096]; "
          "unset it to use all {} hardware threads",
          env, std::thread::hardware_concurrency()));
    }
    return v;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool& kernel_pool() {
  static ThreadPool pool(default_num_threads());
  return pool;
}

int num_threads() { return kernel_pool().size(); }

void set_num_threads(int threads) {
  kernel_pool().resize(threads <= 0 ? default_num_threads() : threads);
}

}  // namespace zeroshard::kernels
