// TracedCommunicator; see comm/traced_communicator.h.
#include "comm/traced_communicator.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "comm/comms_log.h"
#include "comm/side_channel.h"
#include "core/error.h"
#include "core/tracer.h"

namespace zeroshard {

// One observed collective: what it is and when it was issued.
struct TracedCommunicator::Call {
  std::int64_t seq = 0;
  CollectiveFingerprint fp;
  std::uint64_t bytes = 0;
  std::int64_t issue_ns = 0;
  bool accounted = false;  // Tracer::open was called for the wait in progress
};

// The handle of an observed non-blocking collective: completes the inner
// handle and tells the communicator when (wait or test).
class TracedCommunicator::Work final : public CommWork::Impl {
 public:
  Work(TracedCommunicator& owner, Call&& call, CommWork inner)
      : owner_(owner), call_(std::move(call)), inner_(std::move(inner)) {}

  void wait() override {
    const std::int64_t begin = Tracer::now_ns();
    owner_.wait_begins(call_, begin);
    try {
      inner_.wait();
    } catch (const std::exception& e) {
      owner_.fail(call_, e.what());
      throw;
    }
    owner_.finish(call_, begin, Tracer::now_ns(), false);
  }

  bool test() override {
    bool done = false;
    try {
      done = inner_.test();
    } catch (const std::exception& e) {
      owner_.fail(call_, e.what());
      throw;
    }
    if (done) owner_.finish(call_, -1, Tracer::now_ns(), false);
    return done;
  }

 private:
  TracedCommunicator& owner_;
  Call call_;
  CommWork inner_;
};

TracedCommunicator::TracedCommunicator(Communicator& inner, std::string name,
                                       TracedOptions options)
    : inner_(&inner), name_(std::move(name)), options_(options), recording_(options.recording) {
  if (options_.timeout_s > 0) slot_ = CollectiveWatchdog::watch(*inner_, name_, options_.timeout_s);
}

TracedCommunicator::TracedCommunicator(std::unique_ptr<Communicator> inner, std::string name,
                                       TracedOptions options)
    : owned_(std::move(inner)), inner_(owned_.get()), name_(std::move(name)), options_(options),
      recording_(options.recording) {
  ZS_CHECK(inner_ != nullptr, "TracedCommunicator \"{}\" needs an inner communicator", name_);
  if (options_.timeout_s > 0) slot_ = CollectiveWatchdog::watch(*inner_, name_, options_.timeout_s);
}

TracedCommunicator::~TracedCommunicator() = default;

bool TracedCommunicator::observed() const {
  return recording_ || slot_ != nullptr ||
         (options_.comms_log != nullptr && options_.comms_log->enabled()) ||
         (options_.tracer != nullptr && options_.tracer->active());
}

TracedCommunicator::Call TracedCommunicator::begin(CollectiveKind kind, std::size_t count,
                                                   DType dtype, int root) {
  Call c;
  c.seq = seq_;
  c.fp = CollectiveFingerprint{kind, count, dtype, root, label_};
  c.bytes = collective_bytes(kind, count, dtype, inner_->world_size());
  c.issue_ns = Tracer::now_ns();
  return c;
}

CommWork TracedCommunicator::wrap(Call&& call, CommWork inner) {
  return CommWork(std::make_unique<Work>(*this, std::move(call), std::move(inner)));
}

void TracedCommunicator::wait_begins(Call& call, std::int64_t now) {
  Tracer* t = options_.tracer;
  call.accounted = t != nullptr && t->accounting_on();
  if (call.accounted) t->open(TimeCategory::comm_wait, now);
  if (slot_) slot_->begin_wait(call.seq, call.fp, now);
}

void TracedCommunicator::finish(Call& call, std::int64_t wait_begin_ns, std::int64_t end_ns,
                                bool blocking) {
  Tracer* t = options_.tracer;
  if (call.accounted) {
    t->close(end_ns);
    call.accounted = false;
  }
  if (slot_) slot_->completed(call.seq, call.fp, end_ns);
  if (recording_) {
    records_.push_back(CollectiveRecord{call.seq, call.fp.kind, call.fp.count, call.fp.dtype,
                                        call.bytes, call.fp.label, call.issue_ns, wait_begin_ns,
                                        end_ns, blocking});
  }
  CommsLog* log = options_.comms_log;
  if (log != nullptr && log->enabled()) {
    log->record(call.fp.kind, call.bytes, end_ns - call.issue_ns, inner_->world_size(), name_,
                call.fp.label);
  }
  if (t != nullptr && t->spans_on()) {
    TraceSpan span;
    span.name = to_string(call.fp.kind);
    span.thread = TraceThread::comm;
    span.unit = call.fp.label;
    span.bytes = call.bytes;
    span.begin_ns = call.issue_ns;
    span.end_ns = end_ns;
    span.seq = call.seq;
    t->add_span(std::move(span));
  }
}

void TracedCommunicator::fail(Call& call, const char* what) {
  if (call.accounted) {
    options_.tracer->close(Tracer::now_ns());
    call.accounted = false;
  }
  if (slot_) slot_->failed(call.seq, call.fp, what);
}

template <class F>
void TracedCommunicator::blocking(Call&& call, F&& f) {
  wait_begins(call, call.issue_ns);
  try {
    f();
  } catch (const std::exception& e) {
    fail(call, e.what());
    throw;
  }
  finish(call, call.issue_ns, Tracer::now_ns(), true);
}

std::vector<CollectiveRecord> TracedCommunicator::take_records() {
  std::vector<CollectiveRecord> out = std::move(records_);
  records_.clear();
  std::stable_sort(out.begin(), out.end(),
                   [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.seq < b.seq; });
  return out;
}

// A non-blocking collective: numbered always, observed when anything is on.
// The issue call itself may throw (bad arguments): reported as a failure.
#define ZS_TRACED_ISSUE(KIND, COUNT, DTYPE, ROOT, CALL)             \
  ++seq_;                                                           \
  if (!observed()) [[likely]] return CALL;                          \
  Call call = begin(KIND, COUNT, DTYPE, ROOT);                      \
  CommWork work;                                                    \
  try {                                                             \
    work = CALL;                                                    \
  } catch (const std::exception& e) {                               \
    fail(call, e.what());                                           \
    throw;                                                          \
  }                                                                 \
  return wrap(std::move(call), std::move(work))

// A blocking collective: numbered always, observed when anything is on.
#define ZS_TRACED_BLOCKING(KIND, COUNT, DTYPE, ROOT, CALL) \
  ++seq_;                                                  \
  if (!observed()) [[likely]] {                            \
    CALL;                                                  \
    return;                                                \
  }                                                        \
  blocking(begin(KIND, COUNT, DTYPE, ROOT), [&] { CALL; })

CommWork TracedCommunicator::iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  ZS_TRACED_ISSUE(CollectiveKind::all_reduce, count, dtype, -1,
                  inner_->iall_reduce(buf, count, dtype, op));
}

