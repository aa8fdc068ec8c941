// MpiCommunicator on MPI-3 collectives; see comm/mpi/mpi_communicator.h.
#include "comm/mpi/mpi_communicator.h"

#include <fmt/format.h>

#include <string>
#include <utility>

#include "comm/collective_args.h"
#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_nbc_tuning.h"
#include "comm/mpi/mpi_progress.h"
#include "comm/mpi/mpi_types.h"
#include "core/error.h"

namespace zeroshard {

namespace {

// What a receive expects, checked against the status once it completes
// ([Note: point-to-point order] in comm/communicator.h).
struct RecvCheck {
  bool on = false;
  int peer = -1;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  DType dtype = DType::f32;
};

// One outstanding MPI request. `call` names the collective that started it,
// so a failing MPI_Wait is reported as "MPI_Wait on MPI_Iallreduce".
class MpiWork final : public CommWork::Impl {
 public:
  // Registers with the progress thread ([Note: MPI progress]) until done,
  // if it takes collectives of this size; `bytes`: the collective's largest
  // buffer.
  MpiWork(MPI_Request request, const char* call, int rank, std::size_t bytes, RecvCheck check = {})
      : request_(request), call_(call), rank_(rank), check_(check), registered_(MpiProgress::instance().begin(bytes)) {}

  // A request still pending here was neither waited nor tested to
  // completion (CommWork waits before destroying, so this only happens
  // after a failed wait); complete it quietly while MPI is still running.
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL && !mpi_finalized()) MPI_Wait(&request_, MPI_STATUS_IGNORE);
    unregister();
  }

  MpiWork(const MpiWork&) = delete;
  MpiWork& operator=(const MpiWork&) = delete;

  void wait() override {
    int rc = MPI_SUCCESS;
    {
      // This thread drives progress inside MPI_Wait; the progress thread
      // pauses meanwhile, and finds nothing left to poll for afterwards
      // ([Note: MPI progress]).
      const MpiProgress::WaitScope waiting(MpiProgress::instance());
      rc = MPI_Wait(&request_, &status_);
      if (rc != MPI_SUCCESS) request_ = MPI_REQUEST_NULL;
      unregister();
    }
    if (rc != MPI_SUCCESS) mpi_check(rc, std::string("MPI_Wait on ") + call_, rank_);
    check_received();
  }

  bool test() override {
    int done = 0;
    const int rc = MPI_Test(&request_, &done, &status_);
    if (rc != MPI_SUCCESS) {
      request_ = MPI_REQUEST_NULL;
      mpi_check(rc, std::string("MPI_Test on ") + call_, rank_);
    }
    if (done != 0) {
      unregister();
      check_received();
    }
    return done != 0;
  }

  bool cancel() noexcept override {
    if (request_ == MPI_REQUEST_NULL || mpi_finalized()) return true;
    if (MPI_Cancel(&request_) != MPI_SUCCESS) return false;
    MPI_Wait(&request_, MPI_STATUS_IGNORE);  // returns once cancelled (or completed)
    request_ = MPI_REQUEST_NULL;
    unregister();
    return true;
  }

 private:
  // A receive got exactly the elements it expected (a longer message is
  // MPI_ERR_TRUNCATE, reported by MPI_Wait itself).
  void check_received() {
    if (!check_.on) return;
    check_.on = false;
    int got = 0;
    mpi_check(MPI_Get_count(&status_, check_.type, &got), "MPI_Get_count", rank_);
    if (got != check_.count) {
      throw CommError(fmt::format(
          "recv on rank {} of the mpi communicator from peer {}: expected {} {} elements, the "
          "message has {}; the sender and the receiver must pass the same count",
          rank_, check_.peer, check_.count, dtype_name(check_.dtype), got));
    }
  }

  // Tells the progress thread this collective no longer needs it (once).
  void unregister() {
    if (registered_) MpiProgress::instance().end();
    registered_ = false;
  }

  MPI_Request request_;
  const char* call_;
  int rank_;
  RecvCheck check_;
  MPI_Status status_{};
  bool registered_;
};

CommWork make_work(MPI_Request request, const char* call, int rank, std::size_t bytes,
                   RecvCheck check = {}) {
  return CommWork(std::make_unique<MpiWork>(request, call, rank, bytes, check));
}

// The MPI arguments of one collective, after the checks that its blocking
// and non-blocking forms share (null buffers, overlap, count <= INT_MAX,
// broadcast root). `call` names the MPI call in a count error. For
// all_gather, send/send_count/send_type are MPI_IN_PLACE, 0 and
// MPI_DATATYPE_NULL in the in-place form.
struct MpiArgs {
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  const void* send = nullptr;
  int send_count = 0;
  MPI_Datatype send_type = MPI_DATATYPE_NULL;
};

