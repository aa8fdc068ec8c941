// Errors that one rank sees are agreed across ranks ([Note: agreeing on
// errors], [Note: storage phases], [Note: model fingerprint]): ranks built
// with different models or configurations throw the same AgreedConfigError
// at finalize() naming the first difference and its ranks; an I/O error on
// one rank in set_parameter (parameters on nvme), in load_checkpoint's
// commit or in step()'s offload phases throws the same AgreedIoError on
// every rank and leaves an engine that refuses to train until a load
// succeeds; a failed save leaves no
// .tmp-* directory and a stale one is swept by the next save; an error
// agreed twice (sub-group, then world) names its rank once.
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include <doctest/doctest.h>

#include "offload/io/fault_injection.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "runtime/sharding/swap_sharing.h"
#include "tests/support/ckpt_model.h"
#include "tests/support/scratch_files.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// What finalize() throws on this rank ("" if nothing); the engine is built
// by `declare` (add_unit / add_parameter) with config `c`.
template <class Declare>
std::string finalize_error(const EngineConfig& c, Declare declare, bool& agreed) {
  Engine e(c, world());
  declare(e);
  agreed = false;
  try {
    e.finalize();
  } catch (const ConfigError& err) {
    agreed = is_agreed(err);
    return err.what();
  }
  return "";
}

void two_units(Engine& e) {
  const UnitId a = e.add_unit("a"), b = e.add_unit("b");
  e.add_parameter(a, "a.weight", {7, 5});
  e.add_parameter(b, "b.weight", {57});
}

fs::path test_dir(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("zs-test-agreed-{}-{}", name, world().world_size());
}

OffloadConfig nvme_everything() {
  OffloadConfig o;
  o.optimizer.device = OffloadDevice::nvme;
  o.optimizer.nvme_path = test_dir("swap").string();
  o.param.device = OffloadDevice::nvme;
  o.param.nvme_path = o.optimizer.nvme_path;
  o.param.max_in_cpu = 0;
  o.sub_group_size = 4096;
  return o;
}

#if ZS_TEST_HOOKS
// Stage 3 (make_config) with every tier on nvme (nvme_everything).
EngineConfig nvme_config() {
  EngineConfig c = make_config(3);
  c.offload = nvme_everything();
  return c;
}

// test_dir(name), emptied by rank 0 before every rank goes on.
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = test_dir(name);
  remove_dir_on_rank0(world(), dir);
  return dir;
}

// What an IoError thrown by a call says, and whether it is agreed (is_agreed).
struct CaughtIoError {
  std::string msg;  ///< what(); "" when nothing was thrown
  bool agreed = false;
};

// Runs `call`, catching an IoError (anything else propagates).
template <class Call>
CaughtIoError catch_io_error(Call call) {
  CaughtIoError c;
  try {
    call();
  } catch (const IoError& err) {
    c.msg = err.what();
    c.agreed = is_agreed(err);
  }
  return c;
}

// Runs `call` with `fault` injected on the last rank only, catching an
// IoError; the fault is cleared afterwards on every rank.
template <class Call>
CaughtIoError io_error_with_fault_on_last_rank(IoFault fault, Call call) {
  if (world().rank() == world().world_size() - 1) inject_io_fault(fault);
  const CaughtIoError c = catch_io_error(call);
  clear_io_fault();
  return c;
}

#endif

}  // namespace

TEST_CASE("an error agreed on a sub-communicator, then on the world, names its rank once") {
  Communicator& w = world();
  const int n = w.world_size(), last = n - 1;
  auto half = w.split(w.rank() % 2, w.rank());  // world ranks of one parity
  // The last world rank fails; its half agrees first (rank R of that half),
  // then the world: the message names a rank once, never "rank 0: rank 0:".
  std::string what;
  try {
    run_agreed(w, [&] {
      // Every rank calls the inner collective (over its own half), so the
      // outer f calls the same collectives on every rank.
      run_agreed(*half, [&] {
        if (w.rank() == last) throw IoError("disk full");
      });
    });
  } catch (const IoError& e) {
    what = e.what();
    const auto* agreed = dynamic_cast<const AgreedError*>(&e);
    REQUIRE(agreed != nullptr);
    CHECK(agreed->names_rank() == (n > 1));
  }
  const int half_size = (n - last % 2 + 1) / 2;  // ranks of the last rank's parity
  if (n == 1) {
    CHECK(what == "disk full");
  } else if (half_size == 1) {
    CHECK(what == fmt::format("rank {}: disk full", last));  // the half had one rank: the world names it
  } else {
    CHECK(what == fmt::format("rank {}: disk full", last / 2));  // its rank in the half
  }
}

TEST_CASE("the same model and configuration on every rank: finalize() passes") {
  bool agreed = false;
  CHECK(finalize_error(make_config(3), two_units, agreed) == "");
}

