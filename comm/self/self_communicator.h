// SelfCommunicator: the Communicator of a world with one rank, without MPI.
//
// Every collective over one rank is a copy or nothing: all_reduce,
// broadcast (root must be 0) and barrier leave the buffer as it is,
// reduce_scatter, all_gather and all_to_all copy count elements from send to
// recv (all_gather with send == recv, the in-place form, copies nothing).
// The copies use memmove, so overlapping buffers give the result a one-rank
// collective defines (this is more than the Communicator contract promises;
// do not rely on it for reduce_scatter if the code must also run on the MPI
// backend, which rejects overlap). Work handles of collectives are complete
// on return (CommWork::pending() is false). split returns a new
// SelfCommunicator with its own, empty point-to-point queues.
//
// Point-to-point: the only peer is rank 0 itself. A send is kept (by
// address: the buffer must stay untouched until its handle completes) in a
// first-in first-out queue until a receive takes it, and a receive posted
// first waits in its own queue for the next send, so the k-th send is
// matched by the k-th receive ([Note: point-to-point order] in
// comm/communicator.h); the data is copied (memmove) when the second of
// the two is posted, which completes both handles. Waiting on a handle that
// is still unmatched throws CommError instead of waiting forever (one
// process has no one else who could post the match) and withdraws its
// message, as does destroying such a handle. Matching a send of another
// count or dtype throws CommError naming both from the call that makes the
// match (and completes neither).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"

namespace zeroshard {

/// Communicator with world size 1 and rank 0; needs no MPI. Used by
/// make_world_communicator() in builds without MPI, and directly by tests
/// and single-process tools. Thread safety: calls on one object from
/// several threads are safe (the point-to-point queues are guarded by a
/// mutex); a handle is used by one thread. Errors: broadcast with root != 0,
/// split with a negative colour, and a send or receive with a peer other
/// than 0 throw CommError; a null buffer with a non-zero count throws
/// InvariantError.
class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator();

  /// Always 0.
  int rank() const override { return 0; }
  /// Always 1.
  int world_size() const override { return 1; }
  /// "self".
  std::string backend() const override { return "self"; }

  // Communicator (comm/communicator.h) over one rank: the file comment.
  ZS_COMMUNICATOR_OVERRIDES;

  /// One queued send or receive; shared by the queue and its handle.
  struct Message;
  /// The queues of unmatched sends and receives.
  struct Queues;

 private:
  CommWork post(bool is_send, void* buf, std::size_t count, DType dtype, int peer);

  std::shared_ptr<Queues> queues_;
};

}  // namespace zeroshard