MpiArgs all_reduce_args(const void* buf, std::size_t count, DType dtype, ReduceOp op,
                        const char* call, int rank) {
  check_buffer(buf, count, "all_reduce buf");
  MpiArgs a;
  a.count = mpi_count(count, call, rank);
  a.type = mpi_datatype(dtype);
  a.op = mpi_op(dtype, op);
  return a;
}

MpiArgs reduce_scatter_args(const void* send, const void* recv, std::size_t count, DType dtype,
                            ReduceOp op, const char* call, int rank, int size) {
  check_buffer(send, count, "reduce_scatter send");
  check_buffer(recv, count, "reduce_scatter recv");
  MpiArgs a;
  a.count = mpi_count(count, call, rank);
  check_reduce_scatter_disjoint(send, recv, count, dtype, size);
  a.type = mpi_datatype(dtype);
  a.op = mpi_op(dtype, op);
  return a;
}

MpiArgs all_gather_args(const void* send, const void* recv, std::size_t count, DType dtype,
                        const char* call, int rank, int size) {
  check_buffer(send, count, "all_gather send");
  check_buffer(recv, count, "all_gather recv");
  MpiArgs a;
  a.count = mpi_count(count, call, rank);
  a.type = mpi_datatype(dtype);
  if (all_gather_in_place(send, recv, count, dtype, rank, size)) {
    a.send = MPI_IN_PLACE;
  } else {
    a.send = send;
    a.send_count = a.count;
    a.send_type = a.type;
  }
  return a;
}

MpiArgs broadcast_args(const void* buf, std::size_t count, DType dtype, int root,
                       const char* call, int rank, int size) {
  check_broadcast_root(root, size, rank, "mpi");
  check_buffer(buf, count, "broadcast buf");
  MpiArgs a;
  a.count = mpi_count(count, call, rank);
  a.type = mpi_datatype(dtype);
  return a;
}

// Held around a blocking collective: like MPI_Wait, the call drives Open
// MPI's progress engine for every outstanding request, so the progress
// thread pauses meanwhile ([Note: MPI progress]).
class BlockingScope {
 public:
  BlockingScope() : waiting_(MpiProgress::instance()) {}

 private:
  MpiProgress::WaitScope waiting_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, Ownership ownership)
    : comm_(comm), ownership_(ownership) {
  ZS_CHECK(comm != MPI_COMM_NULL, "MpiCommunicator needs a communicator, got MPI_COMM_NULL");
  try {
    int initialized = 0;
    ZS_MPI_CALL(-1, MPI_Initialized, &initialized);
    if (!initialized || mpi_finalized()) {
      throw CommError(
          "MpiCommunicator: MPI is not running; create communicators with "
          "make_world_communicator() (which initialises MPI) before MPI_Finalize");
    }
    ZS_MPI_CALL(-1, MPI_Comm_set_errhandler, comm_, MPI_ERRORS_RETURN);
    ZS_MPI_CALL(-1, MPI_Comm_rank, comm_, &rank_);
    ZS_MPI_CALL(rank_, MPI_Comm_size, comm_, &size_);
  } catch (...) {
    free_owned();
    throw;
  }
}

MpiCommunicator::~MpiCommunicator() {
  free_owned();
}

void MpiCommunicator::free_owned() noexcept {
  if (ownership_ == Ownership::owned && comm_ != MPI_COMM_NULL && !mpi_finalized()) {
    MPI_Comm_free(&comm_);
  }
  comm_ = MPI_COMM_NULL;
}

CommWork MpiCommunicator::iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  const MpiArgs a = all_reduce_args(buf, count, dtype, op, "MPI_Iallreduce", rank_);
  MPI_Request request = MPI_REQUEST_NULL;
  // Held until the call has started: [Note: libnbc all-reduce algorithm].
  const auto algorithm =
      select_iallreduce_algorithm(count * dtype_size(dtype), count, size_);
  ZS_MPI_CALL(rank_, MPI_Iallreduce, MPI_IN_PLACE, buf, a.count, a.type, a.op, comm_, &request);
  return make_work(request, "MPI_Iallreduce", rank_, count * dtype_size(dtype));
}

CommWork MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                          DType dtype, ReduceOp op) {
  const MpiArgs a =
      reduce_scatter_args(send, recv, count, dtype, op, "MPI_Ireduce_scatter_block", rank_, size_);
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Ireduce_scatter_block, send, recv, a.count, a.type, a.op, comm_,
              &request);
  return make_work(request, "MPI_Ireduce_scatter_block", rank_,
                   count * dtype_size(dtype) * static_cast<std::size_t>(size_));
}

