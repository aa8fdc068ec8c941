// The Communicator interface: collectives over a group of ranks (the
// data-parallel group, a tensor-parallel group, ...) and point-to-point
// messages between two of its ranks (pipeline stages).
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
//
// Point-to-point (isend/irecv, send/recv) is the exception to SPMD: only
// the two ranks of a message take part.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/dtype.h"

// [Note: point-to-point order]
// Messages are matched per ordered pair of ranks of one communicator: the
// k-th send from rank a to rank b (counting isend and send alike) is
// received by the k-th receive that rank b posts from rank a, whatever the
// message sizes, whichever completes first, and however they interleave
// with collectives (which never match point-to-point messages). There are
// no tags: every backend uses one fixed channel per communicator, so two
// messages between the same pair in the same direction never cross, and
// messages in opposite directions are told apart by their sender. This is
// MPI's non-overtaking rule for one (source, tag, communicator), which
// MpiCommunicator uses with the single tag kP2pTag; NCCL and the self
// communicator match in issue order per peer as well. Code that needs two
// independent streams of messages between the same pair (say, two
// pipelines) uses two communicators (split or a second Mesh).
// The sender and the receiver must pass the same count and dtype: MPI
// reports a longer message as MPI_ERR_TRUNCATE and MpiCommunicator a
// shorter one as a CommError on the receiver; SelfCommunicator reports
// either; NCCL cannot detect it (undefined, as for ncclSend/ncclRecv).
// Progress differs by backend: on MPI and self a posted send or receive
// never blocks the caller or the rank's other operations, so ranks may post
// sends and receives in both directions at once in any order and then wait;
// on NCCL each operation blocks the GPU until its peer's match runs, so
// a rank's operations must be issued in an order that completes when each
// one waits for its match (comm/nccl/nccl_communicator.h).
// An argument error (a peer outside the communicator, a count that is a
// negative value converted to size_t) is thrown on the calling rank only;
// its peer then waits for a message that never comes. Following [Note:
// agreeing on errors] (comm/collective_error.h), such an error is a
// local one: end the job with abort(); a TracedCommunicator with a timeout
// reports it through the collective watchdog first.

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
    /// Cancels a pending point-to-point receive (MPI_Cancel) and returns
    /// true once it is cancelled or complete; false where the backend
    /// cannot cancel (then the handle stays pending). Never throws.
    virtual bool cancel() noexcept { return false; }
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
  /// True if complete (or empty); a completed handle becomes empty. A loop
  /// that waits by calling test() should sleep between calls (or call
  /// wait()): where ranks share cores, back-to-back calls (on MPI each ends
  /// in a sched_yield) starve the ranks being waited for.
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
  /// Cancels a pending receive whose sender will never send (a peer that
  /// left): afterwards the handle is empty and its buffer free. Returns
  /// false, the handle unchanged, where the backend cannot cancel. Never
  /// throws.
  bool cancel() noexcept {
    if (!impl_) return true;
    if (!impl_->cancel()) return false;
    impl_.reset();
    return true;
  }

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

  /// Point-to-point send of buf[0..count) (count elements of dtype) to rank
  /// `peer` of this communicator (peer == rank() is a send to self, matched
  /// by an irecv from rank()). Non-blocking: the returned handle completes
  /// once buf may be reused (on MPI, possibly only once the receiver has
  /// matched it); buf must stay untouched until then. Matching follows
  /// [Note: point-to-point order]. Not a collective: only this rank and
  /// peer take part. Throws CommError naming this rank, the peer and the
  /// world size when peer is outside [0, world_size()) (SelfCommunicator:
  /// any peer other than 0), CommError naming the rank and peer for a count
  /// above PTRDIFF_MAX (a negative count converted to size_t), CommError
  /// naming the count and the rank above the backend's limit (MPI: INT_MAX),
  /// InvariantError for a null buf with count > 0. Source: MPI_Isend;
  /// ncclSend.
  virtual CommWork isend(const void* buf, std::size_t count, DType dtype, int peer) = 0;
  /// Point-to-point receive of count elements of dtype from rank `peer`
  /// into buf[0..count); the counterpart of isend (same count and dtype as
  /// the matching send, [Note: point-to-point order]). Non-blocking: buf
  /// holds the message once the handle completes. Throws what isend throws
  /// for the same arguments; wait() throws CommError when the message has
  /// another length (where the backend can tell). Source: MPI_Irecv;
  /// ncclRecv.
  virtual CommWork irecv(void* buf, std::size_t count, DType dtype, int peer) = 0;

  /// New communicator over the ranks that pass the same color, ordered by
  /// (key, old rank), as MPI_Comm_split. Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Ends every process of the job with exit status `code`: what a program
  /// does when one rank hits an error the others cannot see (they would
  /// otherwise wait forever in their next collective). MPI: MPI_Abort; the
  /// default (one process): std::_Exit. Does not return.
  [[noreturn]] virtual void abort(int code) { std::_Exit(code); }

  /// Names the collectives issued from now on (a unit or bucket, e.g.
  /// "fc2") in logs, traces and hang reports; a hint that plain backends
  /// ignore (TracedCommunicator, comm/traced/traced_communicator.h, keeps it).
  /// Not a collective.
  virtual void set_label(std::string label) { (void)label; }

  /// A SideChannel (comm/side_channel.h) over every process of the job
  /// (world ranks, whatever group this communicator spans), for the
  /// collective watchdog's hang reports. Collective over the whole job:
  /// every process must call it at the same point (MPI: MPI_Comm_idup of
  /// MPI_COMM_WORLD). A process that never gets there would hold the others
  /// in it: with `setup_timeout_s` > 0 they throw SideChannelTimeout (a
  /// CommError) after that many seconds instead, saying so (0: wait for
  /// ever). The default is a
  /// LocalSideChannel when world_size() is 1 and otherwise throws CommError
  /// (the backend has no side channel); MpiCommunicator overrides it
  /// (CommError without MPI_THREAD_MULTIPLE).
  virtual std::unique_ptr<SideChannel> make_side_channel(double setup_timeout_s = 0);

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
  /// Blocking isend: returns once buf may be reused. On MPI a send to a
  /// rank that has not posted its receive may wait for it (as MPI_Send), so
  /// two ranks that send to each other first must use isend. Throws what
  /// isend and wait() throw.
  virtual void send(const void* buf, std::size_t count, DType dtype, int peer) {
    isend(buf, count, dtype, peer).wait();
  }
  /// Blocking irecv: returns once buf[0..count) holds the message from
  /// peer. Throws what irecv and wait() throw.
  virtual void recv(void* buf, std::size_t count, DType dtype, int peer) {
    irecv(buf, count, dtype, peer).wait();
  }
};

