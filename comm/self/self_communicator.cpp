// SelfCommunicator: world size 1 without MPI; see comm/self/self_communicator.h.
#include "comm/self/self_communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/collective_args.h"
#include "core/error.h"

namespace zeroshard {

namespace {

void copy_elements(const void* send, void* recv, std::size_t count, DType dtype) {
  if (count == 0 || send == recv) return;
  std::memmove(recv, send, count * dtype_size(dtype));
}

}  // namespace

struct SelfCommunicator::Message {
  bool is_send = false;
  void* buf = nullptr;  // const for a send; never written through then
  std::size_t count = 0;
  DType dtype = DType::f32;
  bool done = false;
};

struct SelfCommunicator::Queues {
  std::mutex mu;
  std::deque<std::shared_ptr<Message>> sends;  // unmatched, in posting order
  std::deque<std::shared_ptr<Message>> recvs;
};

namespace {

using Message = SelfCommunicator::Message;
using Queues = SelfCommunicator::Queues;

const char* op_name(bool is_send) { return is_send ? "send to self" : "recv from self"; }

// The handle of one point-to-point message.
class SelfP2pWork final : public CommWork::Impl {
 public:
  SelfP2pWork(std::shared_ptr<Queues> queues, std::shared_ptr<Message> m)
      : queues_(std::move(queues)), m_(std::move(m)) {}
  ~SelfP2pWork() override {
    const std::lock_guard<std::mutex> lock(queues_->mu);
    if (!m_->done) std::erase(m_->is_send ? queues_->sends : queues_->recvs, m_);
  }
  SelfP2pWork(const SelfP2pWork&) = delete;
  SelfP2pWork& operator=(const SelfP2pWork&) = delete;

  void wait() override {
    const std::lock_guard<std::mutex> lock(queues_->mu);
    if (m_->done) return;
    throw CommError(fmt::format(
        "{} on rank 0 of the self communicator ({} {} elements) has no matching {} posted; with "
        "one rank it would wait forever: post the matching {} before waiting",
        op_name(m_->is_send), m_->count, dtype_name(m_->dtype),
        m_->is_send ? "receive" : "send", m_->is_send ? "irecv" : "isend"));
  }
  bool test() override {
    const std::lock_guard<std::mutex> lock(queues_->mu);
    return m_->done;
  }

 private:
  std::shared_ptr<Queues> queues_;
  std::shared_ptr<Message> m_;
};

}  // namespace

SelfCommunicator::SelfCommunicator() : queues_(std::make_shared<Queues>()) {}

CommWork SelfCommunicator::isend(const void* buf, std::size_t count, DType dtype, int peer) {
  return post(true, const_cast<void*>(buf), count, dtype, peer);
}

CommWork SelfCommunicator::irecv(void* buf, std::size_t count, DType dtype, int peer) {
  return post(false, buf, count, dtype, peer);
}

CommWork SelfCommunicator::post(bool is_send, void* buf, std::size_t count, DType dtype, int peer) {
  check_p2p(is_send ? "send" : "recv", buf, count, peer, 0, 1, "self");
  auto m = std::make_shared<Message>(Message{is_send, buf, count, dtype, false});
  const std::lock_guard<std::mutex> lock(queues_->mu);
  auto& partners = is_send ? queues_->recvs : queues_->sends;
  if (partners.empty()) {
    (is_send ? queues_->sends : queues_->recvs).push_back(m);
    return CommWork(std::make_unique<SelfP2pWork>(queues_, std::move(m)));
  }
  Message& other = *partners.front();
  if (other.count != count || other.dtype != dtype) {
    const Message& send = is_send ? *m : other;
    const Message& recv = is_send ? other : *m;
    throw CommError(fmt::format(
        "{} on rank 0 of the self communicator: the send has {} {} elements, the receive it "
        "matches expects {} {} elements; the sender and the receiver must pass the same count and "
        "dtype",
        op_name(is_send), send.count, dtype_name(send.dtype), recv.count, dtype_name(recv.dtype)));
  }
  const Message& send = is_send ? *m : other;
  Message& recv = is_send ? other : *m;
  copy_elements(send.buf, recv.buf, count, dtype);
  other.done = true;
  m->done = true;
  partners.pop_front();
  return CommWork();  // complete on return
}

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