TEST_CASE("ranks with different models or configurations are named at finalize(), the same on every rank") {
  const int n = world().world_size(), r = world().rank(), last = n - 1;
  if (n < 2) return;
  bool agreed = false;
  SUBCASE("another stage on the last rank") {
    const std::string msg = finalize_error(make_config(r == last ? 2 : 3), two_units, agreed);
    CHECK(agreed);
    CHECK(msg.find(fmt::format("zero_optimization.stage: 3 on {}; 2 on rank {}",
                               n == 2 ? "rank 0" : n == 3 ? "ranks 0, 1" : "ranks 0, 1, 2", last)) !=
          std::string::npos);
  }
  SUBCASE("an extra unit on the last rank") {
    const std::string msg = finalize_error(make_config(3), [&](Engine& e) {
      two_units(e);
      if (r == last) e.add_parameter(e.add_unit("extra"), "extra.weight", {64, 64});
    }, agreed);
    CHECK(agreed);
    CHECK(msg.find("units (add_unit calls): 2 on rank") != std::string::npos);
    CHECK(msg.find(fmt::format("3 on rank {}", last)) != std::string::npos);
  }
  SUBCASE("another shape in unit b on rank 1: the unit is described as each side has it") {
    const std::string msg = finalize_error(make_config(1), [&](Engine& e) {
      const UnitId a = e.add_unit("a"), b = e.add_unit("b");
      e.add_parameter(a, "a.weight", {7, 5});
      e.add_parameter(b, "b.weight", {r == 1 ? 64 : 57});
    }, agreed);
    CHECK(agreed);
    CHECK(msg.find("unit 1: \"b\" (57 elements: b.weight [57]) on rank") != std::string::npos);
    CHECK(msg.find("\"b\" (64 elements: b.weight [64]) on rank 1") != std::string::npos);
  }
  SUBCASE("another reduce bucket size on rank 0") {
    EngineConfig c = make_config(2);
    if (r == 0) c.zero.reduce_bucket_size = 1024;
    const std::string msg = finalize_error(c, two_units, agreed);
    CHECK(agreed);
    CHECK(msg.find("zero_optimization.reduce_bucket_size: 1024 on rank 0; 500000000 on rank") != std::string::npos);
  }
  world().barrier();
}

TEST_CASE("count_swap_sharers: the ranks writing swap files to one file system are counted together") {
  const int n = world().world_size(), r = world().rank();
  OffloadConfig o = nvme_everything();
  SwapSharers got = count_swap_sharers(world(), o);
  CHECK(got.optimizer == n);
  CHECK(got.param == n);
  // Rank 0's parameters on another file system (tmpfs) when there is one.
  if (fs::is_directory("/dev/shm") && file_system_key("/dev/shm") != file_system_key(o.param.nvme_path)) {
    if (r == 0) o.param.nvme_path = "/dev/shm/zs-test-agreed-swap";
    got = count_swap_sharers(world(), o);
    CHECK(got.optimizer == n);
    CHECK(got.param == (r == 0 ? 1 : n - 1));
  }
  CHECK(count_swap_sharers(world(), OffloadConfig{}).optimizer == 1);
}

#if ZS_TEST_HOOKS
TEST_CASE("an I/O error on one rank in set_parameter (parameters on nvme) is thrown on every rank") {
  const int last = world().world_size() - 1;
  const EngineConfig c = nvme_config();
  Engine e(c, world());
  const UnitId u = e.add_unit("u");
  const ParamId p = e.add_parameter(u, "u.weight", {10001});
  e.finalize();
  const std::vector<float> v(10001, 0.25f);
  const auto [msg, agreed] =
      io_error_with_fault_on_last_rank(IoFault{.op = IoOp::write, .nth = 1, .err = EIO}, [&] { e.set_parameter(p, v); });
  CHECK(agreed);
  CHECK(msg.find("Input/output error") != std::string::npos);
  if (world().world_size() > 1) CHECK(msg.find(fmt::format("rank {}:", last)) != std::string::npos);
  // The state is partly written: training is refused on every rank.
  CHECK_THROWS_WITH_AS(e.unshard(u), doctest::Contains("the engine is unusable: set_parameter(\"u.weight\") failed"),
                       Error);
  world().barrier();
}