CommWork MpiCommunicator::iall_gather(const void* send, void* recv, std::size_t count,
                                      DType dtype) {
  const MpiArgs a = all_gather_args(send, recv, count, dtype, "MPI_Iallgather", rank_, size_);
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Iallgather, a.send, a.send_count, a.send_type, recv, a.count, a.type,
              comm_, &request);
  return make_work(request, "MPI_Iallgather", rank_,
                   count * dtype_size(dtype) * static_cast<std::size_t>(size_));
}

CommWork MpiCommunicator::iall_to_all(const void* send, void* recv, std::size_t count, DType dtype) {
  const std::size_t total = count * static_cast<std::size_t>(size_);
  check_buffer(send, total, "all_to_all send");
  check_buffer(recv, total, "all_to_all recv");
  check_all_to_all_disjoint(send, recv, count, dtype, size_);
  const int n = mpi_count(count, "MPI_Ialltoall", rank_);
  const MPI_Datatype type = mpi_datatype(dtype);
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Ialltoall, send, n, type, recv, n, type, comm_, &request);
  return make_work(request, "MPI_Ialltoall", rank_, total * dtype_size(dtype));
}

CommWork MpiCommunicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  const MpiArgs a = broadcast_args(buf, count, dtype, root, "MPI_Ibcast", rank_, size_);
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Ibcast, buf, a.count, a.type, root, comm_, &request);
  return make_work(request, "MPI_Ibcast", rank_, count * dtype_size(dtype));
}

CommWork MpiCommunicator::ibarrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Ibarrier, comm_, &request);
  return make_work(request, "MPI_Ibarrier", rank_, 0);
}

CommWork MpiCommunicator::isend(const void* buf, std::size_t count, DType dtype, int peer) {
  check_p2p("send", buf, count, peer, rank_, size_, "mpi");
  const int n = mpi_count(count, "MPI_Isend", rank_);
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Isend, buf, n, mpi_datatype(dtype), peer, kP2pTag, comm_, &request);
  return make_work(request, "MPI_Isend", rank_, count * dtype_size(dtype));
}

CommWork MpiCommunicator::irecv(void* buf, std::size_t count, DType dtype, int peer) {
  check_p2p("recv", buf, count, peer, rank_, size_, "mpi");
  RecvCheck check;
  check.on = true;
  check.peer = peer;
  check.count = mpi_count(count, "MPI_Irecv", rank_);
  check.type = mpi_datatype(dtype);
  check.dtype = dtype;
  MPI_Request request = MPI_REQUEST_NULL;
  ZS_MPI_CALL(rank_, MPI_Irecv, buf, check.count, check.type, peer, kP2pTag, comm_, &request);
  return make_work(request, "MPI_Irecv", rank_, count * dtype_size(dtype), check);
}

void MpiCommunicator::all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  const MpiArgs a = all_reduce_args(buf, count, dtype, op, "MPI_Allreduce", rank_);
  const BlockingScope blocking;
  ZS_MPI_CALL(rank_, MPI_Allreduce, MPI_IN_PLACE, buf, a.count, a.type, a.op, comm_);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                                     ReduceOp op) {
  const MpiArgs a =
      reduce_scatter_args(send, recv, count, dtype, op, "MPI_Reduce_scatter_block", rank_, size_);
  const BlockingScope blocking;
  ZS_MPI_CALL(rank_, MPI_Reduce_scatter_block, send, recv, a.count, a.type, a.op, comm_);
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype) {
  const MpiArgs a = all_gather_args(send, recv, count, dtype, "MPI_Allgather", rank_, size_);
  const BlockingScope blocking;
  ZS_MPI_CALL(rank_, MPI_Allgather, a.send, a.send_count, a.send_type, recv, a.count, a.type,
              comm_);
}

void MpiCommunicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  const MpiArgs a = broadcast_args(buf, count, dtype, root, "MPI_Bcast", rank_, size_);
  const BlockingScope blocking;
  ZS_MPI_CALL(rank_, MPI_Bcast, buf, a.count, a.type, root, comm_);
}

void MpiCommunicator::barrier() {
  const BlockingScope blocking;
  ZS_MPI_CALL(rank_, MPI_Barrier, comm_);
}

void MpiCommunicator::abort(int code) {
  MPI_Abort(comm_, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  check_split_color(color, rank_, "mpi");
  MPI_Comm sub = MPI_COMM_NULL;
  ZS_MPI_CALL(rank_, MPI_Comm_split, comm_, color, key, &sub);
  return std::make_unique<MpiCommunicator>(sub, Ownership::owned);
}

}  // namespace zeroshard