CommWork TracedCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                             DType dtype, ReduceOp op) {
  ZS_TRACED_ISSUE(CollectiveKind::reduce_scatter, count, dtype, -1,
                  inner_->ireduce_scatter(send, recv, count, dtype, op));
}

CommWork TracedCommunicator::iall_gather(const void* send, void* recv, std::size_t count,
                                         DType dtype) {
  ZS_TRACED_ISSUE(CollectiveKind::all_gather, count, dtype, -1,
                  inner_->iall_gather(send, recv, count, dtype));
}

CommWork TracedCommunicator::iall_to_all(const void* send, void* recv, std::size_t count,
                                         DType dtype) {
  ZS_TRACED_ISSUE(CollectiveKind::all_to_all, count, dtype, -1,
                  inner_->iall_to_all(send, recv, count, dtype));
}

CommWork TracedCommunicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  ZS_TRACED_ISSUE(CollectiveKind::broadcast, count, dtype, root,
                  inner_->ibroadcast(buf, count, dtype, root));
}

CommWork TracedCommunicator::ibarrier() {
  ZS_TRACED_ISSUE(CollectiveKind::barrier, 0, DType::f32, -1, inner_->ibarrier());
}

void TracedCommunicator::all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  ZS_TRACED_BLOCKING(CollectiveKind::all_reduce, count, dtype, -1,
                     inner_->all_reduce(buf, count, dtype, op));
}

void TracedCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count,
                                        DType dtype, ReduceOp op) {
  ZS_TRACED_BLOCKING(CollectiveKind::reduce_scatter, count, dtype, -1,
                     inner_->reduce_scatter(send, recv, count, dtype, op));
}

void TracedCommunicator::all_gather(const void* send, void* recv, std::size_t count,
                                    DType dtype) {
  ZS_TRACED_BLOCKING(CollectiveKind::all_gather, count, dtype, -1,
                     inner_->all_gather(send, recv, count, dtype));
}

void TracedCommunicator::all_to_all(const void* send, void* recv, std::size_t count,
                                    DType dtype) {
  ZS_TRACED_BLOCKING(CollectiveKind::all_to_all, count, dtype, -1,
                     inner_->all_to_all(send, recv, count, dtype));
}

void TracedCommunicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  ZS_TRACED_BLOCKING(CollectiveKind::broadcast, count, dtype, root,
                     inner_->broadcast(buf, count, dtype, root));
}

void TracedCommunicator::barrier() {
  ZS_TRACED_BLOCKING(CollectiveKind::barrier, 0, DType::f32, -1, inner_->barrier());
}

#undef ZS_TRACED_ISSUE
#undef ZS_TRACED_BLOCKING

std::unique_ptr<Communicator> TracedCommunicator::split(int color, int key) {
  return split(color, key, name_ + "." + std::to_string(color));
}

std::unique_ptr<TracedCommunicator> TracedCommunicator::split(int color, int key,
                                                              std::string name) {
  TracedOptions options = options_;
  options.recording = false;
  return std::make_unique<TracedCommunicator>(inner_->split(color, key), std::move(name), options);
}

std::unique_ptr<SideChannel> TracedCommunicator::make_side_channel() {
  return inner_->make_side_channel();
}

}  // namespace zeroshard
