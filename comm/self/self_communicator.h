// SelfCommunicator: the Communicator of a world with one rank, without MPI.
//
// Every collective over one rank is a copy or nothing: all_reduce and
// broadcast leave the buffer as it is, reduce_scatter, all_gather and all_to_all copy
// count elements from send to recv. The copies use memmove, so overlapping
// buffers give the result a one-rank collective defines (this is more than
// the Communicator contract promises; do not rely on it for reduce_scatter
// if the code must also run on the MPI backend, which rejects overlap).
// Work handles are complete on return (CommWork::pending() is false).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace zeroshard {

/// Communicator with world size 1 and rank 0; needs no MPI. Used by
/// make_world_communicator() in builds without MPI, and directly by tests
/// and single-process tools. Thread safety: stateless; calls on one object
/// from several threads are safe. Errors: broadcast with root != 0 and
/// split with a negative colour throw CommError; a null buffer with a
/// non-zero count throws InvariantError.
class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() = default;

  /// Always 0.
  int rank() const override { return 0; }
  /// Always 1.
  int world_size() const override { return 1; }
  /// "self".
  std::string backend() const override { return "self"; }

  /// No-op: the reduction over one rank is the buffer itself. Complete on return.
  CommWork iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  /// Copies count elements from send to recv (memmove). Complete on return.
  CommWork ireduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                           ReduceOp op) override;
  /// Copies count elements from send to recv (memmove; send == recv is the
  /// in-place form and copies nothing). Complete on return.
  CommWork iall_gather(const void* send, void* recv, std::size_t count, DType dtype) override;
  /// Copies count elements from send to recv (memmove). Complete on return.
  CommWork iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) override;
  /// No-op; root must be 0, else CommError naming root and world size.
  CommWork ibroadcast(void* buf, std::size_t count, DType dtype, int root) override;
  /// No-op. Complete on return.
  CommWork ibarrier() override;
  /// Returns a new SelfCommunicator; color must be >= 0 (else CommError).
  std::unique_ptr<Communicator> split(int color, int key) override;
};

}  // namespace zeroshard
