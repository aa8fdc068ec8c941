#include "examples/report/progress_line.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace zeroshard::examples {

std::string format_hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e12) return "-:--:--";
  const auto s = static_cast<std::int64_t>(seconds);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

std::string format_rate(double steps_per_s) {
  if (!std::isfinite(steps_per_s)) return "?";
  if (steps_per_s == 0) return "0";
  const double a = std::abs(steps_per_s);
  if (a >= 100) return fmt::format("{:.0f}", steps_per_s);
  if (a >= 10) return fmt::format("{:.1f}", steps_per_s);
  if (a >= 1) return fmt::format("{:.2f}", steps_per_s);
  return fmt::format("{:.3g}", steps_per_s);
}

ProgressLine::ProgressLine(std::string what, std::int64_t total_steps, std::FILE* out)
    : ProgressLine(std::move(what), total_steps, out, Options{}) {}

ProgressLine::ProgressLine(std::string what, std::int64_t total_steps, std::FILE* out, Options options)
    : what_(std::move(what)), total_(total_steps), out_(out), options_(std::move(options)) {
  tty_ = options_.tty.value_or(out_ != nullptr && isatty(fileno(out_)) != 0);
  if (tty_ && options_.columns <= 0) {
    winsize ws{};
    options_.columns = out_ != nullptr && ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
  }
  start_s_ = now();
  last_print_s_ = start_s_;
  last_update_s_ = start_s_;
  step_ = options_.start_step;
}

ProgressLine::~ProgressLine() { finish(); }

double ProgressLine::now() const {
  if (options_.now_s) return options_.now_s();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ProgressLine::text() const {
  const double elapsed = last_update_s_ - start_s_;
  const auto done = static_cast<double>(step_ - options_.start_step);
  const double rate = elapsed > 0 ? done / elapsed : std::nan("");
  const double eta = rate > 0 ? static_cast<double>(total_ - step_) / rate : std::nan("");
  const double pct = total_ > 0 ? 100.0 * static_cast<double>(step_) / static_cast<double>(total_) : 0.0;
  std::string line = total_ > 0 ? fmt::format("{} step {}/{} ({:.0f}%)", what_, step_, total_, std::floor(pct))
                                : fmt::format("{} step {}", what_, step_);
  line += fmt::format("  {} steps/s  ETA {}", format_rate(rate), format_hms(eta));
  if (!extra_.empty()) {
    line += "  ";
    line += extra_;
  }
  return line;
}

void ProgressLine::print(double now) {
  last_print_s_ = now;
  printed_latest_ = true;
  if (out_ == nullptr) return;
  std::string line = text();
  if (tty_) {
    const auto width = static_cast<std::size_t>(std::max(options_.columns - 1, 1));
    if (line.size() > width) line.resize(width);
    const std::size_t pad = drawn_width_ > line.size() ? drawn_width_ - line.size() : 0;
    drawn_width_ = line.size();
    std::fprintf(out_, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressLine::update(std::int64_t step, std::string_view extra) {
  if (finished_) return;
  const double t = now();
  step_ = step;
  extra_.assign(extra);
  last_update_s_ = t;
  updated_ = true;
  printed_latest_ = false;
  const double every = tty_ ? options_.tty_every_s : options_.plain_every_s;
  if ((total_ > 0 && step >= total_) || t - last_print_s_ >= every) print(t);
}

void ProgressLine::finish() {
  if (finished_) return;
  finished_ = true;
  if (!updated_) return;
  if (!printed_latest_) print(last_update_s_);
  if (tty_ && out_ != nullptr) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace zeroshard::examples