/// Declares, inside a backend's class body, Communicator's pure virtual
/// calls as overrides: the six non-blocking collectives, isend, irecv and
/// split, with the arguments, results and errors documented on Communicator
/// above. A backend's file comment says what each call maps to on it.
#define ZS_COMMUNICATOR_OVERRIDES                                                              \
  CommWork iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) override;       \
  CommWork ireduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,       \
                           ReduceOp op) override;                                              \
  CommWork iall_gather(const void* send, void* recv, std::size_t count, DType dtype) override; \
  CommWork iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) override; \
  CommWork ibroadcast(void* buf, std::size_t count, DType dtype, int root) override;           \
  CommWork ibarrier() override;                                                                \
  CommWork isend(const void* buf, std::size_t count, DType dtype, int peer) override;          \
  CommWork irecv(void* buf, std::size_t count, DType dtype, int peer) override;                \
  std::unique_ptr<Communicator> split(int color, int key) override

/// Returns the communicator over every process of the job: MPI_COMM_WORLD
/// when built with MPI (initialising MPI on first use, finalising at exit;
/// a run without mpirun is a world of size 1), else a SelfCommunicator.
/// Throws CommError if MPI fails to initialise.
std::unique_ptr<Communicator> make_world_communicator();

}  // namespace zeroshard
