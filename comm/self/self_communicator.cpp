// SelfCommunicator: world size 1 without MPI; see comm/self/self_communicator.h.
#include "comm/self/self_communicator.h"

#include <cstring>

#include "comm/collective_args.h"

namespace zeroshard {

namespace {

void copy_elements(const void* send, void* recv, std::size_t count, DType dtype) {
  if (count == 0 || send == recv) return;
  std::memmove(recv, send, count * dtype_size(dtype));
}

}  // namespace

CommWork SelfCommunicator::iall_reduce(void* buf, std::size_t count, DType /*dtype*/,
                                       ReduceOp /*op*/) {
  check_buffer(buf, count, "all_reduce buf");
  return CommWork();
}

CommWork SelfCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp /*op*/) {
  check_buffer(send, count, "reduce_scatter send");
  check_buffer(recv, count, "reduce_scatter recv");
  copy_elements(send, recv, count, dtype);
  return CommWork();
}

CommWork SelfCommunicator::iall_gather(const void* send, void* recv, std::size_t count,
                                       DType dtype) {
  check_buffer(send, count, "all_gather send");
  check_buffer(recv, count, "all_gather recv");
  copy_elements(send, recv, count, dtype);
  return CommWork();
}

CommWork SelfCommunicator::iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) {
  check_buffer(send, count, "all_to_all send");
  check_buffer(recv, count, "all_to_all recv");
  check_all_to_all_disjoint(send, recv, count, dtype, 1);
  copy_elements(send, recv, count, dtype);
  return CommWork();
}

CommWork SelfCommunicator::ibroadcast(void* buf, std::size_t count, DType /*dtype*/, int root) {
  check_broadcast_root(root, 1, 0, "self");
  check_buffer(buf, count, "broadcast buf");
  return CommWork();
}

CommWork SelfCommunicator::ibarrier() {
  return CommWork();
}

std::unique_ptr<Communicator> SelfCommunicator::split(int color, int /*key*/) {
  check_split_color(color, 0, "self");
  return std::make_unique<SelfCommunicator>();
}

}  // namespace zeroshard
