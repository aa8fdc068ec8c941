// NcclCommunicator on NCCL; see comm/nccl/nccl_communicator.h and
// [Note: NCCL streams] there.
#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include "comm/collective_args.h"
#include "comm/nccl/local_rank.h"
#include "core/cuda_check.h"
#include "core/cuda_stream.h"
#include "core/device_buffer.h"
#include "core/error.h"

namespace zeroshard {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;  // null once aborted after an asynchronous failure
  int device = 0;
  int rank = 0;
  int size = 1;
  CudaStream gather_stream;
  CudaStream reduce_stream;
  CudaEvent gather_ready;  // recorded on the compute stream before an all-gather
  CudaEvent reduce_ready;  // likewise before a reduction
  CudaEvent gather_mark;   // recorded on gather_stream by stream_wait_all_gathers
  CudaEvent reduce_mark;   // recorded on reduce_stream by stream_wait_reductions
  DeviceBuffer barrier_word;
  cudaStream_t compute = nullptr;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Members (streams, events, the barrier word) are destroyed after this
  // body, which lets queued collectives finish and then frees the comm.
  ~State() {
    if (comm == nullptr) return;
    if (gather_stream.get() != nullptr) cudaStreamSynchronize(gather_stream.get());
    if (reduce_stream.get() != nullptr) cudaStreamSynchronize(reduce_stream.get());
    ncclCommDestroy(comm);
  }

  // Streams, events and the barrier word, once comm exists.
  void finish() {
    ZS_CUDA_CHECK(ncclCommUserRank(comm, &rank));
    ZS_CUDA_CHECK(ncclCommCount(comm, &size));
    gather_stream = CudaStream::create();
    reduce_stream = CudaStream::create();
    gather_ready = CudaEvent::create();
    reduce_ready = CudaEvent::create();
    gather_mark = CudaEvent::create();
    reduce_mark = CudaEvent::create();
    barrier_word = DeviceBuffer(sizeof(float));
    ZS_CUDA_CHECK(cudaMemset(barrier_word.data(), 0, sizeof(float)));
  }

