// TracedCommunicator; see comm/traced/traced_communicator.h.
#include "comm/traced/traced_communicator.h"

#include <thread>

#include <algorithm>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/node_groups.h"
#include "comm/side_channel.h"
#include "comm/traced/comms_log.h"
#include "core/error.h"
#include "core/tracer.h"

namespace zeroshard {

// One observed collective: what it is and when it was issued.
struct TracedCommunicator::Call {
  std::int64_t seq = 0;
  CollectiveFingerprint fp;
  std::uint64_t bytes = 0;
  std::uint64_t cross_host = 0;  // sent to other hosts (cross_host_bytes)
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

namespace {

// Every rank's host for the comms log's cross-host bytes (a collective over
// `inner`), or nothing when there is no log or the backend takes device
// buffers only.
std::vector<int> exchange_hosts(Communicator& inner, const TracedOptions& o) {
  if (o.comms_log == nullptr || !o.comms_log->enabled() || inner.backend() == "nccl") return {};
  return node_of_ranks(inner, o.host_id.empty() ? this_host_id() : o.host_id);
}

}  // namespace

TracedCommunicator::TracedCommunicator(Communicator& inner, std::string name,
                                       TracedOptions options)
    : inner_(&inner), name_(std::move(name)), options_(options), recording_(options.recording) {
  if (options_.timeout_s > 0) slot_ = CollectiveWatchdog::watch(*inner_, name_, options_.timeout_s);
  if (options_.check_fingerprints) check_ = inner_->split(0, inner_->rank());
  node_of_ = exchange_hosts(*inner_, options_);
}

TracedCommunicator::TracedCommunicator(std::unique_ptr<Communicator> inner, std::string name,
                                       TracedOptions options)
    : owned_(std::move(inner)), inner_(owned_.get()), name_(std::move(name)), options_(options),
      recording_(options.recording) {
  ZS_CHECK(inner_ != nullptr, "TracedCommunicator \"{}\" needs an inner communicator", name_);
  if (options_.timeout_s > 0) slot_ = CollectiveWatchdog::watch(*inner_, name_, options_.timeout_s);
  if (options_.check_fingerprints) check_ = inner_->split(0, inner_->rank());
  node_of_ = exchange_hosts(*inner_, options_);
}

TracedCommunicator::~TracedCommunicator() = default;

void TracedCommunicator::set_node_of_rank(std::vector<int> node_of_rank) {
  ZS_CHECK(node_of_rank.empty() || node_of_rank.size() == static_cast<std::size_t>(inner_->world_size()),
           "TracedCommunicator \"{}\": a host map of {} ranks for {} ranks", name_, node_of_rank.size(),
           inner_->world_size());
  node_of_ = std::move(node_of_rank);
}

bool TracedCommunicator::observed() const {
  return recording_ || slot_ != nullptr || check_ != nullptr ||
         (options_.comms_log != nullptr && options_.comms_log->enabled()) ||
         (options_.tracer != nullptr && options_.tracer->active());
}

std::int64_t TracedCommunicator::next_seq(const CallSpec& spec) {
  if (!is_point_to_point(spec.kind)) return ++seq_;
  std::vector<std::int64_t>& counts = spec.kind == CollectiveKind::send ? sends_ : recvs_;
  if (spec.peer < 0 || spec.peer >= inner_->world_size()) return 0;  // the inner call throws
  if (counts.empty()) counts.assign(static_cast<std::size_t>(inner_->world_size()), 0);
  return ++counts[static_cast<std::size_t>(spec.peer)];
}

TracedCommunicator::Call TracedCommunicator::begin(const CallSpec& spec, std::int64_t seq) {
  Call c;
  c.seq = seq;
  c.fp = CollectiveFingerprint{spec.kind, spec.count, spec.dtype, spec.root, label_, spec.peer};
  c.bytes = collective_bytes(spec.kind, spec.count, spec.dtype, inner_->world_size());
  c.cross_host = cross_host_bytes(spec.kind, spec.count, spec.dtype, inner_->rank(), spec.root, spec.peer, node_of_);
  // Point-to-point calls skip the fingerprint check: only two ranks take part.
  if (check_ && !is_point_to_point(spec.kind)) check_fingerprint(c);
  c.issue_ns = Tracer::now_ns();
  return c;
}

std::int64_t TracedCommunicator::last_send_seq(int peer) const {
  if (peer < 0 || static_cast<std::size_t>(peer) >= sends_.size()) return 0;
  return sends_[static_cast<std::size_t>(peer)];
}

std::int64_t TracedCommunicator::last_recv_seq(int peer) const {
  if (peer < 0 || static_cast<std::size_t>(peer) >= recvs_.size()) return 0;
  return recvs_[static_cast<std::size_t>(peer)];
}

namespace {
// A fingerprint as doubles (exact: integers below 2^53, label characters
// one per element, the first kLabelChars of them).
constexpr std::size_t kLabelChars = 48;
constexpr std::size_t kFingerprintDoubles = 5 + kLabelChars;
}  // namespace

void TracedCommunicator::check_fingerprint(const Call& call) {
  const auto n = static_cast<std::size_t>(check_->world_size());
  std::vector<double> mine(kFingerprintDoubles, 0.0);
  mine[0] = static_cast<double>(call.seq);
  mine[1] = static_cast<double>(call.fp.kind);
  mine[2] = static_cast<double>(call.fp.count);
  mine[3] = static_cast<double>(call.fp.dtype);
  mine[4] = static_cast<double>(call.fp.root);
  for (std::size_t i = 0; i < kLabelChars && i < call.fp.label.size(); ++i) {
    mine[5 + i] = static_cast<unsigned char>(call.fp.label[i]);
  }
  std::vector<double> all(kFingerprintDoubles * n);
  // Watched like the collective itself: a rank that stopped calling
  // collectives leaves the others blocked here.
  if (slot_) slot_->begin_wait(call.seq, call.fp, Tracer::now_ns());
  try {
    check_->all_gather(mine.data(), all.data(), kFingerprintDoubles, DType::f64);
  } catch (const std::exception& e) {
    if (slot_) slot_->failed(call.seq, call.fp, e.what());
    throw;
  }
  if (slot_) slot_->end_wait(call.seq);
  bool same = true;
  for (std::size_t r = 1; r < n && same; ++r) {
    same = std::equal(all.begin(), all.begin() + kFingerprintDoubles,
                      all.begin() + static_cast<std::ptrdiff_t>(r * kFingerprintDoubles));
  }
  if (same) return;
  // Every rank holds the same table, so every rank throws the same message.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (std::size_t r = 0; r < n; ++r) {
    const double* f = all.data() + r * kFingerprintDoubles;
    CollectiveFingerprint fp;
    fp.kind = static_cast<CollectiveKind>(static_cast<int>(f[1]));
    fp.count = static_cast<std::size_t>(f[2]);
    fp.dtype = static_cast<DType>(static_cast<int>(f[3]));
    fp.root = static_cast<int>(f[4]);
    for (std::size_t i = 0; i < kLabelChars && f[5 + i] != 0.0; ++i) {
      fp.label += static_cast<char>(static_cast<int>(f[5 + i]));
    }
    const std::string text = describe(fp, static_cast<std::int64_t>(f[0]), name_);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == text; });
    if (it == groups.end()) {
      groups.push_back({text, {static_cast<int>(r)}});
    } else {
      it->second.push_back(static_cast<int>(r));
    }
  }
  std::string msg = "collective mismatch on communicator " + name_ + ": ";
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    msg += g > 0 ? "; " : "";
    msg += ranks.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      msg += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
    }
    msg += (ranks.size() == 1 ? " calls " : " call ") + groups[g].first;
  }
  throw CommError(msg + " (every rank must issue the same collectives in the same order)");
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
                                        end_ns, blocking, call.fp.peer});
  }
  CommsLog* log = options_.comms_log;
  if (log != nullptr && log->enabled()) {
    log->record(call.fp.kind, call.bytes, end_ns - call.issue_ns, inner_->world_size(), name_,
                call.fp.label, call.cross_host);
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
    if (wait_begin_ns >= 0 && end_ns > wait_begin_ns) {
      // The part the caller waited for (exposed), on the engine's thread.
      TraceSpan wait = span;
      wait.name = "wait " + span.name;
      wait.thread = TraceThread::engine;
      wait.begin_ns = wait_begin_ns;
      t->add_span(std::move(wait));
    }
    t->add_span(std::move(span));
  }
}

