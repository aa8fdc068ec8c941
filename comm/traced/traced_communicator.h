// TracedCommunicator: a Communicator decorator that numbers, labels, times
// and watches every collective of the communicator it wraps.
// Details: [Note: traced collectives] below.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/traced/collective_record.h"
#include "comm/traced/collective_watchdog.h"

// [Note: traced collectives]
// Every collective, blocking or not, gets the next sequence number of this
// communicator (`seq`, from 1; every rank numbers alike under SPMD) and a
// fingerprint {kind, count, dtype, root, label}, where the label is the
// unit or bucket name the caller set (set_label / LabelScope). A
// point-to-point send or recv (not SPMD: only two ranks take part) leaves
// that sequence alone and is numbered per peer instead: send #k to rank b
// is this rank's k-th send to b, which rank b receives as its recv #k from
// this rank ([Note: point-to-point order] in comm/communicator.h); its
// fingerprint carries the peer. Sends and receives are observed like
// collectives below (records, spans, comms log, watchdog) except for
// check_fingerprints, which compares collectives only. Then, each only
// when switched on:
//  - recording (set_recording): a CollectiveRecord per completed
//    collective, returned in issue order by take_records();
//  - a Tracer: a TraceSpan on TraceThread::comm from issue to completion
//    (name = kind, unit = label, bytes, seq), one named "wait <kind>" on
//    TraceThread::engine for the time the caller waited, and the time the calling
//    thread blocks in wait() or in a blocking collective charged to
//    TimeCategory::comm_wait (Tracer::open / close);
//  - a CommsLog: one entry per completed collective (comm/traced/comms_log.h),
//    with the bytes it sent to ranks on other hosts (cross_host_bytes in
//    comm/traced/collective_record.h): with a log, the constructor exchanges the
//    ranks' host identifiers once (node_of_ranks, comm/node_groups.h; a
//    collective), except over NCCL, whose collectives take device buffers
//    (set_node_of_rank gives the map there);
//  - check_fingerprints: every rank's fingerprint compared before each
//    collective (TracedOptions::check_fingerprints);
//  - a timeout: the collective watchdog ([Note: collective watchdog] in
//    comm/traced/collective_watchdog.h) ends the job with one message naming every
//    rank's collective when one blocks longer than the timeout or fails.
// With all of these off, a collective costs the sequence increment and one
// branch on top of the inner call, and the inner CommWork is returned
// unwrapped. Completion is seen when wait() returns or test() first
// returns true; a handle destroyed while pending waits (CommWork's rule),
// which counts as a wait.
//
// `bytes` follows nccl-tests (collective_bytes in comm/traced/collective_record.h).
// Times are Tracer::now_ns().
//
// Thread safety: the Communicator contract (one thread at a time); the
// CommWork handles it returns must be completed before the communicator is
// destroyed and from the thread that uses it. Errors: whatever the inner
// communicator throws, unchanged (with a timeout, the watchdog is told
// first); the constructor throws what CollectiveWatchdog::watch throws.

namespace zeroshard {

class CommsLog;
class Tracer;

/// What a TracedCommunicator does besides numbering; all off by default.
struct TracedOptions {
  Tracer* tracer = nullptr;       ///< spans and comm_wait accounting (not owned)
  CommsLog* comms_log = nullptr;  ///< DeepSpeed-style comms log (not owned)
  double timeout_s = 0.0;         ///< collective watchdog timeout in seconds; 0 = off
  bool recording = false;         ///< start with recording on (see set_recording)
  /// Before every collective, all-gather every rank's fingerprint on a
  /// dedicated communicator (split at construction: collective) and throw
  /// the same CommError on every rank when they differ (an agreed error;
  /// the collective is then not issued). One extra blocking all-gather per
  /// collective: a debugging aid, like TORCH_DISTRIBUTED_DEBUG=DETAIL.
  bool check_fingerprints = false;
  /// This rank's host identifier for the cross-host byte counts of the
  /// comms log ("" = the host name, this_host_id()); tests give ranks
  /// distinct identifiers to stand for hosts.
  std::string host_id{};
};

/// See the file comment.
class TracedCommunicator final : public Communicator {
 public:
  /// Wraps `inner` (not owned; must outlive this object) under `name`
  /// ("dp", "tp", "world", ...). With options.timeout_s > 0 the
  /// communicator is watched; the first watched communicator of a process
  /// is created collectively over the whole job (CollectiveWatchdog::watch).
  TracedCommunicator(Communicator& inner, std::string name, TracedOptions options = {});
  /// As above, owning `inner` (not null).
  TracedCommunicator(std::unique_ptr<Communicator> inner, std::string name,
                     TracedOptions options = {});
  ~TracedCommunicator() override;
  TracedCommunicator(const TracedCommunicator&) = delete;
  TracedCommunicator& operator=(const TracedCommunicator&) = delete;

  /// The name given at construction.
  const std::string& name() const { return name_; }
  /// The wrapped communicator.
  Communicator& inner() { return *inner_; }
  /// The options given at construction (recording as it was then).
  const TracedOptions& options() const { return options_; }

