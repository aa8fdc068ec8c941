// The CSV monitor (runtime/observe/csv_monitor.h, [Note: monitor files]):
// DeepSpeed's folder and file names and header, the rows' values read back
// exactly, train_loss as the mean of the reported losses, loss_scale only
// when set, appending across monitors without a second header, the
// csv_monitor keys of a ds_config, and the errors: a folder that cannot be
// made, a file that cannot be written (the monitor stops, nothing throws),
// a malformed file read back.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/observe/csv_monitor.h"
#include "tests/support/scratch_files.h"

using namespace zeroshard;
namespace fs = std::filesystem;

namespace {

/// A fresh scratch directory for one test case.
fs::path scratch(const char* name) {
  return zeroshard::testing::fresh_scratch_dir(std::string("csv-monitor-") + name);
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Rows = std::vector<std::pair<std::int64_t, double>>;

}  // namespace

TEST_CASE("csv monitor: DeepSpeed's layout, and every row's value read back exactly") {
  const fs::path root = scratch("layout");
  CsvMonitorConfig cfg;
  cfg.enabled = true;
  cfg.output_path = (root / "out").string();
  cfg.job_name = "job1";
  CHECK(cfg.directory() == (root / "out" / "job1").string());
  CsvMonitor m(cfg);
  const std::string dir = (root / "out" / "job1").string();
  CHECK(m.directory() == dir);
  CHECK(CsvMonitor::event_name("lr") == "Train/Samples/lr");
  CHECK(CsvMonitor::file_of(dir, "train_loss") == dir + "/Train_Samples_train_loss.csv");
  // The series every step writes exist from the start, with their header.
  for (const char* name : {"lr", "grad_norm", "skipped_steps", "step_time_ms", "samples_per_second"}) {
    CHECK(text_of(CsvMonitor::file_of(dir, name)) == fmt::format("step,{}\n", name));
  }
  CHECK_FALSE(fs::exists(CsvMonitor::file_of(dir, "train_loss")));
  CHECK_FALSE(fs::exists(CsvMonitor::file_of(dir, "loss_scale")));

  // Step 1: two micro-batch losses; step 2: none reported; step 3: one, fp16.
  m.add_loss(2.5);
  m.add_loss(1.25);
  m.write({.samples = 24, .step_samples = 24, .lr = 1e-3, .grad_norm = 0.1, .loss_scale = {}, .skipped_steps = 0});
  m.write({.samples = 48, .step_samples = 24, .lr = 7.5e-4, .grad_norm = 1.0 / 3.0, .loss_scale = {},
           .skipped_steps = 1});
  m.add_loss(0.3);
  m.write({.samples = 72, .step_samples = 24, .lr = 5e-4, .grad_norm = 2.0, .loss_scale = 65536.0,
           .skipped_steps = 1});
  CHECK(m.ok());
  CHECK(read_monitor_series(CsvMonitor::file_of(dir, "train_loss")) == Rows{{24, 1.875}, {72, 0.3}});
  CHECK(read_monitor_series(CsvMonitor::file_of(dir, "lr")) == Rows{{24, 1e-3}, {48, 7.5e-4}, {72, 5e-4}});
  CHECK(read_monitor_series(CsvMonitor::file_of(dir, "grad_norm")) == Rows{{24, 0.1}, {48, 1.0 / 3.0}, {72, 2.0}});
  CHECK(read_monitor_series(CsvMonitor::file_of(dir, "skipped_steps")) == Rows{{24, 0}, {48, 1}, {72, 1}});
  CHECK(read_monitor_series(CsvMonitor::file_of(dir, "loss_scale")) == Rows{{72, 65536.0}});
  CHECK(text_of(CsvMonitor::file_of(dir, "train_loss")) == "step,train_loss\n24,1.875\n72,0.3\n");
  // Step time and rate: positive, and rate x time = the step's samples.
  const Rows ms = read_monitor_series(CsvMonitor::file_of(dir, "step_time_ms"));
  const Rows rate = read_monitor_series(CsvMonitor::file_of(dir, "samples_per_second"));
  REQUIRE(ms.size() == 3);
  REQUIRE(rate.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(ms[i].first == rate[i].first);
    CHECK(ms[i].second > 0);
    CHECK(rate[i].second * ms[i].second / 1e3 == doctest::Approx(24.0).epsilon(1e-9));
  }

  // A second monitor on the same folder (a resumed run) appends, without a second header.
  CsvMonitor again(cfg);
  again.write({.samples = 96, .step_samples = 24, .lr = 2.5e-4, .grad_norm = 0.5, .loss_scale = {},
               .skipped_steps = 1});
  CHECK(text_of(CsvMonitor::file_of(dir, "lr")) == "step,lr\n24,0.001\n48,0.00075\n72,0.0005\n96,0.00025\n");
}

TEST_CASE("csv monitor: the ds_config keys") {
  const EngineConfig c = EngineConfig::from_json(
      nlohmann::json::parse(R"({"csv_monitor": {"enabled": true, "output_path": "runs/", "job_name": "bert"}})"));
  CHECK(c.observe.csv_monitor.enabled);
  CHECK(c.observe.csv_monitor.directory() == "runs/bert");
  CHECK(c.warnings.empty());
  // DeepSpeed's defaults: the working directory, "DeepSpeedJobName".
  const EngineConfig d = EngineConfig::from_json(nlohmann::json::parse(R"({"csv_monitor": {"enabled": true}})"));
  CHECK(d.observe.csv_monitor.directory() == "DeepSpeedJobName");
  CHECK_FALSE(EngineConfig::from_json(nlohmann::json::parse("{}")).observe.csv_monitor.enabled);
  for (const char* bad : {R"({"csv_monitor": {"job_name": ""}})", R"({"csv_monitor": {"job_name": "a/b"}})"}) {
    CHECK_THROWS_WITH_AS(EngineConfig::from_json(nlohmann::json::parse(bad)),
                         doctest::Contains("\"csv_monitor.job_name\" = \""), ConfigError);
  }
  CHECK_THROWS_WITH_AS(
      EngineConfig::from_json(nlohmann::json::parse(R"({"csv_monitor": {"enabled": true, "job_nme": "x"}})")),
      doctest::Contains("unknown or unsupported configuration key \"csv_monitor.job_nme\"; did you mean "
                        "\"csv_monitor.job_name\"?"),
      ConfigError);
}

TEST_CASE("csv monitor: a folder it cannot make, a file it cannot write, a malformed file read back") {
  const fs::path root = scratch("errors");
  {
    std::ofstream(root / "blocker") << "a file where the folder would go";
  }
  CsvMonitorConfig cfg;
  cfg.output_path = (root / "blocker").string();
  cfg.job_name = "job";
  const std::string blocked = (root / "blocker" / "job").string() + ": cannot create the csv_monitor folder";
  CHECK_THROWS_WITH_AS(CsvMonitor{cfg}, doctest::Contains(blocked.c_str()), IoError);
  // train_loss's file is a link to /dev/full: its first write fails; the
  // monitor stops without throwing, and writes nothing more.
  cfg.output_path = root.string();
  fs::create_directories(root / "job");
  const std::string loss_file = CsvMonitor::file_of((root / "job").string(), "train_loss");
  fs::create_symlink("/dev/full", loss_file);
  CsvMonitor m(cfg);
  m.add_loss(1.0);
  CHECK_NOTHROW(m.write({.samples = 8, .step_samples = 8, .lr = 0.1, .grad_norm = 1, .loss_scale = {},
                         .skipped_steps = 0}));
  CHECK_FALSE(m.ok());
  CHECK_NOTHROW(m.write({.samples = 16, .step_samples = 8, .lr = 0.1, .grad_norm = 1, .loss_scale = {},
                         .skipped_steps = 0}));
  CHECK(text_of(CsvMonitor::file_of((root / "job").string(), "lr")) == "step,lr\n");
  // Reading back: missing file, bad header, bad row, each named.
  CHECK_THROWS_AS(read_monitor_series((root / "none.csv").string()), IoError);
  std::ofstream(root / "bad_header.csv") << "samples,lr\n1,2\n";
  CHECK_THROWS_WITH_AS(read_monitor_series((root / "bad_header.csv").string()),
                       doctest::Contains("bad_header.csv:1: \"samples,lr\" is not a monitor header"), Error);
  std::ofstream(root / "bad_row.csv") << "step,lr\n1,0.5\n2;0.25\n";
  CHECK_THROWS_WITH_AS(read_monitor_series((root / "bad_row.csv").string()),
                       doctest::Contains("bad_row.csv:3: \"2;0.25\" is not a row"), Error);
  std::ofstream(root / "nan.csv") << "step,grad_norm\n1,nan\n2,inf\n";
  const Rows special = read_monitor_series((root / "nan.csv").string());
  REQUIRE(special.size() == 2);
  CHECK(std::isnan(special[0].second));
  CHECK(std::isinf(special[1].second));
}
