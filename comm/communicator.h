// The Communicator interface: collectives over the data-parallel group.
//
// Modelled on gloo's transport-independent context and on NCCL's collective
// signatures. Implementations: comm/mpi (MPI-3 non-blocking collectives, CPU,
// multi-node), comm/self (world size 1, no MPI needed), comm/nccl (GPU).
//
// Conventions shared by every implementation:
//  - counts are in elements of the given DType, never bytes;
//  - every rank of the communicator must issue the same collectives in the
//    same order with the same counts (SPMD); a count of 0 is legal and still
//    a collective every rank joins;
//  - a non-blocking call returns a CommWork handle; the buffers must stay
//    alive and untouched until wait() returns (or the handle is destroyed,
//    which waits);
//  - a Communicator object is used from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace zeroshard {

class SideChannel;  // comm/side_channel.h

/// Reduction operator. For bf16/f16 the sum is computed in fp32 for each
/// pair of operands and rounded back to the 16-bit type (MPI has no native
/// 16-bit float sum; see comm/mpi/mpi_types.h for the definition).
enum class ReduceOp { sum, max, min };

/// Handle on an outstanding non-blocking collective.
/// Thread safety: use from the thread that started it.
class CommWork {
 public:
  /// Implementation hook; one per backend.
  class Impl {
   public:
    virtual ~Impl() = default;
    /// Blocks until the collective is complete. Throws CommError on failure.
    virtual void wait() = 0;
    /// Returns true once complete (never blocks; drives progress).
    virtual bool test() = 0;
  };

  CommWork() = default;
  explicit CommWork(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  CommWork(CommWork&&) noexcept = default;
  CommWork& operator=(CommWork&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      impl_ = std::move(other.impl_);
    }
    return *this;
  }
  CommWork(const CommWork&) = delete;
  CommWork& operator=(const CommWork&) = delete;
  /// Destroying a pending handle waits for it (buffers may be in use).
  ~CommWork() { finish_quietly(); }

  /// Blocks until complete; afterwards the handle is empty. No-op on an
  /// empty handle. Throws CommError on failure.
  void wait() {
    if (impl_) {
      auto impl = std::move(impl_);
      impl->wait();
    }
  }
  /// True if complete (or empty); a completed handle becomes empty.
  bool test() {
    if (!impl_) return true;
    if (impl_->test()) {
      impl_.reset();
      return true;
    }
    return false;
  }
  /// True while the collective may still be running.
  bool pending() const { return impl_ != nullptr; }

 private:
  void finish_quietly() noexcept {
    if (impl_) {
      try {
        impl_->wait();
      } catch (...) {
      }
      impl_.reset();
    }
  }
  std::unique_ptr<Impl> impl_;
};

