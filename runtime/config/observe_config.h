// What a run reports about itself (issue: step breakdown, communication log,
// Chrome traces, straggler view, collective timeouts). Read from the
// ds_config keys below by EngineConfig::from_json; every switch is off by
// default, and with all of them off the engine's spans cost one branch each
// ([Note: tracing] in core/tracer.h).
// Details: [Note: observe keys] below.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "comm/traced/comms_log.h"

// [Note: observe keys]
//   wall_clock_breakdown         DeepSpeed's key: every steps_per_print
//                                optimizer steps, rank 0 prints the step
//                                breakdown (compute, exposed communication,
//                                hidden communication and the overlap
//                                fraction, optimizer, swap I/O waits, other;
//                                min / median / max over ranks and the slowest
//                                rank) and the straggler line (which rank
//                                arrived last at the collectives, by how much).
//   comms_logger.enabled         DeepSpeed's communication log: per collective
//   comms_logger.verbose         kind and message size, count, bytes, latency,
//   comms_logger.prof_all        algbw and busbw (nccl-tests' definitions);
//   comms_logger.prof_ops        prof_all false logs only the kinds prof_ops
//   comms_logger.debug           names ("all_reduce", "all_gather", ...);
//                                verbose prints each collective as it
//                                completes, debug adds its unit.
//   zeroshard.trace.enabled      one Chrome trace per rank, merged by rank 0
//   zeroshard.trace.output_path  into <output_path>/trace.json (Perfetto,
//                                chrome://tracing), written by
//                                Engine::write_trace(); the spans are kept
//                                in memory until then (tens of bytes each,
//                                a few dozen per unit and step).
//   zeroshard.collective_check   true: before each collective every rank's
//                                fingerprint (kind, count, dtype, unit) is
//                                compared, and a mismatch (a rank that
//                                skipped an unshard) is the same CommError
//                                on every rank naming the odd rank, instead
//                                of MPI matching the wrong calls (as
//                                PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL);
//                                one extra small all-gather per collective.
//   zeroshard.collective_timeout_s  > 0: a collective that does not complete
//                                in this many seconds ends the job with one
//                                message naming every rank's collective
//                                (comm/traced/collective_watchdog.h); 0 (default):
//                                off. Needs MPI with MPI_THREAD_MULTIPLE
//                                (the report's side channel); the engine's
//                                constructor throws CommError otherwise,
//                                and on NCCL communicators for now.
//   csv_monitor.enabled          DeepSpeed's CSV monitor: world rank 0
//   csv_monitor.output_path      writes one file per series under
//   csv_monitor.job_name         output_path/job_name at each optimizer
//                                step (runtime/observe/csv_monitor.h,
//                                [Note: monitor files]).

namespace zeroshard {

/// DeepSpeed's comms_logger section: the comms log's own options
/// (comm/traced/comms_log.h). Plain value type.
using CommsLoggerConfig = CommsLogOptions;

/// DeepSpeed's csv_monitor section (its CSVConfig defaults). Plain value type.
struct CsvMonitorConfig {
  bool enabled = false;
  std::string output_path;                  ///< "" = the working directory
  std::string job_name = "DeepSpeedJobName";
  /// The folder the files go to: output_path/job_name (job_name alone when
  /// output_path is empty, as DeepSpeed joins them).
  std::string directory() const { return (std::filesystem::path(output_path) / job_name).string(); }
};

/// The observability settings of an engine (see the file comment). Plain
/// value type.
struct ObserveConfig {
  bool wall_clock_breakdown = false;
  CommsLoggerConfig comms_logger;
  bool trace = false;
  std::string trace_output_path = "zeroshard-trace";
  double collective_timeout_s = 0;  ///< seconds; 0 = off
  bool collective_check = false;    ///< zeroshard.collective_check
  CsvMonitorConfig csv_monitor;     ///< csv_monitor
  /// True when any switch needs the per-collective records.
  bool records() const { return wall_clock_breakdown || trace; }
};

}  // namespace zeroshard