void TracedCommunicator::fail(Call& call, const char* what) {
  if (call.accounted) {
    options_.tracer->close(Tracer::now_ns());
    call.accounted = false;
  }
  if (slot_) {
    // The watchdog reports every rank's collective and ends the job within
    // its grace period; until then this rank stays, so that its status is
    // part of the report. Should the job still be running after that, the
    // error goes on to the caller.
    slot_->failed(call.seq, call.fp, what);
    std::this_thread::sleep_for(3 * CollectiveWatchdog::kGracePeriod);
  }
}

std::vector<CollectiveRecord> TracedCommunicator::take_records() {
  std::vector<CollectiveRecord> out = std::move(records_);
  records_.clear();
  std::stable_sort(out.begin(), out.end(),
                   [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.seq < b.seq; });
  return out;
}

template <class Issue>
auto TracedCommunicator::traced(const CallSpec& spec, Issue&& issue) {
  const std::int64_t seq = next_seq(spec);
  if (!observed()) [[likely]] return issue();
  Call call = begin(spec, seq);
  if constexpr (std::is_void_v<std::invoke_result_t<Issue>>) {
    // Blocking: the caller waits from the issue to the return.
    wait_begins(call, call.issue_ns);
    try {
      issue();
    } catch (const std::exception& e) {
      fail(call, e.what());
      throw;
    }
    finish(call, call.issue_ns, Tracer::now_ns(), true);
  } else {
    // Non-blocking: the issue itself may throw (bad arguments), reported
    // as a failure; completion is seen through the returned handle.
    CommWork work;
    try {
      work = issue();
    } catch (const std::exception& e) {
      fail(call, e.what());
      throw;
    }
    return CommWork(std::make_unique<Work>(*this, std::move(call), std::move(work)));
  }
}