  /// Sets the label of the collectives issued from now on ("" for none).
  void set_label(std::string label) override { label_ = std::move(label); }
  /// The current label.
  const std::string& label() const { return label_; }

  /// Sets the label for its lifetime and restores the previous one after.
  class LabelScope {
   public:
    LabelScope(TracedCommunicator& comm, std::string label)
        : comm_(comm), previous_(std::move(comm.label_)) {
      comm_.label_ = std::move(label);
    }
    ~LabelScope() { comm_.label_ = std::move(previous_); }
    LabelScope(const LabelScope&) = delete;
    LabelScope& operator=(const LabelScope&) = delete;

   private:
    TracedCommunicator& comm_;
    std::string previous_;
  };

  /// Keeps a CollectiveRecord per collective completed from now on (true)
  /// or stops keeping them (false; records kept so far stay).
  void set_recording(bool on) { recording_ = on; }
  /// Whether records are kept.
  bool recording() const { return recording_; }
  /// The records kept so far, in issue order (ascending seq), and forgets
  /// them. Collectives still pending are not included yet.
  std::vector<CollectiveRecord> take_records();
  /// Every rank's host (node numbers as node_of_ranks gives them), indexed
  /// by rank; empty when no comms log asked for it (or over NCCL until set).
  const std::vector<int>& node_of_rank() const { return node_of_; }
  /// Sets the map node_of_rank() returns (world_size() entries), for a
  /// backend whose collectives cannot carry the exchange. Local.
  void set_node_of_rank(std::vector<int> node_of_rank);
  /// Sequence number of the last collective issued (0 before the first).
  std::int64_t last_seq() const { return seq_; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  /// The inner backend's name ("mpi", "self", "nccl").
  std::string backend() const override { return inner_->backend(); }

  // Communicator (comm/communicator.h): each call, blocking or not, is the
  // inner communicator's same call, numbered and observed as the file
  // comment says.
  ZS_COMMUNICATOR_OVERRIDES;
  void all_reduce(void* buf, std::size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override;
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override;
  void broadcast(void* buf, std::size_t count, DType dtype, int root) override;
  void barrier() override;
  void send(const void* buf, std::size_t count, DType dtype, int peer) override;
  void recv(void* buf, std::size_t count, DType dtype, int peer) override;

  /// Number of the last send to (recv from) `peer` issued so far (0 before
  /// the first, and for a peer outside the communicator).
  std::int64_t last_send_seq(int peer) const;
  std::int64_t last_recv_seq(int peer) const;

  /// inner().split(color, key) wrapped in an owning TracedCommunicator
  /// named `name` with the same options (recording off). Collective. The
  /// override split(color, key) names it "<name>.<color>".
  std::unique_ptr<TracedCommunicator> split(int color, int key, std::string name);
  /// inner().abort(code).
  [[noreturn]] void abort(int code) override {
    inner_->abort(code);
    std::_Exit(code);  // not reached: abort() does not return
  }
  /// inner().make_side_channel(setup_timeout_s).
  std::unique_ptr<SideChannel> make_side_channel(double setup_timeout_s = 0) override;

 private:
  class Work;
  struct Call;
  // What a call is: its kind, count and dtype, and the broadcast root or the
  // point-to-point peer (-1 where it has none).
  struct CallSpec {
    CollectiveKind kind;
    std::size_t count;
    DType dtype;
    int root = -1;
    int peer = -1;
  };

  // Numbers `spec` and runs `issue`, the inner communicator's call (a
  // non-blocking one returns its CommWork, wrapped when observed; a blocking
  // one returns nothing), observed when anything beyond numbering is on.
  template <class Issue>
  auto traced(const CallSpec& spec, Issue&& issue);
  // True when anything beyond numbering is on.
  bool observed() const;
  // Compares every rank's fingerprint of `call` (check_fingerprints).
  void check_fingerprint(const Call& call);
  // The next number of `spec`: of the communicator's collectives, or of the
  // sends (receives) to (from) its peer; 0 for a peer outside.
  std::int64_t next_seq(const CallSpec& spec);
  Call begin(const CallSpec& spec, std::int64_t seq);
  void wait_begins(Call& call, std::int64_t now);
  void finish(Call& call, std::int64_t wait_begin_ns, std::int64_t end_ns, bool blocking);
  void fail(Call& call, const char* what);

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  std::string name_;
  TracedOptions options_;
  std::unique_ptr<CollectiveWatchdog::Slot> slot_;
  std::unique_ptr<Communicator> check_;  // check_fingerprints' own communicator
  std::string label_;
  bool recording_ = false;
  std::int64_t seq_ = 0;
  std::vector<std::int64_t> sends_;  // per peer: sends issued
  std::vector<std::int64_t> recvs_;  // per peer: receives issued
  std::vector<CollectiveRecord> records_;
  std::vector<int> node_of_;  // every rank's host, for the comms log's cross-host bytes
};

}  // namespace zeroshard
