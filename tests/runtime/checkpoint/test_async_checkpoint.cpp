// Engine::save_checkpoint_async ([Note: async checkpoint]): the checkpoint
// holds the state of the step it was called at, bit for bit the files of a
// synchronous save of that step, although later steps run while it is
// written (stages 0-3, states fp32 / bf16 / 8-bit, offload none / cpu /
// nvme); errors of the background write (ENOSPC, EIO, a failing rank) are
// the same AgreedIoError on every rank, naming the file, with the training
// state intact and the previous checkpoint still the latest; a second save
// waits or is refused; a save after an overflow-skipped step; a load right
// after a save; the staging area in the ledger and under
// checkpoint.staging_memory; the writer at SCHED_IDLE; keep_last's pruning
// in the background; a non-finite value deep in a large shard.
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>

#include "comm/collective_error.h"
#include "core/durable_file.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/save_folder.h"
#include "runtime/engine/engine.h"
#include "tests/support/ckpt_model.h"
#include "tests/support/scratch_files.h"
#include "tests/support/state_format_model.h"
#include "tests/support/test_world.h"
#include "zs_config.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = fmt::format("ckpt-async-{}-np{}", name, world().world_size());
  make_empty_dir_on_rank0(world(), dir);
  return dir;
}

fs::path swap_root() {
  return fs::temp_directory_path() / fmt::format("zs-test-async-ckpt-np{}", world().world_size());
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

enum class States { fp32, bf16, q8 };

EngineConfig config_for(int stage, States states, DType dtype, OffloadDevice tier) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.05f;
  if (states == States::bf16) h.states.dtype = StateDtype::bf16;
  if (states == States::q8) {
    h.states.dtype = StateDtype::q8;
    h.states.block_size = 64;
    h.states.min_8bit_size = 0;
  }
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dtype;
  c.offload = state_offload(tier, swap_root(), 256);
  if (tier != OffloadDevice::none && stage == 3) {
    c.offload.param.device = tier;
    if (tier == OffloadDevice::nvme) {
      c.offload.param.nvme_path = swap_root().string();
      c.offload.param.max_in_cpu = 0;
    }
  }
  return c;
}

// Sets a test hook's variable for the scope (hooks exist with -Dtest_hooks).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

// The files of checkpoint <dir>/<tag> that this rank can compare: its rank
// file, and the manifest.
void check_same_checkpoint(const std::string& a, const std::string& b) {
  const std::string file = rank_file_name(world().rank());
  CHECK(slurp(a + "/" + file) == slurp(b + "/" + file));
  CHECK(slurp(a + "/manifest.json") == slurp(b + "/manifest.json"));
}

// The threads of this process with scheduling policy SCHED_IDLE, polled
// for up to a second until there are `expect` (a thread sets its own
// policy once it runs).
int idle_policy_threads(int expect) {
  int n = 0;
  for (int tries = 0; tries < 100; ++tries) {
    n = 0;
    for (const auto& task : fs::directory_iterator("/proc/self/task")) {
      const int policy = sched_getscheduler(std::stoi(task.path().filename().string()));
      if (policy == SCHED_IDLE) ++n;
    }
    if (n == expect) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return n;
}

}  // namespace

TEST_CASE("an async save holds its step's state bit for bit while later steps run during the write") {
#if ZS_TEST_HOOKS
  const ScopedEnv slow("ZS_CHECKPOINT_WRITE_DELAY_MS", "150");  // the write outlasts the next steps
#endif
  for (int stage = 0; stage <= 3; ++stage) {
    for (OffloadDevice tier : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
      if (tier != OffloadDevice::none && stage == 0) continue;  // offload needs a shard (stage >= 1)
      for (States states : {States::fp32, States::bf16, States::q8}) {
        const DType dtype = states == States::fp32 && tier == OffloadDevice::none ? DType::f32 : DType::bf16;
        CAPTURE(stage);
        CAPTURE(static_cast<int>(tier));
        CAPTURE(static_cast<int>(states));
        const std::string dir = fresh_dir(fmt::format("same-{}-{}-{}", stage, static_cast<int>(tier),
                                                      static_cast<int>(states)));
        Engine e(config_for(stage, states, dtype, tier), world());
        CkptModel m(e);
        for (int s = 1; s <= 2; ++s) m.train_step(e, s);
        e.save_checkpoint(dir + "/sync", {{"at", 2}}, 0, "t");
        const std::vector<float> saved = m.state(e);
        CheckpointHandle h = e.save_checkpoint_async(dir + "/async", {{"at", 2}}, 0, "t");
        CHECK(h.tag() == "t");
        CHECK(e.checkpoint_in_flight());
        CHECK_FALSE(h.done());  // committed at a later call, never inside this one
#if ZS_TEST_HOOKS
        CHECK(idle_policy_threads(1) == 1);  // the writer, below the training threads (run_below_training)
#endif
        for (int s = 3; s <= 5; ++s) m.train_step(e, s);
        CHECK(m.state(e) != saved);  // the steps did change the state
        h.wait();
        CHECK(h.done());
        CHECK_FALSE(e.checkpoint_in_flight());
        CHECK(idle_policy_threads(0) == 0);
        world().barrier();
        check_same_checkpoint(dir + "/sync/t", dir + "/async/t");
        CHECK(read_latest_tag(dir + "/async") == "t");
        // And it loads: a new engine resumes at step 2's state.
        Engine f(config_for(stage, states, dtype, tier), world());
        CkptModel mf(f);
        CHECK(f.load_checkpoint(dir + "/async").at("at") == 2);
        CHECK(mf.state(f) == saved);
      }
    }
  }
}

