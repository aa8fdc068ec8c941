// DeepSpeed's CSV monitor (ds_config csv_monitor): the training series of a
// run written as CSV files, one per series, by the Engine on world rank 0 at
// each optimizer step (Engine::report_loss gives it the loop's loss).
//
// [Note: monitor files]
// The layout is DeepSpeed's csvMonitor (deepspeed/monitor/csv_monitor.py):
// the folder csv_monitor.output_path/csv_monitor.job_name holds one file per
// series, named after DeepSpeed's event name with "/" replaced by "_"
// (Train/Samples/lr -> Train_Samples_lr.csv), whose first line is
// "step,<series>" and each further line "<samples>,<value>". As in
// DeepSpeed, the first column holds the global samples trained so far (the
// x axis of every Train/Samples/* event), not the optimizer step: samples =
// micro-batches run x micro-batch x data-parallel size, so a run of
// train_batch_size b has rows at b, 2b, 3b, ... The series:
//   train_loss          DeepSpeed's: the mean of the losses the loop
//                       reported (Engine::report_loss) since the previous
//                       step, as world rank 0 saw them; no row for a step
//                       without a report
//   lr                  DeepSpeed's: parameter group 0's learning rate of
//                       the step (the schedule's value)
//   loss_scale          DeepSpeed's: the loss scale the step's gradients
//                       carried, fp16 only
//   grad_norm           zeroshard's: the global gradient norm before clipping
//   skipped_steps       zeroshard's: steps skipped for Inf/NaN so far
//   step_time_ms        zeroshard's: wall time from the previous step's end
//                       (the first: from finalize()) to this one's, ms
//   samples_per_second  zeroshard's: the step's samples / its time
// A file is appended to (a resumed run continues its series); its header is
// written only when the file is new or empty (DeepSpeed writes one per
// process). Every line is flushed as written, so a killed run keeps its
// rows. Values are printed in the shortest form that reads back to the
// same double. TensorBoard event files are not written: no C++ writer is
// packaged in Debian, and TensorBoard's record format would need protoc at
// build time and a CRC-32C the project's libraries lack (docs/config.md,
// "Monitor").
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config/observe_config.h"

namespace zeroshard {

/// What the engine knows of one optimizer step (applied or skipped) when it
/// ends. Plain value.
struct MonitorStep {
  std::int64_t samples = 0;       ///< global samples trained so far, this step's included
  std::int64_t step_samples = 0;  ///< this step's samples (train_batch_size)
  double lr = 0;                  ///< parameter group 0's learning rate of the step
  double grad_norm = 0;           ///< before clipping
  std::optional<double> loss_scale;  ///< fp16 only
  std::int64_t skipped_steps = 0;    ///< so far
};

/// Writes the series of [Note: monitor files] to csv_monitor's folder.
/// Thread safety: one thread (the engine's).
class CsvMonitor {
 public:
  /// Creates the folder (and its parents) and opens the files of the series
  /// every step writes (all but train_loss and loss_scale, opened at their
  /// first row), so a folder that cannot be written fails here. Throws
  /// IoError naming the folder or file and the system's reason. The clock
  /// of the first step starts now.
  explicit CsvMonitor(const CsvMonitorConfig& config);

  /// A loss of the step under way (e.g. one per micro-batch); the step's
  /// row holds the mean of those reported since the previous row.
  void add_loss(double loss);
  /// Appends the step's row to every series (train_loss when a loss was
  /// reported, loss_scale when set), each line flushed, and restarts the
  /// step clock. Never throws: the first write that fails prints one line
  /// to stderr naming the file and the reason, and the monitor stops
  /// (training goes on).
  void write(const MonitorStep& step);
  /// False once a write failed.
  bool ok() const { return ok_; }
  const std::string& directory() const { return dir_; }

  /// The series' names, in the order of the note.
  static const std::vector<std::string>& series();
  /// DeepSpeed's event name of series `name` ("Train/Samples/lr").
  static std::string event_name(std::string_view name);
  /// The file of series `name` in `directory` ("<dir>/Train_Samples_lr.csv").
  static std::string file_of(const std::string& directory, std::string_view name);

 private:
  // Appends "<samples>,<value>" to series `name`, opening it first if needed.
  void append(const std::string& name, std::int64_t samples, double value);
  std::ofstream& open(const std::string& name);

  std::string dir_;
  std::map<std::string, std::ofstream> files_;
  double loss_sum_ = 0;
  std::int64_t loss_count_ = 0;
  std::int64_t clock_ns_ = 0;  ///< steady clock at the previous step's end
  bool ok_ = true;
};

/// The rows of one series file: (step column, value), in file order.
/// Throws IoError when it cannot be read, and Error naming the file and the
/// line for a header that is not "step,<name>" or a row that is not two
/// numbers.
std::vector<std::pair<std::int64_t, double>> read_monitor_series(const std::string& path);

}  // namespace zeroshard