  void require_alive(const char* call) const {
    if (comm == nullptr) {
      throw CommError(fmt::format(
          "{} on rank {} of the nccl communicator: the communicator was aborted after an "
          "earlier asynchronous NCCL failure; create a new one",
          call, rank));
    }
  }
};

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::u8: return ncclUint8;
  }
  throw InvariantError(fmt::format("nccl: unknown DType {}", static_cast<int>(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  throw InvariantError(fmt::format("nccl: unknown ReduceOp {}", static_cast<int>(op)));
}

// One collective's completion event; see [Note: NCCL streams].
class NcclWork final : public CommWork::Impl {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::State> state, CudaEvent done, const char* call)
      : state_(std::move(state)), done_(std::move(done)), call_(call) {}

  void wait() override {
    while (!test()) std::this_thread::yield();
  }

  bool test() override {
    if (done_.query()) return true;
    NcclCommunicator::State& s = *state_;
    s.require_alive(call_);
    ncclResult_t async = ncclSuccess;
    ZS_CUDA_CHECK(ncclCommGetAsyncError(s.comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string detail = ncclGetLastError(s.comm);
      ncclCommAbort(s.comm);  // stops the stuck kernels so the streams drain
      s.comm = nullptr;
      throw CommError(fmt::format(
          "{} on rank {} of {} (CUDA device {}) failed asynchronously: {} ({}); the "
          "communicator was aborted. A peer rank probably failed or diverged; check its log",
          call_, s.rank, s.size, s.device, ncclGetErrorString(async), detail));
    }
    return false;
  }

 private:
  std::shared_ptr<NcclCommunicator::State> state_;
  CudaEvent done_;
  const char* call_;
};

// Orders `gather` or reduction stream after the compute stream, runs
// `issue(stream)` (the NCCL call; skipped when count is 0) and returns a
// handle on the completion event.
template <class Issue>
CommWork enqueue(const std::shared_ptr<NcclCommunicator::State>& state, bool gather,
                 const char* call, std::size_t count, Issue&& issue) {
  NcclCommunicator::State& s = *state;
  s.require_alive(call);
  cudaStream_t stream = gather ? s.gather_stream.get() : s.reduce_stream.get();
  CudaEvent& ready = gather ? s.gather_ready : s.reduce_ready;
  ready.record(s.compute);
  ready.make_wait(stream);
  if (count > 0) cuda_check(issue(stream), call, __FILE__, __LINE__);
  CudaEvent done = CudaEvent::create();
  done.record(stream);
  return CommWork(std::make_unique<NcclWork>(state, std::move(done), call));
}

int choose_device(Communicator& bootstrap, int device) {
  const int count = cuda_device_count();
  if (count == 0) {
    throw DeviceError(fmt::format(
        "NcclCommunicator on rank {}: no CUDA device is visible; check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES",
        bootstrap.rank()));
  }
  if (device >= count) {
    throw DeviceError(fmt::format(
        "NcclCommunicator on rank {}: CUDA device {} requested but only {} visible",
        bootstrap.rank(), device, count));
  }
  const int local = node_local_rank(bootstrap);  // collective: every rank joins
  return device >= 0 ? device : local % count;
}

std::shared_ptr<NcclCommunicator::State> init_state(Communicator& bootstrap, int device) {
  auto state = std::make_shared<NcclCommunicator::State>();
  state->device = choose_device(bootstrap, device);
  ZS_CUDA_CHECK(cudaSetDevice(state->device));

  static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) ZS_CUDA_CHECK(ncclGetUniqueId(&id));
  std::array<float, sizeof(ncclUniqueId) / sizeof(float)> words{};
  std::memcpy(words.data(), &id, sizeof(id));
  bootstrap.broadcast(words.data(), words.size(), DType::f32, 0);
  std::memcpy(&id, words.data(), sizeof(id));

  ZS_CUDA_CHECK(ncclCommInitRank(&state->comm, bootstrap.world_size(), id, bootstrap.rank()));
  state->finish();
  return state;
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device)
    : NcclCommunicator(Key{}, init_state(bootstrap, device)) {}

NcclCommunicator::NcclCommunicator(Key, std::shared_ptr<State> state)
    : state_(std::move(state)), rank_(state_->rank), size_(state_->size), device_(state_->device) {}

NcclCommunicator::~NcclCommunicator() = default;

ncclComm* NcclCommunicator::native() const { return state_->comm; }

void NcclCommunicator::set_compute_stream(CUstream_st* stream) { state_->compute = stream; }
CUstream_st* NcclCommunicator::compute_stream() const { return state_->compute; }
CUstream_st* NcclCommunicator::all_gather_stream() const { return state_->gather_stream.get(); }
CUstream_st* NcclCommunicator::reduce_scatter_stream() const {
  return state_->reduce_stream.get();
}

void NcclCommunicator::stream_wait_all_gathers() {
  state_->gather_mark.record(state_->gather_stream.get());
  state_->gather_mark.make_wait(state_->compute);
}

void NcclCommunicator::stream_wait_reductions() {
  state_->reduce_mark.record(state_->reduce_stream.get());
  state_->reduce_mark.make_wait(state_->compute);
}

CommWork NcclCommunicator::iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  check_buffer(buf, count, "all_reduce buf");
  ncclComm_t comm = state_->comm;
  return enqueue(state_, false, "ncclAllReduce", count, [&](cudaStream_t stream) {
    return ncclAllReduce(buf, buf, count, nccl_type(dtype), nccl_op(op), comm, stream);
  });
}

