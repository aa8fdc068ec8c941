// NcclCommunicator: the Communicator on NCCL, for buffers in GPU memory.
//
// Each collective maps to one NCCL call (counts in elements, as NCCL):
//   iall_reduce      ncclAllReduce, in place            reduce-scatter stream
//   ireduce_scatter  ncclReduceScatter                  reduce-scatter stream
//   iall_gather      ncclAllGather (in place when send == recv + rank * count)
//                                                       all-gather stream
//   iall_to_all      ncclSend + ncclRecv to and from every rank, in one
//                    ncclGroupStart/End                 reduce-scatter stream
//   ibroadcast       ncclBroadcast, in place            reduce-scatter stream
//   ibarrier         ncclAllReduce of one device word   reduce-scatter stream
//   split            ncclCommSplit: a new NcclCommunicator on the same device
//                    with its own streams and this one's compute stream
//   isend / irecv    ncclSend / ncclRecv, one call each (a group of one needs
//                    no ncclGroupStart/End), after the compute stream's
//                    queued work                        reduce-scatter stream
// Element types: f32, f64, bf16, f16 map to ncclFloat32, ncclFloat64,
// ncclBfloat16, ncclFloat16. NCCL reduces bf16/f16 natively (not by the
// pairwise rule of [Note: 16-bit reductions] in comm/mpi/mpi_types.h); the
// order of a sum is NCCL's choice.
//
// [Note: NCCL streams]
// Gathers (forward prefetch of the next unit) and reductions (backward
// gradient reduce-scatter) run on two separate streams so that one never
// queues behind the other, as FSDP2 does. Every collective first makes its
// stream wait for the work queued so far on the compute stream (an event
// recorded there), so it reads the data the compute produced; it then
// records a completion event on its own stream. CommWork wraps that event:
// test() is cudaEventQuery, wait() polls it (checking ncclCommGetAsyncError
// so a failed peer raises CommError instead of hanging) and returns when the
// collective is complete, so afterwards every stream, and the host, may use
// the buffers. stream_wait_all_gathers() / stream_wait_reductions() order
// the compute stream after the queued collectives without blocking the host.
// A count of 0 enqueues no NCCL call but still records the event.
//
// Point-to-point ([Note: point-to-point order] in comm/communicator.h): a
// send or receive is blocking for the GPU (NCCL's p2p documentation): it
// occupies the reduce-scatter stream, and NCCL gives no guarantee that two
// operations of a rank progress concurrently, until the peer's matching
// call runs. Messages between a pair are matched in issue order, as on
// MPI, but unlike MPI a rank's operations complete one after the other: two
// ranks that each send to the other before receiving deadlock on NCCL
// (they do not on MPI), and so does a send to the rank itself, which NCCL
// completes only inside one group with its receive. Code for both backends issues sends and receives in
// an order that completes when each waits for its match, or fuses the
// exchange into one all_to_all. Count mismatches are undefined (NCCL cannot
// see them). A count of 0 enqueues nothing, on both sides.
//
// Errors: NCCL failures throw CommError (core/cuda_check.h), CUDA failures
// DeviceError; a broadcast root outside the communicator or a negative
// split colour CommError; null or wrongly overlapping buffers
// InvariantError; a send's or receive's bad peer or count what
// Communicator::isend says.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

struct ncclComm;
struct CUstream_st;

namespace zeroshard {

/// Communicator over NCCL; all buffers are device pointers on device().
/// Thread safety: one thread at a time (Communicator contract); the
/// constructor makes device() the calling thread's current CUDA device, and
/// calls assume it still is.
class NcclCommunicator final : public Communicator {
 public:
  /// Creates the NCCL communicator over the ranks of `bootstrap` (an MPI or
  /// self communicator on the host), collectively: rank 0 makes the
  /// ncclUniqueId and broadcasts its 128 bytes through bootstrap (as 32 f32
  /// words, bytes unchanged); every rank picks `device`, or, for -1, device
  /// node_local_rank(bootstrap) % (number of visible devices), sets it
  /// current and calls ncclCommInitRank. Ranks and world size equal
  /// bootstrap's. Throws DeviceError without a device, CommError if NCCL
  /// fails. `bootstrap` is not used after construction.
  explicit NcclCommunicator(Communicator& bootstrap, int device = -1);
  /// Waits for queued collectives, then ncclCommDestroy (once the last
  /// CommWork of this communicator is gone too). Never throws.
  ~NcclCommunicator() override;

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  NcclCommunicator(NcclCommunicator&&) = delete;
  NcclCommunicator& operator=(NcclCommunicator&&) = delete;

  /// Rank in this communicator.
  int rank() const override { return rank_; }
  /// Number of ranks.
  int world_size() const override { return size_; }
  /// "nccl".
  std::string backend() const override { return "nccl"; }
  /// The CUDA device this rank's buffers live on.
  int device() const { return device_; }
  /// The wrapped ncclComm_t (owned by this object).
  ncclComm* native() const;

  /// Sets the stream the caller computes on (null: the legacy default
  /// stream, the initial value); see [Note: NCCL streams].
  void set_compute_stream(CUstream_st* stream);
  /// The compute stream set last.
  CUstream_st* compute_stream() const;
  /// The stream all-gathers run on.
  CUstream_st* all_gather_stream() const;
  /// The stream reduce-scatters, all-reduces, broadcasts and barriers run on.
  CUstream_st* reduce_scatter_stream() const;
  /// Makes the compute stream wait (on the device) for every all-gather
  /// queued so far. Does not block the host.
  void stream_wait_all_gathers();
  /// Makes the compute stream wait (on the device) for every reduction,
  /// broadcast and barrier queued so far. Does not block the host.
  void stream_wait_reductions();

  // Communicator (comm/communicator.h) on device memory; the NCCL call and
  // stream of each: the file comment.
  ZS_COMMUNICATOR_OVERRIDES;

  /// Shared by the communicator and its outstanding CommWork handles, which
  /// keep the NCCL communicator alive until they complete.
  struct State;

 private:
  struct Key {
    explicit Key() = default;
  };

 public:
  /// Wraps an initialised state; only this class can name Key (used by the
  /// public constructor and by split()).
  NcclCommunicator(Key, std::shared_ptr<State> state);

 private:
  std::shared_ptr<State> state_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
};

}  // namespace zeroshard