TEST_CASE("an I/O error on one rank in load_checkpoint's commit: agreed, the engine refuses to train, a reload "
          "restores it") {
  const fs::path dir = fresh_dir("load");
  const EngineConfig c = nvme_config();
  std::vector<float> saved;
  {
    Engine e(c, world());
    CkptModel m(e);
    m.train_step(e, 1);
    m.train_step(e, 2);
    e.save_checkpoint(dir.string(), {{"x", 1}});
    saved = m.state(e);
  }
  Engine e(c, world());
  CkptModel m(e);
  m.train_step(e, 1);
  const auto [msg, agreed] = io_error_with_fault_on_last_rank(IoFault{.op = IoOp::write, .nth = 2, .err = EIO},
                                                              [&] { e.load_checkpoint(dir.string()); });
  CHECK(agreed);
  CHECK(msg.find("Input/output error") != std::string::npos);
  CHECK_THROWS_WITH_AS(m.train_step(e, 3), doctest::Contains("step(): the engine is unusable: load_checkpoint"),
                       Error);
  CHECK_THROWS_WITH_AS(e.save_checkpoint(dir.string(), {}), doctest::Contains("the engine is unusable"), Error);
  // A load that succeeds replaces everything: the saved state, bit for bit.
  CHECK(e.load_checkpoint(dir.string()).at("x") == 1);
  CHECK(m.state(e) == saved);
  CHECK(e.optimizer_steps() == 2);
  m.train_step(e, 3);
  world().barrier();
}

TEST_CASE("an I/O error on one rank in step()'s offload phases: agreed, the engine refuses to train or save, a "
          "reload restores it") {
  const fs::path dir = fresh_dir("step");
  const EngineConfig c = nvme_config();
  std::vector<float> after_two;  // two steps without a fault
  {
    Engine ref(c, world());
    CkptModel m(ref);
    m.train_step(ref, 1);
    m.train_step(ref, 2);
    after_two = m.state(ref);
  }
  Engine e(c, world());
  CkptModel m(e);
  m.train_step(e, 1);
  e.save_checkpoint(dir.string(), {{"x", 1}});
  const std::vector<float> saved = m.state(e);
  // nth = 1 and nth = 3: the first swap write of the step (gradient
  // reductions or the update), or one in the middle of the update.
  for (const std::uint64_t nth : {1u, 3u}) {
    CAPTURE(nth);
    const auto [msg, agreed] = io_error_with_fault_on_last_rank(IoFault{.op = IoOp::write, .nth = nth, .err = EIO},
                                                                [&] { m.train_step(e, 2); });
    CHECK(agreed);
    CHECK(msg.find("Input/output error") != std::string::npos);
    // Some rank's shards are half updated: no later step or save may use them.
    CHECK_THROWS_WITH_AS(m.train_step(e, 3), doctest::Contains("step(): the engine is unusable: step() failed"),
                         Error);
    CHECK_THROWS_WITH_AS(e.save_checkpoint(dir.string(), {}), doctest::Contains("the engine is unusable: step()"),
                         Error);
    CHECK(e.load_checkpoint(dir.string()).at("x") == 1);
    CHECK(m.state(e) == saved);
    CHECK(e.optimizer_steps() == 1);
  }
  m.train_step(e, 2);
  CHECK(e.optimizer_steps() == 2);
  CHECK(m.state(e) == after_two);
  world().barrier();
}

TEST_CASE("a failed save is agreed and removes its .tmp directory; a stale one is swept by the next save") {
  const int last = world().world_size() - 1;
  const fs::path dir = fresh_dir("save");
  Engine e(make_config(2), world());
  CkptModel m(e);
  m.train_step(e, 1);
  e.save_checkpoint(dir.string(), {});
  m.train_step(e, 2);
  setenv("ZS_CHECKPOINT_FAIL_RANK", std::to_string(last).c_str(), 1);
  const auto [msg, agreed] = catch_io_error([&] { e.save_checkpoint(dir.string(), {}); });
  unsetenv("ZS_CHECKPOINT_FAIL_RANK");
  CHECK(agreed);
  CHECK(msg.find("injected failure") != std::string::npos);
  world().barrier();
  CHECK_FALSE(fs::exists(dir / ".tmp-step-00000002"));
  CHECK(fs::exists(dir / "step-00000001" / "manifest.json"));
  world().barrier();
  // Leftovers of a killed save: swept (a stale .old-<tag> of an existing tag too).
  if (world().rank() == 0) {
    fs::create_directories(dir / ".tmp-step-00000077" / "junk");
    fs::create_directories(dir / ".old-step-00000001");
  }
  world().barrier();
  e.save_checkpoint(dir.string(), {});
  world().barrier();
  CHECK_FALSE(fs::exists(dir / ".tmp-step-00000077"));
  CHECK_FALSE(fs::exists(dir / ".old-step-00000001"));
  CHECK(fs::exists(dir / "step-00000002" / "manifest.json"));
  // Re-saving an existing tag replaces it in place (RENAME_EXCHANGE) and leaves nothing behind.
  e.save_checkpoint(dir.string(), {{"again", true}}, 0, "step-00000002");
  world().barrier();
  CHECK_FALSE(fs::exists(dir / ".tmp-step-00000002"));
  CHECK_FALSE(fs::exists(dir / ".old-step-00000002"));
  Engine f(make_config(1), world());
  CkptModel mf(f);
  CHECK(f.load_checkpoint(dir.string()).at("again") == true);
  world().barrier();
}
#endif
