// The communicator of an engine on the simulated device
// (runtime/sharding/device_ops.h), shared by the tests that run one.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "runtime/sharding/device_ops.h"

namespace zeroshard::testing {

// The device communicator of the simulated engine: every collective first
// checks that its buffers are device memory (NCCL takes nothing else) and
// completes the ops' queue, as an NCCL collective first waits for the
// compute stream ([Note: NCCL streams]); then MPI on the same memory.
/// Thread safety: as the inner communicator and ops (one thread).
class QueueOrderedComm final : public Communicator {
 public:
  QueueOrderedComm(Communicator& inner, DeviceOps& ops) : inner_(inner), ops_(ops) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string backend() const override { return "simulated"; }
  CommWork iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) override {
    device(buf, count, dtype);
    settle();
    return inner_.iall_reduce(buf, count, dtype, op);
  }
  CommWork ireduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) override {
    device(send, count * static_cast<std::size_t>(world_size()), dtype);
    device(recv, count, dtype);
    settle();
    return inner_.ireduce_scatter(send, recv, count, dtype, op);
  }
  CommWork iall_gather(const void* send, void* recv, std::size_t count, DType dtype) override {
    device(send, count, dtype);
    device(recv, count * static_cast<std::size_t>(world_size()), dtype);
    settle();
    return inner_.iall_gather(send, recv, count, dtype);
  }
  CommWork iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    device(send, count * static_cast<std::size_t>(world_size()), dtype);
    device(recv, count * static_cast<std::size_t>(world_size()), dtype);
    settle();
    return inner_.iall_to_all(send, recv, count, dtype);
  }
  CommWork ibroadcast(void* buf, std::size_t count, DType dtype, int root) override {
    device(buf, count, dtype);
    settle();
    return inner_.ibroadcast(buf, count, dtype, root);
  }
  CommWork ibarrier() override { return inner_.ibarrier(); }
  CommWork isend(const void* buf, std::size_t count, DType dtype, int peer) override {
    device(buf, count, dtype);
    settle();
    return inner_.isend(buf, count, dtype, peer);
  }
  CommWork irecv(void* buf, std::size_t count, DType dtype, int peer) override {
    device(buf, count, dtype);
    settle();
    return inner_.irecv(buf, count, dtype, peer);
  }
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }

 private:
  void settle() { ops_.wait(ops_.fence()); }
  // A move onto itself changes nothing; the simulated ops check that both
  // ranges are device memory (InvariantError naming "move" otherwise).
  void device(const void* p, std::size_t count, DType dtype) {
    ops_.move(const_cast<void*>(p), p, count * dtype_size(dtype));
  }
  Communicator& inner_;
  DeviceOps& ops_;
};

}  // namespace zeroshard::testing