CommWork NcclCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op) {
  check_buffer(send, count, "reduce_scatter send");
  check_buffer(recv, count, "reduce_scatter recv");
  check_reduce_scatter_disjoint(send, recv, count, dtype, size_);
  ncclComm_t comm = state_->comm;
  return enqueue(state_, false, "ncclReduceScatter", count, [&](cudaStream_t stream) {
    return ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), comm, stream);
  });
}

CommWork NcclCommunicator::iall_gather(const void* send, void* recv, std::size_t count,
                                       DType dtype) {
  check_buffer(send, count, "all_gather send");
  check_buffer(recv, count, "all_gather recv");
  all_gather_in_place(send, recv, count, dtype, rank_, size_);  // rejects partial overlap
  ncclComm_t comm = state_->comm;
  return enqueue(state_, true, "ncclAllGather", count, [&](cudaStream_t stream) {
    return ncclAllGather(send, recv, count, nccl_type(dtype), comm, stream);
  });
}

CommWork NcclCommunicator::iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) {
  const std::size_t total = count * static_cast<std::size_t>(size_);
  check_buffer(send, total, "all_to_all send");
  check_buffer(recv, total, "all_to_all recv");
  check_all_to_all_disjoint(send, recv, count, dtype, size_);
  ncclComm_t comm = state_->comm;
  const int size = size_;
  return enqueue(state_, false, "ncclSend/ncclRecv (all_to_all)", count, [&](cudaStream_t stream) {
    const std::size_t bytes = count * dtype_size(dtype);
    const ncclDataType_t type = nccl_type(dtype);
    ncclResult_t rc = ncclGroupStart();
    if (rc != ncclSuccess) return rc;
    for (int r = 0; r < size && rc == ncclSuccess; ++r) {
      const std::size_t at = static_cast<std::size_t>(r) * bytes;
      rc = ncclSend(static_cast<const std::byte*>(send) + at, count, type, r, comm, stream);
      if (rc == ncclSuccess) rc = ncclRecv(static_cast<std::byte*>(recv) + at, count, type, r, comm, stream);
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group, even after a failed call
    return rc != ncclSuccess ? rc : end;
  });
}

CommWork NcclCommunicator::isend(const void* buf, std::size_t count, DType dtype, int peer) {
  check_p2p("send", buf, count, peer, rank_, size_, "nccl");
  ncclComm_t comm = state_->comm;
  return enqueue(state_, false, "ncclSend", count, [&](cudaStream_t stream) {
    return ncclSend(buf, count, nccl_type(dtype), peer, comm, stream);
  });
}

CommWork NcclCommunicator::irecv(void* buf, std::size_t count, DType dtype, int peer) {
  check_p2p("recv", buf, count, peer, rank_, size_, "nccl");
  ncclComm_t comm = state_->comm;
  return enqueue(state_, false, "ncclRecv", count, [&](cudaStream_t stream) {
    return ncclRecv(buf, count, nccl_type(dtype), peer, comm, stream);
  });
}

CommWork NcclCommunicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  check_broadcast_root(root, size_, rank_, "nccl");
  check_buffer(buf, count, "broadcast buf");
  ncclComm_t comm = state_->comm;
  return enqueue(state_, false, "ncclBroadcast", count, [&](cudaStream_t stream) {
    return ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm, stream);
  });
}

CommWork NcclCommunicator::ibarrier() {
  void* word = state_->barrier_word.data();
  ncclComm_t comm = state_->comm;
  return enqueue(state_, false, "ncclAllReduce (barrier)", 1, [&](cudaStream_t stream) {
    return ncclAllReduce(word, word, 1, ncclFloat32, ncclSum, comm, stream);
  });
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  check_split_color(color, rank_, "nccl");
  state_->require_alive("ncclCommSplit");
  auto child = std::make_shared<State>();
  child->device = device_;
  ZS_CUDA_CHECK(ncclCommSplit(state_->comm, color, key, &child->comm, nullptr));
  child->finish();
  child->compute = state_->compute;
  return std::make_unique<NcclCommunicator>(Key{}, std::move(child));
}

}  // namespace zeroshard
