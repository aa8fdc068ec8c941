// examples/report: stacked bar SVG charts (one series group per bar, XML
// escaping, zero and single values, rounded ticks) and the progress line in
// plain and terminal modes with a fake clock. The case "report files for
// the python check" writes charts and rank traces for
// check_report_files.py, which parses them with Python's XML and JSON
// readers and runs zs_trace_merge on them.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/report/progress_line.h"
#include "examples/report/run_charts.h"
#include "examples/report/svg_chart.h"
#include "runtime/observe/chrome_trace.h"

using namespace zeroshard;
using namespace zeroshard::examples;

namespace {

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

BarChart memory_chart(int ranks) {
  BarChart c{"Model-state memory per rank", "MiB", {"parameters", "gradients", "optimizer states"}, {}};
  for (int r = 0; r < ranks; ++r) {
    c.bars.push_back({fmt::format("rank {}", r), {12.5, 6.25 + r, 50.0 / (r + 1)}});
  }
  return c;
}

/// Everything written to a ProgressLine driven by `drive`, in `tty` mode,
/// with a clock that `drive` advances through `now`.
template <class F>
std::string progress_output(bool tty, std::int64_t total, F drive, double plain_every_s = 10.0) {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  double now = 0;
  {
    ProgressLine::Options o;
    o.tty = tty;
    o.plain_every_s = plain_every_s;
    o.columns = 200;
    o.now_s = [&now] { return now; };
    ProgressLine line("train", total, f, o);
    drive(line, now);
  }
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace

TEST_CASE("stacked_bar_svg: one series group per bar, segments per non-zero value, legend, title") {
  const std::string svg = stacked_bar_svg(memory_chart(4));
  CHECK(svg.starts_with("<?xml version=\"1.0\""));
  CHECK(svg.find("xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  CHECK(count(svg, "<g class=\"series\"") == 4);
  for (int r = 0; r < 4; ++r) CHECK(count(svg, fmt::format("data-label=\"rank {}\"", r)) == 1);
  CHECK(count(svg, "<rect class=\"segment\"") == 12);
  CHECK(count(svg, "<g class=\"legend\">") == 1);
  CHECK(svg.find("optimizer states") != std::string::npos);
  CHECK(svg.find("Model-state memory per rank") != std::string::npos);
  CHECK(svg.ends_with("</svg>\n"));
}

TEST_CASE("stacked_bar_svg: labels, categories, title and unit are XML-escaped") {
  BarChart c{"a <b> & \"c\"", "ms & <s>", {"x<y", "p&q"}, {{"rank <0> & 'one'", {1.0, 2.0}}}};
  const std::string svg = stacked_bar_svg(c);
  CHECK(svg.find("rank &lt;0&gt; &amp; &apos;one&apos;") != std::string::npos);
  CHECK(svg.find("x&lt;y") != std::string::npos);
  CHECK(svg.find("p&amp;q") != std::string::npos);
  CHECK(svg.find("a &lt;b&gt; &amp; &quot;c&quot;") != std::string::npos);
  CHECK(svg.find("<0>") == std::string::npos);
  CHECK(svg.find("& ") == std::string::npos);
  CHECK(xml_escape(std::string("a\x01" "b")) == "a b");
}

TEST_CASE("stacked_bar_svg: zero, single, missing and non-finite values; no bars; too many values") {
  const std::string zeros = stacked_bar_svg(BarChart{"zeros", "MiB", {"a", "b"}, {{"rank 0", {0.0, 0.0}}}});
  CHECK(count(zeros, "<g class=\"series\"") == 1);
  CHECK(count(zeros, "<rect class=\"segment\"") == 0);
  CHECK(zeros.find("nan") == std::string::npos);
  const std::string single = stacked_bar_svg(BarChart{"one", "ms", {"compute"}, {{"rank 0", {7.0}}}});
  CHECK(count(single, "<g class=\"series\"") == 1);
  CHECK(count(single, "<rect class=\"segment\"") == 1);
  const std::string odd = stacked_bar_svg(
      BarChart{"odd", "ms", {"a", "b", "c"}, {{"r0", {NAN}}, {"r1", {-3.0, INFINITY}}, {"r2", {1.0}}}});
  CHECK(count(odd, "<g class=\"series\"") == 3);
  CHECK(count(odd, "<rect class=\"segment\"") == 1);
  const std::string none = stacked_bar_svg(BarChart{"none", "MiB", {"a"}, {}});
  CHECK(count(none, "<g class=\"series\"") == 0);
  CHECK(count(none, "<g class=\"legend\">") == 1);
  const BarChart bad{"bad", "MiB", {"a"}, {{"rank 3", {1.0, 2.0}}}};
  CHECK_THROWS_WITH_AS(stacked_bar_svg(bad), doctest::Contains("rank 3"), Error);
}

TEST_CASE("stacked_bar_svg: several panels in one document, one series group per bar in each") {
  std::vector<BarChart> stages;
  for (int s = 0; s < 4; ++s) {
    BarChart c = memory_chart(2);
    c.title = fmt::format("stage {}", s);
    stages.push_back(c);
  }
  const std::string svg = stacked_bar_svg(stages);
  CHECK(count(svg, "<svg ") == 1);
  CHECK(count(svg, "<g class=\"panel\"") == 4);
  CHECK(count(svg, "<g class=\"series\"") == 8);
  // One y scale for all panels: the small panel's axis also reaches 100.
  const std::vector<BarChart> scaled = {BarChart{"small", "MiB", {"a"}, {{"rank 0", {10.0}}}},
                                        BarChart{"large", "MiB", {"a"}, {{"rank 0", {100.0}}}}};
  CHECK(count(stacked_bar_svg(scaled), "text-anchor=\"end\">100</text>") == 2);
}

TEST_CASE("monitor_chart: a csv_monitor series as at most max_bars bars, each the mean of its rows") {
  std::vector<std::pair<std::int64_t, double>> rows;
  for (int i = 1; i <= 7; ++i) rows.emplace_back(32 * i, static_cast<double>(i));
  const BarChart c = monitor_chart("loss", "nats", rows, 3);
  CHECK(c.unit == "nats");
  REQUIRE(c.bars.size() == 3);  // 7 rows in groups of 3: 3 + 3 + 1
  CHECK(c.bars[0].label == "96");
  CHECK(c.bars[0].values == std::vector<double>{2.0});
  CHECK(c.bars[1].label == "192");
  CHECK(c.bars[1].values == std::vector<double>{5.0});
  CHECK(c.bars[2].label == "224");
  CHECK(c.bars[2].values == std::vector<double>{7.0});
  CHECK(monitor_chart("loss", "nats", rows, 12).bars.size() == 7);
  CHECK(monitor_chart("loss", "nats", {}, 12).bars.empty());
  CHECK(count(stacked_bar_svg(c), "class=\"series\"") == 3);
}

TEST_CASE("axis_ticks: rounded steps from 0 past the maximum") {
  CHECK(axis_ticks(7.3) == std::vector<double>{0, 2, 4, 6, 8});
  CHECK(axis_ticks(100) == std::vector<double>{0, 20, 40, 60, 80, 100});
  CHECK(axis_ticks(0) == std::vector<double>{0, 1});
  CHECK(axis_ticks(-5) == std::vector<double>{0, 1});
  CHECK(axis_ticks(NAN) == std::vector<double>{0, 1});
  const std::vector<double> small = axis_ticks(0.3);
  REQUIRE(small.size() == 4);
  CHECK(small.back() == doctest::Approx(0.3));
  const std::vector<double> quarter = axis_ticks(1.2);  // step 0.25
  CHECK(quarter[1] == 0.25);
  CHECK(quarter.back() >= 1.2);
  for (double m : {1e-6, 0.07, 3.0, 12.0, 999.0, 1234567.0}) {
    const auto t = axis_ticks(m);
    CHECK(t.front() == 0);
    CHECK(t.back() >= m);
    CHECK(t.size() >= 2);
    CHECK(t.size() <= 11);
  }
}

TEST_CASE("write_text_atomically: writes and replaces; an unwritable path is named") {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("zs-test-report-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "chart.svg").string();
  write_text_atomically(path, "one");
  write_text_atomically(path, "two");
  CHECK(std::filesystem::file_size(path) == 3);
  const std::string bad = (dir / "absent" / "chart.svg").string();
  CHECK_THROWS_WITH_AS(write_text_atomically(bad, "x"), doctest::Contains("absent/chart.svg"), IoError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("format_hms and format_rate") {
  CHECK(format_hms(0) == "0:00:00");
  CHECK(format_hms(59.9) == "0:00:59");
  CHECK(format_hms(3725) == "1:02:05");
  CHECK(format_hms(97389) == "27:03:09");
  CHECK(format_hms(-1) == "-:--:--");
  CHECK(format_hms(NAN) == "-:--:--");
  CHECK(format_rate(0) == "0");
  CHECK(format_rate(8.414) == "8.41");
  CHECK(format_rate(12.46) == "12.5");
  CHECK(format_rate(1234.4) == "1234");
  CHECK(format_rate(0.01234) == "0.0123");
  CHECK(format_rate(INFINITY) == "?");
}

TEST_CASE("ProgressLine, plain mode: a line every interval and at the last step, rate and ETA") {
  // 5 steps of 1 s with a 10 s interval: only the last step is printed.
  const std::string short_run = progress_output(false, 5, [](ProgressLine& line, double& now) {
    CHECK_FALSE(line.tty());
    for (int s = 1; s <= 5; ++s) {
      now += 1;
      line.update(s, "loss 0.5");
    }
  });
  CHECK(short_run == "train step 5/5 (100%)  1.00 steps/s  ETA 0:00:00  loss 0.5\n");

  // 100 steps of 0.5 s with a 10 s interval: steps 20, 40, 60, 80, 100.
  const std::string long_run = progress_output(false, 100, [](ProgressLine& line, double& now) {
    for (int s = 1; s <= 100; ++s) {
      now += 0.5;
      line.update(s);
    }
  });
  CHECK(count(long_run, "\n") == 5);
  CHECK(count(long_run, "\r") == 0);
  CHECK(long_run.starts_with("train step 20/100 (20%)  2.00 steps/s  ETA 0:00:40\n"));
  CHECK(long_run.find("train step 100/100 (100%)") != std::string::npos);

  // Stopped early: finish prints the latest state once.
  const std::string early = progress_output(false, 1000, [](ProgressLine& line, double& now) {
    now = 4;
    line.update(2, "stopping");
    line.finish();
    line.update(3);  // ignored after finish
  });
  CHECK(early == "train step 2/1000 (0%)  0.5 steps/s  ETA 0:33:16  stopping\n");

  // Unknown total: no last step, so the interval alone decides; no ETA.
  const std::string unknown = progress_output(false, 0, [](ProgressLine& line, double& now) {
    for (int s = 1; s <= 30; ++s) {
      now += 1;
      line.update(s);
    }
  });
  CHECK(count(unknown, "\n") == 3);
  CHECK(unknown.starts_with("train step 10  1.00 steps/s  ETA -:--:--\n"));

  // Nothing updated: nothing printed.
  CHECK(progress_output(false, 10, [](ProgressLine&, double&) {}).empty());
}

TEST_CASE("ProgressLine, terminal mode: one line rewritten with \\r, throttled, ended by finish") {
  const std::string out = progress_output(true, 1000, [](ProgressLine& line, double& now) {
    CHECK(line.tty());
    for (int s = 1; s <= 1000; ++s) {
      now += 0.001;  // 1000 steps/s: 1 s in all, about 10 rewrites
      line.update(s, s % 2 == 0 ? "even" : "odd step");
    }
  });
  const std::size_t rewrites = count(out, "\r");
  CHECK(rewrites >= 9);
  CHECK(rewrites <= 12);
  CHECK(count(out, "\n") == 1);
  CHECK(out.ends_with("\n"));
  CHECK(out.find("train step 1000/1000 (100%)  1000 steps/s  ETA 0:00:00  even") != std::string::npos);
  // A shorter line pads over the longer one before it.
  const std::string pad = progress_output(true, 10, [](ProgressLine& line, double& now) {
    now = 1;
    line.update(1, "a long extra text");
    now = 2;
    line.update(2);
  });
  const std::size_t second = pad.rfind('\r');
  const std::size_t first_len = pad.find('\r', 1);
  REQUIRE(second != std::string::npos);
  CHECK(pad.size() - second - 2 == first_len - 1);  // same width as the first ("\n" excluded)
}

TEST_CASE("report files for the python check") {
  const char* out = std::getenv("ZS_REPORT_OUT");
  if (out == nullptr) return;  // only under check_report_files.py
  namespace fs = std::filesystem;
  const fs::path dir(out);
  fs::create_directories(dir / "traces");
  nlohmann::json expected = nlohmann::json::object();
  auto emit = [&](const std::string& name, const std::vector<BarChart>& panels) {
    write_text_atomically((dir / name).string(), stacked_bar_svg(panels));
    nlohmann::json labels = nlohmann::json::array();
    for (const BarChart& c : panels) {
      nlohmann::json l = nlohmann::json::array();
      for (const Bar& b : c.bars) l.push_back(b.label);
      labels.push_back(l);
    }
    expected[name] = labels;
  };
  BarChart escaped = memory_chart(3);
  escaped.bars[1].label = "rank <1> & \"co\"";
  escaped.categories[0] = "params <fp32> & co";
  emit("memory.svg", {escaped});
  std::vector<BarChart> stages;
  for (int s = 0; s < 4; ++s) {
    BarChart c = memory_chart(2);
    c.title = fmt::format("stage {}", s);
    stages.push_back(c);
  }
  emit("stages.svg", stages);
  emit("zeros.svg", {BarChart{"zeros", "ms", {"compute", "comm_wait"}, {{"rank 0", {0.0, 0.0}}, {"rank 1", {}}}}});
  emit("single.svg", {BarChart{"single", "ms", {"compute"}, {{"rank 0", {3.0}}}}});
  write_text_atomically((dir / "expected.json").string(), expected.dump(1));

  for (int r = 0; r < 3; ++r) {
    const std::vector<TraceSpan> spans = {
        {"all_gather", TraceThread::comm, "fc1", 64, 1'000 * (3 - r), 1'000 * (3 - r) + 500, 0}};
    write_chrome_trace((dir / "traces" / chrome_trace_file_name(r)).string(), r, spans, {}, {0, 10}, 0);
  }
  write_text_atomically((dir / "bad-trace.json").string(), "{\"traceEvents\": 3}");
}