/// Collectives over a fixed group of ranks. See the file comment for the
/// conventions. Blocking calls are, by default, the non-blocking ones
/// followed by wait(); backends may override them with native blocking calls.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This process's rank in [0, world_size()).
  virtual int rank() const = 0;
  /// Number of ranks (N_d).
  virtual int world_size() const = 0;
  /// Short description for logs ("mpi", "self", "nccl").
  virtual std::string backend() const = 0;

  /// In place: buf[0..count) on every rank becomes the reduction over ranks.
  virtual CommWork iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) = 0;
  /// send holds count * world_size() elements; recv (count elements, not
  /// overlapping send) receives block rank() of the reduction, as in
  /// MPI_Reduce_scatter_block / ncclReduceScatter.
  virtual CommWork ireduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                                   ReduceOp op) = 0;
  /// send holds count elements; recv (count * world_size() elements) receives
  /// every rank's block in rank order. send may alias recv + rank()*count
  /// (in-place gather), as with ncclAllGather.
  virtual CommWork iall_gather(const void* send, void* recv, std::size_t count, DType dtype) = 0;
  /// All-to-all without reduction: send holds world_size() blocks of count
  /// elements, block r for rank r; recv (count * world_size() elements, not
  /// overlapping send) receives, as its block j, the block rank j sent to
  /// this rank: MPI_Ialltoall, or grouped ncclSend/ncclRecv. The exchange
  /// step of the rank-ordered reductions (comm/ordered_reduce.h).
  virtual CommWork iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) = 0;
  /// buf[0..count) on root is copied to every rank.
  virtual CommWork ibroadcast(void* buf, std::size_t count, DType dtype, int root) = 0;
  /// Completes once every rank has entered it.
  virtual CommWork ibarrier() = 0;

  /// New communicator over the ranks that pass the same color, ordered by
  /// (key, old rank), as MPI_Comm_split. Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Ends every process of the job with exit status `code`: what a program
  /// does when one rank hits an error the others cannot see (they would
  /// otherwise wait forever in their next collective). MPI: MPI_Abort; the
  /// default (one process): std::_Exit. Does not return.
  [[noreturn]] virtual void abort(int code) { std::_Exit(code); }

  /// A SideChannel (comm/side_channel.h) over every process of the job
  /// (world ranks, whatever group this communicator spans), for the
  /// collective watchdog's hang reports. Collective over the whole job:
  /// every process must call it at the same point (MPI: MPI_Comm_dup of
  /// MPI_COMM_WORLD). The default is a LocalSideChannel when world_size()
  /// is 1 and otherwise throws CommError (the backend has no side channel);
  /// MpiCommunicator overrides it (CommError without MPI_THREAD_MULTIPLE).
  virtual std::unique_ptr<SideChannel> make_side_channel();

  // Blocking collectives. Each has the arguments, results and errors of its
  // non-blocking form (same checks, same count limits) and returns once this
  // rank's part is complete. The default is the non-blocking call followed
  // by wait(); a backend overrides them with its own blocking calls where
  // those are faster (MpiCommunicator: MPI_Allreduce, ...). Every rank must
  // use the same form for the same collective, as MPI matches blocking and
  // non-blocking collectives separately.

  /// Blocking iall_reduce: buf[0..count) on every rank becomes the
  /// reduction over ranks. Throws what iall_reduce and wait() throw.
  virtual void all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
    iall_reduce(buf, count, dtype, op).wait();
  }
  /// Blocking ireduce_scatter: recv (count elements) receives block rank()
  /// of the reduction of send (count * world_size() elements). Throws what
  /// ireduce_scatter and wait() throw.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                              ReduceOp op) {
    ireduce_scatter(send, recv, count, dtype, op).wait();
  }
  /// Blocking iall_gather: recv (count * world_size() elements) receives
  /// every rank's count elements in rank order; send may be recv + rank() *
  /// count (in place). Throws what iall_gather and wait() throw.
  virtual void all_gather(const void* send, void* recv, std::size_t count, DType dtype) {
    iall_gather(send, recv, count, dtype).wait();
  }
  /// Blocking iall_to_all: recv block j (count elements) receives rank j's
  /// block rank() of send. Throws what iall_to_all and wait() throw.
  virtual void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) {
    iall_to_all(send, recv, count, dtype).wait();
  }
  /// Blocking ibroadcast: buf[0..count) on root is copied to every rank.
  /// Throws what ibroadcast (bad root) and wait() throw.
  virtual void broadcast(void* buf, std::size_t count, DType dtype, int root) {
    ibroadcast(buf, count, dtype, root).wait();
  }
  /// Blocking ibarrier: returns once every rank has entered it.
  virtual void barrier() { ibarrier().wait(); }
};

/// Returns the communicator over every process of the job: MPI_COMM_WORLD
/// when built with MPI (initialising MPI on first use, finalising at exit;
/// a run without mpirun is a world of size 1), else a SelfCommunicator.
/// Throws CommError if MPI fails to initialise.
std::unique_ptr<Communicator> make_world_communicator();

}  // namespace zeroshard