CommWork TracedCommunicator::iall_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  return traced({CollectiveKind::all_reduce, count, dtype},
                [&] { return inner_->iall_reduce(buf, count, dtype, op); });
}

void TracedCommunicator::all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) {
  traced({CollectiveKind::all_reduce, count, dtype},
         [&] { inner_->all_reduce(buf, count, dtype, op); });
}

CommWork TracedCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                             DType dtype, ReduceOp op) {
  return traced({CollectiveKind::reduce_scatter, count, dtype},
                [&] { return inner_->ireduce_scatter(send, recv, count, dtype, op); });
}

void TracedCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count,
                                        DType dtype, ReduceOp op) {
  traced({CollectiveKind::reduce_scatter, count, dtype},
         [&] { inner_->reduce_scatter(send, recv, count, dtype, op); });
}

CommWork TracedCommunicator::iall_gather(const void* send, void* recv, std::size_t count,
                                         DType dtype) {
  return traced({CollectiveKind::all_gather, count, dtype},
                [&] { return inner_->iall_gather(send, recv, count, dtype); });
}

void TracedCommunicator::all_gather(const void* send, void* recv, std::size_t count,
                                    DType dtype) {
  traced({CollectiveKind::all_gather, count, dtype},
         [&] { inner_->all_gather(send, recv, count, dtype); });
}

CommWork TracedCommunicator::iall_to_all(const void* send, void* recv, std::size_t count,
                                         DType dtype) {
  return traced({CollectiveKind::all_to_all, count, dtype},
                [&] { return inner_->iall_to_all(send, recv, count, dtype); });
}

void TracedCommunicator::all_to_all(const void* send, void* recv, std::size_t count,
                                    DType dtype) {
  traced({CollectiveKind::all_to_all, count, dtype},
         [&] { inner_->all_to_all(send, recv, count, dtype); });
}

CommWork TracedCommunicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  return traced({CollectiveKind::broadcast, count, dtype, root},
                [&] { return inner_->ibroadcast(buf, count, dtype, root); });
}

void TracedCommunicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  traced({CollectiveKind::broadcast, count, dtype, root},
         [&] { inner_->broadcast(buf, count, dtype, root); });
}

CommWork TracedCommunicator::ibarrier() {
  return traced({CollectiveKind::barrier, 0, DType::f32}, [&] { return inner_->ibarrier(); });
}

void TracedCommunicator::barrier() {
  traced({CollectiveKind::barrier, 0, DType::f32}, [&] { inner_->barrier(); });
}

CommWork TracedCommunicator::isend(const void* buf, std::size_t count, DType dtype, int peer) {
  return traced({CollectiveKind::send, count, dtype, -1, peer},
                [&] { return inner_->isend(buf, count, dtype, peer); });
}

void TracedCommunicator::send(const void* buf, std::size_t count, DType dtype, int peer) {
  traced({CollectiveKind::send, count, dtype, -1, peer},
         [&] { inner_->send(buf, count, dtype, peer); });
}

CommWork TracedCommunicator::irecv(void* buf, std::size_t count, DType dtype, int peer) {
  return traced({CollectiveKind::recv, count, dtype, -1, peer},
                [&] { return inner_->irecv(buf, count, dtype, peer); });
}

void TracedCommunicator::recv(void* buf, std::size_t count, DType dtype, int peer) {
  traced({CollectiveKind::recv, count, dtype, -1, peer},
         [&] { inner_->recv(buf, count, dtype, peer); });
}

std::unique_ptr<Communicator> TracedCommunicator::split(int color, int key) {
  return split(color, key, name_ + "." + std::to_string(color));
}

std::unique_ptr<TracedCommunicator> TracedCommunicator::split(int color, int key,
                                                              std::string name) {
  TracedOptions options = options_;
  options.recording = false;  // check_fingerprints: the new one splits its own
  return std::make_unique<TracedCommunicator>(inner_->split(color, key), std::move(name), options);
}

std::unique_ptr<SideChannel> TracedCommunicator::make_side_channel(double setup_timeout_s) {
  return inner_->make_side_channel(setup_timeout_s);
}

}  // namespace zeroshard
