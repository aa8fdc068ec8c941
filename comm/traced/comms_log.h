// CommsLog: DeepSpeed's communication logger (`comms_logger` in ds_config)
// for zeroshard's collectives.
//
// The options are DeepSpeed's keys with DeepSpeed's meaning:
//  - enabled: log at all (off: record() returns at once);
//  - verbose: also print one line per collective as it completes;
//  - prof_all: log every kind of collective (default true); when false,
//    only the kinds named in prof_ops;
//  - prof_ops: collective kinds to log when prof_all is false, by
//    zeroshard's names ("all_reduce", "reduce_scatter", "all_gather",
//    "all_to_all", "broadcast", "barrier", and "send" and "recv" for
//    point-to-point messages, which DeepSpeed logs under the same names);
//  - debug: add the communicator name and the unit label (DeepSpeed adds the
//    calling function) to each verbose line.
// Figures are kept per (kind, message size in bytes, world size): count,
// total bytes, the bytes sent to ranks on other hosts (cross_host_bytes in
// comm/traced/collective_record.h; 0 unless the feeding communicator knows every
// rank's host), total and mean latency, and nccl-tests' algorithm and bus
// bandwidth, algbw = size / time and busbw = algbw * bus_bandwidth_factor
// (comm/traced/collective_record.h), in GB/s (1e9 bytes per second). The latency
// is what the TracedCommunicator that feeds the log measured: from the
// call to the moment wait() returned (or test() saw completion). Unlike
// DeepSpeed, zeroshard does not synchronise ranks around logged
// collectives, so for non-blocking collectives the latency includes the
// time they ran under the caller's compute.
//
// Thread safety: every member may be called from any thread (a mutex
// guards the figures and the verbose stream).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "comm/traced/collective_record.h"

namespace zeroshard {

/// DeepSpeed's `comms_logger` keys; see the file comment.
struct CommsLogOptions {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;
  bool debug = false;
};

/// The figures of one (kind, message size, world size).
struct CommsLogRow {
  CollectiveKind kind = CollectiveKind::barrier;
  std::uint64_t message_bytes = 0;  ///< collective_bytes() of each collective of the row
  int world_size = 1;
  std::uint64_t count = 0;          ///< collectives logged
  std::uint64_t total_bytes = 0;    ///< count * message_bytes
  std::uint64_t cross_host_bytes = 0;  ///< bytes this rank sent to other hosts in them
  double total_ms = 0.0;            ///< summed latency, milliseconds
  double mean_ms = 0.0;             ///< total_ms / count
  double algbw_gbps = 0.0;          ///< total_bytes / total time, GB/s (0 if no time)
  double busbw_gbps = 0.0;          ///< algbw_gbps * bus_bandwidth_factor(kind, world_size)
};

/// See the file comment.
class CommsLog {
 public:
  /// `verbose_out` receives the verbose lines (must outlive the log when
  /// verbose is on). Throws ConfigError naming "comms_logger.prof_ops" and
  /// the name if prof_ops holds an unknown collective name.
  explicit CommsLog(CommsLogOptions options, std::ostream* verbose_out = nullptr);

  /// The options given at construction.
  const CommsLogOptions& options() const { return options_; }
  /// True if enabled and `kind` is profiled (prof_all or named in prof_ops).
  bool profiles(CollectiveKind kind) const {
    return options_.enabled && profiled_[static_cast<std::size_t>(kind)];
  }
  /// True if enabled at all (the one check a TracedCommunicator makes).
  bool enabled() const { return options_.enabled; }

  /// Adds one completed collective of `bytes` (collective_bytes()) that took
  /// `latency_ns` (negative counts as 0) on a communicator of `world_size`
  /// ranks named `communicator`, labelled `label`, of which this rank sent
  /// `cross_host` bytes to other hosts; ignored unless profiles(kind). With
  /// verbose, prints its line.
  void record(CollectiveKind kind, std::uint64_t bytes, std::int64_t latency_ns, int world_size,
              std::string_view communicator = {}, std::string_view label = {}, std::uint64_t cross_host = 0);

  /// The figures so far, ordered by kind, then message size, then world size.
  std::vector<CommsLogRow> rows() const;
  /// The bytes this rank sent to other hosts in every logged collective.
  std::uint64_t cross_host_bytes() const;
  /// The rows as a text table (one header line, one line per row; "no
  /// collectives logged" when empty), for printing at the end of a run.
  std::string summary() const;
  /// Forgets every figure (e.g. between epochs).
  void clear();

 private:
  struct Sums {
    std::uint64_t count = 0;
    std::int64_t total_ns = 0;
    std::uint64_t cross_host = 0;
  };
  using Key = std::tuple<CollectiveKind, std::uint64_t, int>;

  CommsLogOptions options_;
  bool profiled_[kCollectiveKinds] = {};
  std::ostream* out_ = nullptr;
  mutable std::mutex mutex_;
  std::map<Key, Sums> sums_;
};

}  // namespace zeroshard
