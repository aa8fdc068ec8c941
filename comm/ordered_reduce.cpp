// Rank-ordered reduce-scatter and all-reduce; see comm/ordered_reduce.h,
// [Note: rank-ordered reduction].
#include "comm/ordered_reduce.h"

#include <utility>

#include "comm/collective_args.h"
#include "core/error.h"
#include "kernels/cpu/sum_blocks.h"

namespace zeroshard {

const char* reduction_order_name(ReductionOrder order) {
  return order == ReductionOrder::rank ? "rank" : "native";
}

BlockSum host_block_sum() {
  return [](void* dst, const void* src, std::size_t blocks, std::size_t count, DType dtype) {
    kernels::sum_blocks(dst, src, blocks, count, dtype);
  };
}

OrderedReduction OrderedReduction::post(Communicator& comm, const void* send, void* buf, void* scratch,
                                        std::size_t count, DType dtype, BlockSum sum, bool all_reduce) {
  OrderedReduction r;
  r.comm_ = &comm;
  r.sum_ = std::move(sum);
  r.all_reduce_ = all_reduce;
  r.buf_ = buf;
  r.scratch_ = scratch;
  r.count_ = count;
  r.dtype_ = dtype;
  r.work_ = comm.iall_to_all(send, scratch, count, dtype);  // checks send/scratch
  r.phase_ = Phase::exchanging;
  return r;
}

OrderedReduction OrderedReduction::reduce_scatter(Communicator& comm, const void* send, void* scratch, void* recv,
                                                  std::size_t count, DType dtype, BlockSum sum) {
  check_buffer(recv, count, "ordered reduce_scatter recv");
  check_reduce_scatter_disjoint(send, recv, count, dtype, comm.world_size());
  return post(comm, send, recv, scratch, count, dtype, std::move(sum), false);
}

OrderedReduction OrderedReduction::all_reduce(Communicator& comm, void* buf, void* scratch, std::size_t block,
                                              DType dtype, BlockSum sum) {
  return post(comm, buf, buf, scratch, block, dtype, std::move(sum), true);
}

// The exchange is complete: sum the N contributions in rank order.
void OrderedReduction::sum_now() {
  const std::size_t world = static_cast<std::size_t>(comm_->world_size());
  void* dst = all_reduce_ ? static_cast<std::byte*>(buf_) +
                                static_cast<std::size_t>(comm_->rank()) * count_ * dtype_size(dtype_)
                          : buf_;
  if (count_ > 0) sum_(dst, scratch_, world, count_, dtype_);
}

void OrderedReduction::advance() {
  if (phase_ != Phase::exchanging) return;
  work_.wait();
  sum_now();
  if (!all_reduce_) {
    phase_ = Phase::done;
    return;
  }
  const std::size_t own = static_cast<std::size_t>(comm_->rank()) * count_ * dtype_size(dtype_);
  work_ = comm_->iall_gather(static_cast<std::byte*>(buf_) + own, buf_, count_, dtype_);
  phase_ = Phase::gathering;
}

bool OrderedReduction::test() {
  switch (phase_) {
    case Phase::done:
      return true;
    case Phase::exchanging:
      // An all-reduce moves on only in advance() (see the note); a
      // reduce-scatter has no collective left, so it may sum now.
      if (all_reduce_ || !work_.test()) return false;
      sum_now();
      phase_ = Phase::done;
      return true;
    case Phase::gathering:
      if (!work_.test()) return false;
      phase_ = Phase::done;
      return true;
  }
  return false;
}

void OrderedReduction::wait() {
  advance();
  work_.wait();
  phase_ = Phase::done;
}

}  // namespace zeroshard
