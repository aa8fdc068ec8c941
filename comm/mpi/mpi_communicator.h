// MpiCommunicator: the Communicator on MPI-3 non-blocking collectives.
//
// Each collective maps to one MPI call (counts in elements, as MPI):
//   iall_reduce      MPI_Iallreduce(MPI_IN_PLACE, buf, ...)
//   ireduce_scatter  MPI_Ireduce_scatter_block
//   iall_gather      MPI_Iallgather, with MPI_IN_PLACE when
//                    send == recv + rank * count elements
//   ibroadcast       MPI_Ibcast
//   ibarrier         MPI_Ibarrier
//   split            MPI_Comm_split (the result owns and frees its MPI_Comm)
// MPI_Iallreduce runs with libnbc's ring algorithm for messages of 64 KiB and
// more ([Note: libnbc all-reduce algorithm] in comm/mpi/mpi_nbc_tuning.h).
// Element types and operators map as comm/mpi/mpi_types.h describes (bf16
// and f16 sums follow [Note: 16-bit reductions] there). The returned
// CommWork wraps the MPI_Request; wait() is MPI_Wait and test() MPI_Test.
// OpenMPI progresses non-blocking collectives only inside MPI calls (it has
// no progress thread by default), so a collective advances while the caller
// waits, tests or makes other MPI calls, not while it only computes.
//
// Errors: every MPI return code is checked by mpi_check (comm/mpi/mpi_check.h)
// and becomes a CommError naming the call, MPI's message and the rank; the
// wrapped communicator gets MPI_ERRORS_RETURN so that MPI returns instead of
// aborting. Counts above INT_MAX elements throw CommError (MPI takes int
// counts) instead of being truncated.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

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

  /// MPI_Iallreduce with MPI_IN_PLACE over buf[0..count).
  CommWork iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  /// MPI_Ireduce_scatter_block: send holds count * world_size() elements,
  /// recv (count elements, disjoint from send) gets block rank().
  CommWork ireduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                           ReduceOp op) override;
  /// MPI_Iallgather; in place when send == recv + rank() * count elements.
  CommWork iall_gather(const void* send, void* recv, std::size_t count, DType dtype) override;
  /// MPI_Ibcast from root (CommError naming root and world size if out of range).
  CommWork ibroadcast(void* buf, std::size_t count, DType dtype, int root) override;
  /// MPI_Ibarrier.
  CommWork ibarrier() override;
  /// MPI_Comm_split(color, key); returns an owning MpiCommunicator.
  /// color must be >= 0 (CommError otherwise).
  std::unique_ptr<Communicator> split(int color, int key) override;
  /// MPI_Abort on this communicator (ends every rank of the job).
  [[noreturn]] void abort(int code) override;

 private:
  void free_owned() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  Ownership ownership_;
  int rank_ = -1;
  int size_ = 0;
};

}  // namespace zeroshard
