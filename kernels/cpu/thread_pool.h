// A small persistent thread pool for the element-wise CPU kernels.
//
// Threads are created once (on first use, or when the thread count changes)
// and sleep on a futex between calls. A call splits [0, n) into at most
// num_threads() contiguous chunks whose boundaries are multiples of an
// alignment (in elements), runs chunk 0 on the calling thread and the others
// on the workers, and returns when all are done. A call allocates nothing.
//
// Kernels built on the pool are written so that their results do not depend
// on how [0, n) is split: element-wise kernels compute each element alone, and
// reductions combine fixed-size parts in a fixed order (see grad_check.h).
//
// Thread count: std::thread::hardware_concurrency() by default; the
// environment variable ZS_NUM_THREADS (a positive integer) overrides it, and
// set_num_threads() overrides both.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace zeroshard::kernels {

/// Non-owning, non-allocating reference to a callable
/// `void(std::size_t chunk, std::size_t begin, std::size_t end)`.
/// The callable must outlive the call it is passed to and must not throw
/// (an exception escaping a worker thread terminates the process).
class ChunkFn {
 public:
  template <class F>
  ChunkFn(const F& f)  // NOLINT(google-explicit-constructor): by design
      : obj_(&f), call_([](const void* o, std::size_t c, std::size_t b, std::size_t e) {
          (*static_cast<const F*>(o))(c, b, e);
        }) {}
  void operator()(std::size_t chunk, std::size_t begin, std::size_t end) const {
    call_(obj_, chunk, begin, end);
  }

 private:
  const void* obj_;
  void (*call_)(const void*, std::size_t, std::size_t, std::size_t);
};

/// A fixed set of worker threads plus the calling thread.
/// Thread safety: parallel_for may be called from any thread, concurrently
/// and re-entrantly; a call that finds the pool busy runs its whole range on
/// the calling thread (same result, kernels being split-independent).
/// resize() waits for a running call to finish.
class ThreadPool {
 public:
  /// threads >= 1 (total, including the caller): starts threads - 1 workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Total threads that take part in a call (workers + caller).
  int size() const { return threads_.load(std::memory_order_relaxed); }

  /// Stops the workers and starts threads - 1 new ones (threads >= 1).
  void resize(int threads);

  /// Runs fn over [0, n) split into c = min(size(), max(1, n / min_chunk))
  /// contiguous chunks; chunk k is [bound(k), bound(k+1)) with bound(k) =
  /// n*k/c rounded down to a multiple of `align` (elements; 64 makes chunk
  /// boundaries cache-line aligned for 64-byte-aligned arrays of 1-4 byte
  /// elements), bound(c) = n. Chunks may be empty. Returns when every chunk
  /// has run. Allocates nothing.
  void parallel_for(std::size_t n, std::size_t align, std::size_t min_chunk, ChunkFn fn);

  /// Number of chunks parallel_for uses for these arguments.
  std::size_t chunk_count(std::size_t n, std::size_t min_chunk) const;

 private:
  void start(int threads);
  void stop();
  void worker(int index, std::uint32_t seen);
  std::size_t bound(std::size_t k) const;

  std::mutex run_mutex_;  // one call at a time uses the workers
  std::vector<std::thread> workers_;
  std::atomic<int> threads_{1};
  // The current job, written by the caller before generation_ is bumped.
  const ChunkFn* job_fn_ = nullptr;
  std::size_t job_n_ = 0;
  std::size_t job_align_ = 1;
  std::size_t job_chunks_ = 0;
  bool stop_ = false;
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<std::uint32_t> pending_{0};
};

/// The pool every kernel in kernels/cpu uses, created on first use with
/// default_num_threads() threads. Throws ConfigError (first use only) if
/// ZS_NUM_THREADS is set but not a positive integer.
ThreadPool& kernel_pool();

/// hardware_concurrency() (at least 1), or ZS_NUM_THREADS when set.
/// Throws ConfigError if ZS_NUM_THREADS is malformed.
int default_num_threads();

/// Threads the kernels use (callers included).
int num_threads();

/// Sets the kernels' thread count; threads <= 0 restores
/// default_num_threads(). Results of every kernel are the same for any count.
void set_num_threads(int threads);

/// Elements below which an element-wise kernel does not split its range
/// (per chunk: a call on n elements uses at most n / kMinChunkElements chunks).
inline constexpr std::size_t kMinChunkElements = 16384;

/// Chunk boundary alignment used by the element-wise kernels, in elements.
inline constexpr std::size_t kChunkAlignElements = 64;

/// Convenience: kernel_pool().parallel_for(n, kChunkAlignElements,
/// kMinChunkElements, fn) with fn(begin, end).
template <class F>
void parallel_for_elements(std::size_t n, const F& fn) {
  const auto wrapped = [&fn](std::size_t, std::size_t b, std::size_t e) { fn(b, e); };
  kernel_pool().parallel_for(n, kChunkAlignElements, kMinChunkElements, wrapped);
}

/// Splits the blocks of `block` elements (> 0) that cover [0, n), the last
/// one possibly partial, over kernel_pool() in whole blocks, at least
/// kMinChunkElements elements per chunk, and calls fn(b, lo, hi) per chunk:
/// its first block b and its elements [lo, hi) (hi at most n). For the
/// blockwise kernels (8-bit states), whose blocks must not be split.
template <class F>
void parallel_for_blocks(std::size_t n, std::size_t block, const F& fn) {
  const auto wrapped = [&](std::size_t, std::size_t b, std::size_t e) {
    const std::size_t lo = b * block, hi = std::min(n, e * block);
    if (lo < hi) fn(b, lo, hi);
  };
  kernel_pool().parallel_for((n + block - 1) / block, 1,
                             std::max<std::size_t>(1, kMinChunkElements / block), wrapped);
}

}  // namespace zeroshard::kernels
