// MpiCommunicator: the Communicator on MPI-3 collectives.
// Details: [Note: MPI calls] below.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

// [Note: MPI calls]
// Each collective maps to one MPI call (counts in elements, as MPI):
//   iall_reduce      MPI_Iallreduce(MPI_IN_PLACE, buf, ...)
//   ireduce_scatter  MPI_Ireduce_scatter_block
//   iall_gather      MPI_Iallgather, with MPI_IN_PLACE when
//                    send == recv + rank * count elements
//   iall_to_all      MPI_Ialltoall (send and recv disjoint)
//   ibroadcast       MPI_Ibcast
//   ibarrier         MPI_Ibarrier
//   split            MPI_Comm_split (the result owns and frees its MPI_Comm)
//   isend / irecv    MPI_Isend / MPI_Irecv with the one tag kP2pTag, so
//                    messages between a pair follow MPI's non-overtaking
//                    order ([Note: point-to-point order] in
//                    comm/communicator.h); a completed receive checks with
//                    MPI_Get_count that the message had the expected count
// and the blocking forms to MPI's blocking collectives, with the same
// argument checks, type/operator mapping and in-place rule:
//   all_reduce       MPI_Allreduce(MPI_IN_PLACE, buf, ...)
//   reduce_scatter   MPI_Reduce_scatter_block
//   all_gather       MPI_Allgather (MPI_IN_PLACE as iall_gather)
//   broadcast        MPI_Bcast
//   barrier          MPI_Barrier
// A blocking call skips the non-blocking path's fixed cost (request, libnbc
// schedule, progress-thread bookkeeping: a few microseconds at 2 ranks, tens
// at 4 ranks on 2 cores, bench/collectives/README.md) and runs Open MPI's "tuned" algorithms,
// which are not libnbc's: a sum may combine ranks in another order, so for
// data whose sums round (fp32 in general, [Note: 16-bit reductions]) the
// blocking and non-blocking forms may differ in the last bits; for data
// whose partial sums are exact they agree bit for bit.
// MPI_Iallreduce runs with libnbc's ring algorithm for messages of 64 KiB and
// more ([Note: libnbc all-reduce algorithm] in comm/mpi/mpi_nbc_tuning.h).
// Element types and operators map as comm/mpi/mpi_types.h describes (bf16
// and f16 sums follow [Note: 16-bit reductions] there). The returned
// CommWork wraps the MPI_Request; wait() is MPI_Wait and test() MPI_Test.
// OpenMPI progresses non-blocking collectives only inside MPI calls (it has
// no progress thread by default), so a collective advances while the caller
// waits, tests or makes other MPI calls (blocking collectives included), not
// while it only computes; [Note: MPI progress] in comm/mpi/mpi_progress.h.
//
// Errors: every MPI return code is checked by mpi_check (comm/mpi/mpi_check.h)
// and becomes a CommError naming the call (MPI_Iallreduce, or MPI_Wait on
// it; MPI_Allreduce for the blocking form), MPI's message and the rank; the
// wrapped communicator gets MPI_ERRORS_RETURN so that MPI returns instead of
// aborting. Counts above INT_MAX elements throw CommError (MPI takes int
// counts) instead of being truncated; so do a broadcast root outside the
// communicator (naming root and world size) and a negative split colour. A
// null buffer with a non-zero count, or send and recv that overlap (other
// than all_gather's in-place form), throw InvariantError. A receive's wait()
// throws CommError for a longer message (MPI_ERR_TRUNCATE) and CommError
// naming both counts and the peer for a shorter one.

namespace zeroshard {

/// Communicator over an MPI communicator. Construction needs MPI to be
/// initialised (make_world_communicator() does it). Thread safety: one
/// thread at a time per object (Communicator contract); several objects may
/// be used from different threads only if mpi_thread_level() is
/// MPI_THREAD_MULTIPLE. Errors: CommError for any MPI failure, a bad
/// broadcast root or split colour, or a count above INT_MAX elements;
/// InvariantError for null or wrongly overlapping buffers.
class MpiCommunicator final : public Communicator {
 public:
  /// Whether the object frees its MPI_Comm on destruction.
  enum class Ownership {
    borrowed,  ///< e.g. MPI_COMM_WORLD or an application's communicator; never freed here
    owned,     ///< freed with MPI_Comm_free in the destructor (unless MPI is finalised)
  };

  /// Wraps `comm` (not MPI_COMM_NULL), sets MPI_ERRORS_RETURN on it and
  /// caches its rank and size. Throws CommError if MPI is not running or
  /// any of these calls fails (an owned comm is then still freed).
  MpiCommunicator(MPI_Comm comm, Ownership ownership);
  /// Frees an owned MPI_Comm (collective in MPI's terms; every rank must
  /// destroy its object). No MPI call after MPI_Finalize. Never throws.
  ~MpiCommunicator() override;

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  MpiCommunicator(MpiCommunicator&&) = delete;
  MpiCommunicator& operator=(MpiCommunicator&&) = delete;

  /// Rank in the wrapped communicator.
  int rank() const override { return rank_; }
  /// Size of the wrapped communicator.
  int world_size() const override { return size_; }
  /// "mpi".
  std::string backend() const override { return "mpi"; }
  /// The wrapped MPI communicator (still owned by this object if owned).
  MPI_Comm native() const { return comm_; }

  // Communicator (comm/communicator.h); the MPI call of each: the file comment.
  ZS_COMMUNICATOR_OVERRIDES;
  void all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override;
  void broadcast(void* buf, std::size_t count, DType dtype, int root) override;
  void barrier() override;

  /// The MPI tag of every point-to-point message ([Note: point-to-point
  /// order]): one tag, so matching is by (source, communicator) in order.
  /// Collectives and the side channel (a duplicate of MPI_COMM_WORLD) never
  /// see these messages.
  static constexpr int kP2pTag = 0x5A50;
  /// MPI_Abort on this communicator (ends every rank of the job).
  [[noreturn]] void abort(int code) override;
  /// An MpiSideChannel (comm/mpi/mpi_side_channel.h) over MPI_COMM_WORLD,
  /// whatever group this communicator spans: collective over the whole
  /// job. Throws CommError below MPI_THREAD_MULTIPLE, on an MPI failure, or
  /// after `setup_timeout_s` (> 0) seconds without every process.
  std::unique_ptr<SideChannel> make_side_channel(double setup_timeout_s = 0) override;

 private:
  void free_owned() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  Ownership ownership_;
  int rank_ = -1;
  int size_ = 0;
};

}  // namespace zeroshard
