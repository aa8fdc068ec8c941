// A progress line for long runs (training steps, offload stress, checkpoint
// export): step/total, rate and ETA.
//
// On a terminal, one line rewritten in place with "\r" at most about ten
// times a second (and always at the last step); otherwise (a log file, a
// pipe, CI) a plain line every `plain_every_s` seconds (default 10) and at
// the last step, so logs stay short. For example:
//
//   train step 120/1000 (12%)  8.41 steps/s  ETA 0:01:44  loss 0.4312
//
// Thread safety: one thread (the training loop's); the FILE* is written
// with stdio, so other writers to it interleave at line granularity at
// best. Errors: none thrown; write errors on `out` are ignored.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace zeroshard::examples {

/// "h:mm:ss" for a non-negative number of seconds (rounded down; hours not
/// bounded, e.g. "27:03:09"); "-:--:--" when negative or not finite.
std::string format_hms(double seconds);

/// A rate in steps per second with 3 significant digits ("8.41", "12.5",
/// "1234"), "0" for zero, "?" when not finite.
std::string format_rate(double steps_per_s);

class ProgressLine {
 public:
  /// What the constructor would decide itself, overridable (tests, or a
  /// `--progress` flag).
  struct Options {
    /// Terminal mode; nullopt: isatty(fileno(out)).
    std::optional<bool> tty;
    /// Terminal mode: least seconds between two rewrites of the line.
    double tty_every_s = 0.1;
    /// Plain mode: least seconds between two printed lines.
    double plain_every_s = 10.0;
    /// Steps already done when the line starts (a resumed run): the rate
    /// counts steps after this one.
    std::int64_t start_step = 0;
    /// Terminal mode: the line is cut to this many columns minus one; 0
    /// asks the terminal (TIOCGWINSZ), 80 if it cannot tell.
    int columns = 0;
    /// Clock in seconds; null: std::chrono::steady_clock.
    std::function<double()> now_s;
  };

  /// A line for `total_steps` steps of `what` (e.g. "train"), written to
  /// `out` (not owned; must outlive this object; null prints nothing). The
  /// rate and ETA are measured from construction. With total_steps <= 0
  /// (unknown) the line shows no total and no last step, and the ETA
  /// reads "-:--:--".
  ProgressLine(std::string what, std::int64_t total_steps, std::FILE* out = stderr);
  ProgressLine(std::string what, std::int64_t total_steps, std::FILE* out, Options options);
  /// Calls finish().
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  /// `step` steps are done (1-based: `total_steps` is the last); `extra` is
  /// appended (e.g. "loss 0.4312"). Prints if the mode's interval has passed
  /// since the last print, or if this is the last step.
  void update(std::int64_t step, std::string_view extra = {});
  /// Ends the line: on a terminal prints the latest state and a newline; in
  /// plain mode prints the latest state if it was not printed yet. Later
  /// calls (and update) do nothing.
  void finish();

  /// True in terminal mode.
  bool tty() const { return tty_; }
  /// The text of the line for the latest update (no "\r" or newline).
  std::string text() const;

 private:
  double now() const;
  void print(double now);

  std::string what_;
  std::int64_t total_ = 0;
  std::FILE* out_ = nullptr;
  Options options_;
  bool tty_ = false;
  double start_s_ = 0;
  double last_print_s_ = 0;
  double last_update_s_ = 0;
  std::int64_t step_ = 0;
  std::string extra_;
  bool updated_ = false;       // update called at least once
  bool printed_latest_ = true; // the latest update has been printed
  bool finished_ = false;
  std::size_t drawn_width_ = 0;  // terminal mode: length of the line on screen
};

}  // namespace zeroshard::examples
