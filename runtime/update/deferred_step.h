// DeferredStep: one optimizer step over swapped state (ShardOptimizer::step
// with arrays on nvme) run on a background thread, so that its swap I/O
// overlaps the training loop's next forward (zeroshard.
// overlap_optimizer_step). The engine waits for unit u's update before
// anything reads u's parameters (wait_unit, at the unshard's all-gather),
// and for the whole step before anything else reads or writes the arrays
// or swap files (finish). The update is the same call with the same
// arguments in the same order, so the result is bitwise the synchronous
// step's.

#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tracer.h"
#include "offload/host_pool.h"
#include "runtime/sharding/array_store.h"
#include "runtime/update/shard_optimizer.h"

// [Note: deferred optimizer step]
// At stage 3 with state on nvme, step() is compute-free: the loop waits
// while the swap pipeline reads and writes 16 and 14 bytes per shard
// element (master weights, exp_avg, exp_avg_sq, the fp32 gradient; the
// states and the compute-dtype copy back), and the next forward then waits
// for nothing. Deferred, the update walks the units in order on its own
// thread while the forward walks them in the same order, each unshard
// waiting only for its own unit. Rules that keep it exact and race-free:
//   - one thread drives the swap directories at a time: while a step runs,
//     the engine's thread reads no swap file. A unit's updated parameter
//     shard is handed over in memory (a copy into a host buffer of the
//     shard's size), which the unshard adopts as the unit's swap-in
//     buffer. At most `max_handoffs` are held untaken: the thread waits for
//     the engine to take one before it updates the next unit, unless the
//     engine waits for that unit (it then gets one more) or a later one, or
//     is finishing (then none). A unit without a handoff is read after
//     finish();
//   - the gradients the update reads stay until finish(): the next
//     micro-batch's reductions, and every other engine call that touches
//     state (step, save, load, gather, set_parameter), finish first;
//   - an error of the background step is kept and thrown by wait_unit and
//     finish (the engine agrees on it across ranks there, [Note: storage
//     phases]).
// The memory ledger (thread safe) counts the handoff buffers as unsharded
// host bytes while they are held. What it buys is the forward's compute
// hidden under the update's swap I/O, less the update's own CPU work now
// taken from the cores the loop computes on: on 2 cores, nothing
// (bench/infinity/README.md).

namespace zeroshard {

/// DeferredStep's default max_handoffs (the memory estimate counts these
/// and the adopted ones at their worst case, runtime/plan/memory_replay.cpp).
inline constexpr int kDeferredStepHandoffs = 2;

/// See the file comment. Thread safety: every member is called from the
/// engine's thread; the background thread is internal.
class DeferredStep {
 public:
  /// `store` and `optimizer` must outlive this object; `tracer` (may be
  /// null) gets the step's sub-group and I/O spans. `max_handoffs`: updated
  /// parameter shards held for the unshard at most at once (>= 0).
  DeferredStep(ArrayStore& store, ShardOptimizer& optimizer, Tracer* tracer, int max_handoffs = kDeferredStepHandoffs);
  /// Joins the thread (its error, if any, is dropped).
  ~DeferredStep();
  DeferredStep(const DeferredStep&) = delete;
  DeferredStep& operator=(const DeferredStep&) = delete;

  /// Starts optimizer.step(store, step, grad_scale) on the background
  /// thread. The caller must not touch the store's swap files until
  /// finish(). Throws InvariantError while a step is pending,
  /// std::system_error if the thread cannot start.
  void start(std::int64_t step, float grad_scale);
  /// True from start() until finish() or discard().
  bool pending() const { return thread_.joinable(); }
  /// Blocks until unit u's update has run (at once when none is pending)
  /// and returns its updated parameter shard (compute dtype, the unit's
  /// shard bytes) when a handoff was made for it, else an invalid buffer:
  /// the caller then must finish() before reading u's swap file. Throws
  /// the background step's error.
  HostBuffer wait_unit(UnitId u);
  /// The handoff of unit u if its update has run and one was made, without
  /// blocking; otherwise an invalid buffer. Never throws.
  HostBuffer take_ready(UnitId u) noexcept;
  /// True when no step is pending or the pending one has ended (then the
  /// swap files may be used after finish()). Never throws.
  bool ended() const noexcept;
  /// Joins the pending step, if any, and drops the handoffs not taken;
  /// then rethrows the step's error, if it had one.
  void finish();
  /// finish() with the error dropped (after the engine's state was
  /// replaced, e.g. by load_checkpoint). Never throws.
  void discard() noexcept;

 private:
  void run(std::int64_t step, float grad_scale) noexcept;
  void close() noexcept;
  void on_updated(UnitId u, std::size_t g, const std::byte* params, std::size_t begin, std::size_t end);

  ArrayStore& store_;
  ShardOptimizer& optimizer_;
  Tracer* tracer_;
  int max_handoffs_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // Guarded by mutex_: units [0, done_) have been updated; `ended_` once the
  // thread's step returned (error_ set if it threw).
  UnitId done_ = 0;
  bool ended_ = true;
  std::exception_ptr error_;
  std::vector<HostBuffer> handoffs_;  // per unit; filled by the thread, taken by the engine
  int held_ = 0;                      // handoffs made and not yet taken
  bool closing_ = false;              // finish() or discard() began: no more handoffs
  UnitId waiting_for_ = -1;           // the unit wait_unit blocks on, else -1
};

}  // namespace zeroshard
