#include "runtime/observe/csv_monitor.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Series every step writes (train_loss and loss_scale only sometimes).
bool always_written(const std::string& name) { return name != "train_loss" && name != "loss_scale"; }

}  // namespace

const std::vector<std::string>& CsvMonitor::series() {
  static const std::vector<std::string> names = {"train_loss",   "lr",           "loss_scale",        "grad_norm",
                                                 "skipped_steps", "step_time_ms", "samples_per_second"};
  return names;
}

std::string CsvMonitor::event_name(std::string_view name) { return fmt::format("Train/Samples/{}", name); }

std::string CsvMonitor::file_of(const std::string& directory, std::string_view name) {
  std::string file = event_name(name);
  for (char& c : file) {
    if (c == '/' || c == ' ') c = '_';
  }
  return (std::filesystem::path(directory) / (file + ".csv")).string();
}

CsvMonitor::CsvMonitor(const CsvMonitorConfig& config) : dir_(config.directory()) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create the csv_monitor folder: {}", dir_, ec.message()));
  for (const std::string& name : series()) {
    if (!always_written(name)) continue;
    open(name);
    if (!ok_) {
      throw IoError(fmt::format("{}: cannot open the csv_monitor file for appending: {}", file_of(dir_, name),
                                std::strerror(errno)));
    }
  }
  clock_ns_ = steady_ns();
}

std::ofstream& CsvMonitor::open(const std::string& name) {
  const auto found = files_.find(name);
  if (found != files_.end()) return found->second;
  const std::string path = file_of(dir_, name);
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  errno = 0;
  std::ofstream& out = files_[name];
  out.open(path, std::ios::out | std::ios::app);
  if (out && fresh) out << "step," << name << '\n' << std::flush;
  if (!out) ok_ = false;
  return out;
}

void CsvMonitor::append(const std::string& name, std::int64_t samples, double value) {
  if (!ok_) return;
  std::ofstream& out = open(name);
  if (ok_) out << fmt::format("{},{}\n", samples, value) << std::flush;
  if (!ok_ || !out) {
    ok_ = false;
    std::fprintf(stderr, "zeroshard: csv_monitor: writing %s failed (%s); the monitor stops, training goes on\n",
                 file_of(dir_, name).c_str(), errno != 0 ? std::strerror(errno) : "stream error");
  }
}

void CsvMonitor::add_loss(double loss) {
  loss_sum_ += loss;
  ++loss_count_;
}

void CsvMonitor::write(const MonitorStep& step) {
  const std::int64_t now = steady_ns();
  const double seconds = static_cast<double>(now - clock_ns_) * 1e-9;
  clock_ns_ = now;
  if (loss_count_ > 0) append("train_loss", step.samples, loss_sum_ / static_cast<double>(loss_count_));
  loss_sum_ = 0;
  loss_count_ = 0;
  append("lr", step.samples, step.lr);
  if (step.loss_scale) append("loss_scale", step.samples, *step.loss_scale);
  append("grad_norm", step.samples, step.grad_norm);
  append("skipped_steps", step.samples, static_cast<double>(step.skipped_steps));
  append("step_time_ms", step.samples, seconds * 1e3);
  append("samples_per_second", step.samples, seconds > 0 ? static_cast<double>(step.step_samples) / seconds : 0.0);
}

std::vector<std::pair<std::int64_t, double>> read_monitor_series(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("{}: cannot open the monitor file: {}", path, std::strerror(errno)));
  std::vector<std::pair<std::int64_t, double>> rows;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::size_t comma = line.find(',');
    if (number == 1) {
      if (line.rfind("step,", 0) != 0 || line.size() == 5) {
        throw Error(fmt::format("{}:1: \"{}\" is not a monitor header \"step,<series>\"", path, line));
      }
      continue;
    }
    std::int64_t step = 0;
    double value = 0;
    const char* end = line.data() + line.size();
    const auto a = comma == std::string::npos ? std::from_chars_result{line.data(), std::errc::invalid_argument}
                                              : std::from_chars(line.data(), line.data() + comma, step);
    const auto b = a.ec == std::errc() && a.ptr == line.data() + comma
                       ? std::from_chars(line.data() + comma + 1, end, value)
                       : std::from_chars_result{line.data(), std::errc::invalid_argument};
    if (a.ec != std::errc() || b.ec != std::errc() || b.ptr != end) {
      throw Error(fmt::format("{}:{}: \"{}\" is not a row \"<step>,<value>\"", path, number, line));
    }
    rows.emplace_back(step, value);
  }
  return rows;
}

}  // namespace zeroshard