TEST_CASE("a boundary step commits a finished async save; keep_last prunes then") {
  const std::string dir = fresh_dir("commit-at-step");
  Engine e(config_for(2, States::fp32, DType::f32, OffloadDevice::none), world());
  CkptModel m(e);
  m.train_step(e, 1);
  e.save_checkpoint(dir, {}, 2);
  m.train_step(e, 2);
  CheckpointHandle h = e.save_checkpoint_async(dir, {}, 2);
  CHECK(h.tag() == "step-00000002");
  m.train_step(e, 3);
  CheckpointHandle h2 = e.save_checkpoint_async(dir, {}, 2);  // waits for the first ("wait" is the default)
  CHECK(h.done());
  // Steps commit h2 once every rank's writer is done (its fsyncs may take
  // longer than many steps of this model): step, slowly, until it is.
  for (int s = 4; s <= 3000 && !h2.done(); ++s) {
    m.train_step(e, s);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(h2.done());
  CHECK_FALSE(e.checkpoint_in_flight());
  world().barrier();
  CHECK(read_latest_tag(dir) == "step-00000003");
  CHECK_FALSE(fs::exists(dir + "/step-00000001"));  // keep_last 2: renamed at the commit
  CHECK(fs::exists(dir + "/step-00000002"));
  e.wait_for_checkpoints();  // nothing in flight: joins rank 0's removal of what keep_last pruned
  world().barrier();
  CHECK_FALSE(fs::exists(dir + "/.pruned-step-00000001"));
  // A .pruned-* folder that a kill left is swept by the next save.
  if (world().rank() == 0) {
    fs::create_directories(dir + "/.pruned-step-00000000");
    std::ofstream(dir + "/.pruned-step-00000000/rank-00000.bin") << "partly removed";
  }
  world().barrier();
  e.save_checkpoint_async(dir, {}, 2).wait();
  world().barrier();
  CHECK_FALSE(fs::exists(dir + "/.pruned-step-00000000"));
  CHECK_FALSE(fs::exists(dir + "/.pruned-step-00000002"));
  CHECK(fs::exists(dir + "/step-00000003"));
}

TEST_CASE("a non-finite master weight past the first pieces of a large shard: the snapshot refused, naming it") {
  // The snapshot checks each array piece by piece as it copies it
  // (check_and_sink, 65536 elements a piece; all_finite, blocks of 4096):
  // an Inf in the last rank's shard at element 65536 + 4099 of it, an odd
  // parameter of 300001 elements.
  const std::string dir = fresh_dir("large-inf");
  Engine e(config_for(3, States::fp32, DType::f32, OffloadDevice::none), world());
  const UnitId u = e.add_unit("big");
  const ParamId p = e.add_parameter(u, "big.weight", {300001});
  e.finalize();
  const std::size_t shard = e.layout().unit(u).shard;
  const std::size_t bad = static_cast<std::size_t>(world().world_size() - 1) * shard + 65536 + 4099;
  REQUIRE(bad < 300001);
  std::vector<float> v(300001, 0.25f);
  v[bad] = std::numeric_limits<float>::infinity();
  e.set_parameter(p, v);
  for (bool async : {true, false}) {
    CAPTURE(async);
    std::string what;
    try {
      if (async) {
        e.save_checkpoint_async(dir, {}, 0, "bad").wait();
      } else {
        e.save_checkpoint(dir, {}, 0, "bad");
      }
    } catch (const std::exception& err) {
      what = is_agreed(err) ? err.what() : "not agreed";
    }
    CHECK(what.find(fmt::format("master holds inf at parameter \"big.weight\" (unit \"big\"), element {} of the "
                                "parameter",
                                bad)) != std::string::npos);
    CHECK(what.find("nothing was saved") != std::string::npos);
    CHECK_FALSE(e.checkpoint_in_flight());
    world().barrier();
    CHECK_FALSE(fs::exists(dir + "/bad"));
    CHECK_FALSE(fs::exists(dir + "/.tmp-bad"));
    world().barrier();  // before the next save makes .tmp-bad again
  }
}

TEST_CASE("the step breakdown charges saves to \"checkpoint\": the whole sync save, the async snapshot") {
  const std::string dir = fresh_dir("breakdown");
  EngineConfig c = config_for(3, States::fp32, DType::f32, OffloadDevice::none);
  c.observe.wall_clock_breakdown = true;
  c.steps_per_print = 1000;  // no breakdown lines
  Engine e(c, world());
  CkptModel m(e);
  m.train_step(e, 1);
  m.train_step(e, 2);
  CHECK(e.last_step_figures().checkpoint == 0.0);
  e.save_checkpoint(dir, {});
  m.train_step(e, 3);  // its figures hold the time since the last step: the save
  const StepFigures sync = e.last_step_figures();
  CHECK(sync.checkpoint > 0.0);
  CHECK(sync.checkpoint <= sync.wall);
  CheckpointHandle h = e.save_checkpoint_async(dir, {});
  m.train_step(e, 4);
  CHECK(e.last_step_figures().checkpoint > 0.0);  // the snapshot (and the commit, if it ran in this step)
  h.wait();
  m.train_step(e, 5);
  m.train_step(e, 6);
  CHECK(e.last_step_figures().checkpoint == 0.0);
}

TEST_CASE("a second async save is refused with async_in_flight \"refuse\"; a load waits for the save") {
  const std::string dir = fresh_dir("refuse");
  EngineConfig c = config_for(3, States::fp32, DType::f32, OffloadDevice::none);
  c.checkpoint.in_flight = AsyncInFlight::refuse;
#if ZS_TEST_HOOKS
  const ScopedEnv slow("ZS_CHECKPOINT_WRITE_DELAY_MS", "200");
#endif
  Engine e(c, world());
  CkptModel m(e);
  m.train_step(e, 1);
  const std::vector<float> saved = m.state(e);
  CheckpointHandle h = e.save_checkpoint_async(dir, {{"k", 1}});
#if ZS_TEST_HOOKS
  try {
    e.save_checkpoint_async(dir, {});
    FAIL("a second save in flight was not refused");
  } catch (const Error& err) {
    const std::string what = err.what();
    CHECK(what.find("step-00000001 is still in flight") != std::string::npos);
    CHECK(what.find("async_in_flight") != std::string::npos);
  }
#endif
  m.train_step(e, 2);
  // A load right after: it commits the save in flight first, then loads it.
  CHECK(e.load_checkpoint(dir).at("k") == 1);
  CHECK(h.done());
  CHECK(m.state(e) == saved);
}

TEST_CASE("an async save after an overflow-skipped step saves the skip and the loss scale") {
  const std::string dir = fresh_dir("overflow");
  EngineConfig c = config_for(2, States::fp32, DType::f16, OffloadDevice::none);
  c.loss_scale = LossScaleConfig{.dynamic = true, .initial_scale_power = 8, .loss_scale_window = 3, .hysteresis = 1,
                                 .min_loss_scale = 1};
  Engine e(c, world());
  CkptModel m(e);
  m.train_step(e, 1);
  // An Inf gradient on the last rank: every rank skips the step.
  const ParamId p = m.params[1];
  if (world().rank() == world().world_size() - 1) e.grad_as<f16>(p)[0] = from_float<f16>(65504.0f * 2);
  const StepResult r = e.step();
  CHECK(r.skipped);
  const double scale = e.loss_scale();
  const std::vector<float> saved = m.state(e);
  CheckpointHandle h = e.save_checkpoint_async(dir, {});
  m.train_step(e, 3);
  h.wait();
  Engine f(c, world());
  CkptModel mf(f);
  f.load_checkpoint(dir);
  CHECK(f.skipped_steps() == 1);
  CHECK(f.loss_scale() == scale);
  CHECK(f.optimizer_steps() == e.optimizer_steps() - 1);
  CHECK(mf.state(f) == saved);
}

TEST_CASE("the staging area: in the ledger with checkpoint.async, refused over checkpoint.staging_memory") {
  const std::string dir = fresh_dir("staging");
  EngineConfig c = config_for(1, States::fp32, DType::f32, OffloadDevice::none);
  c.checkpoint.async = true;
  {
    Engine e(c, world());
    CkptModel m(e);
    // The rank file: per unit the fp32 master window and two fp32 state windows.
    std::uint64_t file = 0;
    for (const UnitInfo& u : e.layout().units()) file += 3 * u.shard * sizeof(float);
    const std::uint64_t staged = e.ledger().current(MemCategory::checkpoint_staging);
    CHECK(staged >= file);
    CHECK(staged < file + 4096);  // the host pool's 4 KiB blocks
    m.train_step(e, 1);
    e.save_checkpoint_async(dir, {}).wait();
    CHECK(e.ledger().current(MemCategory::checkpoint_staging) == staged);  // reused
  }
  c.checkpoint.staging_memory = 16;
  Engine e(c, world());
  CkptModel m(e);
  CHECK(e.ledger().current(MemCategory::checkpoint_staging) == 0);
  m.train_step(e, 1);
  try {
    e.save_checkpoint_async(dir, {});
    FAIL("a snapshot over staging_memory was not refused");
  } catch (const ConfigError& err) {
    CHECK(is_agreed(err));
    const std::string what = err.what();
    CHECK(what.find("checkpoint.staging_memory = 16") != std::string::npos);
  }
  CHECK_FALSE(e.checkpoint_in_flight());
  world().barrier();
  CHECK(read_latest_tag(dir) == "step-00000001");  // the first engine's save
}

#if ZS_TEST_HOOKS
TEST_CASE("ENOSPC, EIO and one failing rank in the background write: agreed at the next step, naming the file") {
  struct Failure {
    const char* hook;
    std::string value;
    const char* expect;
  };
  const int last = world().world_size() - 1;
  for (const Failure& f : {Failure{"ZS_CHECKPOINT_WRITE_ERRNO", std::to_string(ENOSPC), "No space left on device"},
                           Failure{"ZS_CHECKPOINT_WRITE_ERRNO", std::to_string(EIO), "Input/output error"},
                           Failure{"ZS_CHECKPOINT_FAIL_RANK", std::to_string(last), "injected failure"}}) {
    CAPTURE(f.hook);
    CAPTURE(f.value);
    for (OffloadDevice tier : {OffloadDevice::none, OffloadDevice::nvme}) {
      CAPTURE(static_cast<int>(tier));
      const std::string dir = fresh_dir("errors");
      Engine e(config_for(3, States::fp32, DType::bf16, tier), world());
      CkptModel m(e);
      m.train_step(e, 1);
      e.save_checkpoint(dir, {});
      m.train_step(e, 2);
      std::string what;
      bool agreed = false;
      int steps_done = 0;
      std::optional<CheckpointHandle> h;
      {
        // Set until the writers have ended (they read it): the error comes
        // at the first boundary step after every writer ended.
        const ScopedEnv fail(f.hook, f.value);
        h = e.save_checkpoint_async(dir, {});
        for (int s = 3; s <= 3000 && what.empty(); ++s) {
          try {
            m.train_step(e, s);
            ++steps_done;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          } catch (const IoError& err) {
            what = err.what();
            agreed = is_agreed(err);
          }
        }
      }
      CHECK(agreed);
      CHECK(what.find(f.expect) != std::string::npos);
      CHECK(what.find(".tmp-step-00000002/rank-") != std::string::npos);
      CHECK(h->done());
      CHECK_THROWS_AS(h->wait(), IoError);
      CHECK_FALSE(e.checkpoint_in_flight());
      world().barrier();
      CHECK(read_latest_tag(dir) == "step-00000001");
      CHECK_FALSE(fs::exists(dir + "/.tmp-step-00000002"));
      CHECK_FALSE(fs::exists(dir + "/step-00000002"));
      // The state is intact: the failed call did not step, and training goes on.
      const std::int64_t steps = e.optimizer_steps();
      CHECK(steps == 2 + steps_done);
      m.train_step(e, 100);
      CHECK(e.optimizer_steps() == steps + 1);
      // The next save works.
      e.save_checkpoint_async(dir, {}).wait();
      world().barrier();
      CHECK(read_latest_tag(dir) == fmt::format("step-{:08d}", steps + 1));
    }
  }
}
#endif

namespace {

// Files under the checkpoint-snapshot/ folders of this rank's swap files
// (the hard links of a snapshot in flight).
int snapshot_links() {
  int n = 0;
  std::error_code ec;
  for (const auto& f : fs::recursive_directory_iterator(swap_root(), ec)) {
    if (f.path().parent_path().filename() == "checkpoint-snapshot") ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("nvme arrays snapshot as hard links of their swap files: no staging memory, the same bytes") {
  // Stage 3, bf16 compute: the parameters, the fp32 master weights and the
  // states all on nvme, so the whole rank file comes from hard links
  // (ArrayStore::link_range) and the staging area holds nothing; the
  // writer reads and checks them. ZS_CHECKPOINT_NO_HARD_LINKS stages them
  // in memory instead, as on a file system without hard links.
  EngineConfig c = config_for(3, States::fp32, DType::bf16, OffloadDevice::nvme);
  c.checkpoint.async = true;
  const std::string dir = fresh_dir("links");
  Engine e(c, world());
  CkptModel m(e);
  CHECK(e.ledger().current(MemCategory::checkpoint_staging) == 0);
  for (int s = 1; s <= 2; ++s) m.train_step(e, s);
  e.save_checkpoint(dir + "/sync", {}, 0, "t");
  {
#if ZS_TEST_HOOKS
    const ScopedEnv slow("ZS_CHECKPOINT_WRITE_DELAY_MS", "100");
#endif
    CheckpointHandle h = e.save_checkpoint_async(dir + "/linked", {}, 0, "t");
#if ZS_TEST_HOOKS
    // The files of this rank's non-empty nvme arrays, linked until the write ends.
    const bool has_shard = std::any_of(e.layout().units().begin(), e.layout().units().end(),
                                       [](const UnitInfo& u) { return u.shard > 0; });
    CHECK((snapshot_links() > 0) == has_shard);
#endif
    m.train_step(e, 3);  // rewrites every swap file: the links keep step 2's
    h.wait();
  }
  CHECK(e.ledger().current(MemCategory::checkpoint_staging) == 0);
  CHECK(snapshot_links() == 0);
  world().barrier();
  check_same_checkpoint(dir + "/sync/t", dir + "/linked/t");
#if ZS_TEST_HOOKS
  {
    // Without hard links the same bytes go through the staging area.
    Engine f(c, world());
    CkptModel mf(f);
    f.load_checkpoint(dir + "/sync");
    const ScopedEnv no_links("ZS_CHECKPOINT_NO_HARD_LINKS", "1");
    f.save_checkpoint_async(dir + "/copied", {}, 0, "t").wait();
    std::uint64_t file_bytes = 0;
    for (const UnitInfo& u : f.layout().units()) file_bytes += 3 * u.shard * sizeof(float);
    CHECK(f.ledger().current(MemCategory::checkpoint_staging) >= file_bytes);
    world().barrier();
    // The rank files (the manifests differ in the bf16 loss scaler's
    // clean_steps, which a load restores only for fp16).
    const std::string file = rank_file_name(world().rank());
    CHECK(slurp(dir + "/sync/t/" + file) == slurp(dir + "/copied/t/" + file));
  }
#endif
  // A NaN master weight on nvme: the snapshot did not read it, so the
  // writer refuses it and the commit agrees, naming it; nothing is saved.
  std::vector<float> bad(e.layout().param(m.params[3]).numel, 0.5f);
  bad[0] = std::numeric_limits<float>::quiet_NaN();
  e.set_parameter(m.params[3], bad);
  std::string what;
  try {
    e.save_checkpoint_async(dir + "/linked", {}, 0, "bad").wait();
  } catch (const std::exception& err) {
    what = is_agreed(err) ? err.what() : "not agreed";
  }
  CHECK(what.find("master holds nan at parameter \"b.extra\" (unit \"b\"), element 0 of the parameter") !=
        std::string::npos);
  CHECK(what.find("nothing was saved") != std::string::npos);
  CHECK(snapshot_links() == 0);
  world().barrier();
  CHECK_FALSE(fs::exists(dir + "/linked/bad"));
  CHECK_FALSE(fs::exists(dir + "/linked/.tmp-bad"));
  CHECK(read_latest_tag(dir + "/linked") == "t");
}
