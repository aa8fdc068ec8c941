// Checkpoints at this process group's world size: exact resume (fp32, bf16,
// fp16 with its loss scaler; AdamW, Lion, Adagrad), atomic layout, keep_last, and the errors for a
// flipped byte, a truncated or deleted shard, another model, another format
// version, and a save in the middle of gradient accumulation.
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "comm/collective_error.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/engine/engine.h"
#include "tests/support/ckpt_model.h"
#include "tests/support/scratch_files.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// A directory shared by the ranks of this run, emptied at the start.
std::string fresh_dir(const std::string& name) {
  const std::string dir = fmt::format("ckpt-{}-np{}", name, world().world_size());
  make_empty_dir_on_rank0(world(), dir);
  return dir;
}

EngineConfig config_for(DType dtype, int stage) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.05f;
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dtype;
  c.scheduler.kind = LrScheduleKind::warmup_decay_lr;
  c.scheduler.warmup_num_steps = 4;
  c.scheduler.total_num_steps = 20;
  c.scheduler.warmup_max_lr = {1e-2};
  c.loss_scale = LossScaleConfig{.dynamic = true, .initial_scale_power = 20, .loss_scale_window = 3,
                                 .hysteresis = 1, .min_loss_scale = 1};
  return c;
}

std::string load_error(Engine& e, const std::string& dir) {
  try {
    e.load_checkpoint(dir);
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

}  // namespace

TEST_CASE("12 steps straight == 6 steps, save, load in a new engine, 6 steps (bit for bit)") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(stage);
      const std::string dir = fresh_dir(fmt::format("resume-{}-{}", dtype_name(dtype), stage));
      const EngineConfig cfg = config_for(dtype, stage);
      Engine straight(cfg, world());
      CkptModel ms(straight);
      std::vector<double> scales;
      for (int s = 1; s <= 12; ++s) {
        ms.train_step(straight, s);
        scales.push_back(straight.loss_scale());
      }
      Engine first(cfg, world());
      CkptModel m1(first);
      for (int s = 1; s <= 6; ++s) m1.train_step(first, s);
      first.save_checkpoint(dir, {{"epoch", 3}, {"step_in_epoch", 6}});
      Engine second(cfg, world());
      CkptModel m2(second);
      const nlohmann::json client = second.load_checkpoint(dir);
      CHECK(client.at("epoch") == 3);
      CHECK(client.at("step_in_epoch") == 6);
      CHECK(second.optimizer_steps() == first.optimizer_steps());
      CHECK(second.loss_scale() == first.loss_scale());
      CHECK(second.current_lr(0) == first.current_lr(0));
      for (int s = 7; s <= 12; ++s) {
        m2.train_step(second, s);
        CHECK(second.loss_scale() == scales[static_cast<std::size_t>(s - 1)]);
      }
      CHECK(ms.state(straight) == m2.state(second));
      CHECK(straight.optimizer_steps() == second.optimizer_steps());
      CHECK(straight.skipped_steps() == second.skipped_steps());
      CHECK(straight.current_lr(0) == second.current_lr(0));
      CHECK(straight.current_lr(1) == second.current_lr(1));
      for (ParamId p : ms.params) CHECK(straight.gather_parameter(p) == second.gather_parameter(p));
    }
  }
}

TEST_CASE("Lion and Adagrad: resume bit for bit at every stage; manifest names their states; cross-load refused") {
  for (const OptimizerKind kind : {OptimizerKind::lion, OptimizerKind::adagrad}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (int stage = 0; stage <= 3; ++stage) {
        CAPTURE(optimizer_name(kind));
        CAPTURE(dtype_name(dtype));
        CAPTURE(stage);
        const std::string dir =
            fresh_dir(fmt::format("resume-{}-{}-{}", optimizer_name(kind), dtype_name(dtype), stage));
        EngineConfig cfg = config_for(dtype, stage);
        cfg.optimizer.kind = kind;
        cfg.optimizer.lr_decay = kind == OptimizerKind::adagrad ? 0.1 : 0.0;  // the step count matters
        Engine straight(cfg, world());
        CkptModel ms(straight);
        for (int s = 1; s <= 8; ++s) ms.train_step(straight, s);
        Engine first(cfg, world());
        CkptModel m1(first);
        for (int s = 1; s <= 4; ++s) m1.train_step(first, s);
        first.save_checkpoint(dir, {});
        world().barrier();
        const Manifest man = Manifest::read(dir + "/step-00000004");
        const std::vector<std::string> want_tensors = {"master", kind == OptimizerKind::lion ? "exp_avg" : "sum"};
        CHECK(man.tensors == want_tensors);
        CHECK(man.optimizer.at("type") == optimizer_name(kind));
        Engine second(cfg, world());
        CkptModel m2(second);
        second.load_checkpoint(dir);
        CHECK(m2.state(second) == m1.state(first));
        for (int s = 5; s <= 8; ++s) m2.train_step(second, s);
        CHECK(ms.state(straight) == m2.state(second));
        // The other one-state optimizer cannot read these states.
        EngineConfig other = cfg;
        other.optimizer.kind = kind == OptimizerKind::lion ? OptimizerKind::adagrad : OptimizerKind::lion;
        Engine wrong(other, world());
        CkptModel mw(wrong);
        const std::string err = load_error(wrong, dir);
        CHECK(err.find(fmt::format("holds tensors [master, {}] but this optimizer ({}) needs", want_tensors[1],
                                   optimizer_name(other.optimizer.kind))) != std::string::npos);
      }
    }
  }
}

TEST_CASE("layout: latest, manifest, rank files; keep_last removes older checkpoints after the new one") {
  const std::string dir = fresh_dir("layout");
  Engine e(config_for(DType::f32, 2), world());
  CkptModel m(e);
  for (int s = 1; s <= 3; ++s) {
    m.train_step(e, s);
    e.save_checkpoint(dir, {}, 2);
  }
  world().barrier();
  CHECK(fs::exists(dir + "/step-00000003/manifest.json"));
  CHECK(fs::exists(dir + "/step-00000002/manifest.json"));
  CHECK(!fs::exists(dir + "/step-00000001"));
  for (int q = 0; q < world().world_size(); ++q) CHECK(fs::exists(dir + "/step-00000003/" + rank_file_name(q)));
  const Manifest man = Manifest::read(dir + "/step-00000003");
  CHECK(man.world_size == world().world_size());
  CHECK(man.optimizer_steps == 3);
  CHECK(man.tensors == std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"});
  std::ifstream latest(dir + "/latest");
  std::string tag;
  latest >> tag;
  CHECK(tag == "step-00000003");
}

TEST_CASE("a save in the middle of gradient accumulation is refused") {
  const std::string dir = fresh_dir("midacc");
  EngineConfig cfg = config_for(DType::f32, 1);
  cfg.gradient_accumulation_steps = 2;
  Engine e(cfg, world());
  CkptModel m(e);
  m.train_step(e, 1);  // micro-batch 1 of 2
  CHECK_THROWS_WITH_AS(e.save_checkpoint(dir, {}), doctest::Contains("micro-batch 1 of 2"), Error);
}

TEST_CASE("corruption, truncation, deletion, another model, another version: clear errors, nothing loaded") {
  const std::string dir = fresh_dir("errors");
  const EngineConfig cfg = config_for(DType::f32, 3);
  Engine e(cfg, world());
  CkptModel m(e);
  m.train_step(e, 1);
  const std::string tag = e.save_checkpoint(dir, {});
  const std::string cdir = dir + "/" + tag;
  const std::string shard0 = cdir + "/" + rank_file_name(0);
  auto expect_error = [&](const std::string& needle) {
    Engine fresh(cfg, world());
    CkptModel fm(fresh);
    const std::vector<float> before = fm.state(fresh);
    const std::string err = load_error(fresh, dir);
    CHECK_MESSAGE(err.find(needle) != std::string::npos, "error \"" << err << "\" lacks \"" << needle << "\"");
    CHECK(fm.state(fresh) == before);  // nothing half-loaded
    CHECK(fresh.optimizer_steps() == 0);
  };
  auto on_rank0 = [&](auto&& f) {
    if (world().rank() == 0) f();
    world().barrier();
  };
  // Flipped byte: CRC mismatch naming the file (rank 0's shard is read by rank 0 at least).
  on_rank0([&] { flip_bits(shard0, 40, 0x40); });
  expect_error(rank_file_name(0));
  on_rank0([&] { flip_bits(shard0, 40, 0x40); });  // restore
  CHECK(load_error(e, dir).empty());
  // Truncated shard.
  on_rank0([&] {
    fs::copy_file(shard0, shard0 + ".bak");
    fs::resize_file(shard0, fs::file_size(shard0) - 7);
  });
  expect_error("truncated");
  // Deleted shard.
  on_rank0([&] { fs::remove(shard0); });
  expect_error(rank_file_name(0));
  on_rank0([&] { fs::rename(shard0 + ".bak", shard0); });
  CHECK(load_error(e, dir).empty());
  // Another model: a shape differs.
  {
    Engine other(cfg, world());
    const UnitId a = other.add_unit("a"), b = other.add_unit("b"), c = other.add_unit("c");
    other.add_parameter(a, "a.bias", {3});
    other.add_parameter(b, "b.weight", {7, 6});
    other.add_parameter(b, "b.bias", {11});
    other.add_parameter(b, "b.extra", {491});
    other.add_parameter(c, "c.weight", {461});
    other.finalize();
    const std::string err = load_error(other, dir);
    CHECK(err.find("different model") != std::string::npos);
    CHECK(err.find("\"b.weight\": checkpoint shape [7, 5], model shape [7, 6]") != std::string::npos);
  }
  // Unsupported format version.
  on_rank0([&] {
    auto j = nlohmann::json::parse(std::ifstream(cdir + "/manifest.json"));
    j["format_version"] = 99;
    std::ofstream(cdir + "/manifest.json") << j.dump();
  });
  expect_error("format version 99");
}

TEST_CASE("a re-save killed between the two renames of its fallback: load recovers the committed checkpoint") {
  // Without renameat2(RENAME_EXCHANGE), re-saving tag "run" renames run to
  // .old-run, then .tmp-run (the new, complete save) to run. A kill between
  // the two leaves exactly the folders made here; `latest` names "run".
  for (int stage : {0, 3}) {
    CAPTURE(stage);
    const std::string dir = fresh_dir(fmt::format("fallback{}", stage)),
                      newer = fresh_dir(fmt::format("fallback{}-newer", stage));
    const EngineConfig cfg = config_for(DType::f32, stage);
    Engine e(cfg, world());
    CkptModel m(e);
    for (int s = 1; s <= 2; ++s) m.train_step(e, s);
    e.save_checkpoint(dir, {{"committed", true}}, 0, "run");
    const std::vector<float> committed = m.state(e);
    for (int s = 3; s <= 4; ++s) m.train_step(e, s);
    e.save_checkpoint(newer, {{"committed", false}}, 0, "run");
    REQUIRE(m.state(e) != committed);
    auto leave_folders = [&] {
      if (world().rank() == 0) {
        fs::rename(dir + "/run", dir + "/.old-run");
        fs::rename(newer + "/run", dir + "/.tmp-run");
      }
      world().barrier();
    };
    auto check_loaded = [&](const std::string& tag) {
      Engine f(cfg, world());
      CkptModel mf(f);
      const nlohmann::json client_state = f.load_checkpoint(dir, tag);
      CHECK(client_state.at("committed") == true);
      CHECK(f.optimizer_steps() == 2);
      CHECK(mf.state(f) == committed);  // bit for bit
      world().barrier();
      CHECK(fs::exists(dir + "/run/manifest.json"));
      CHECK_FALSE(fs::exists(dir + "/.old-run"));
    };
    leave_folders();
    check_loaded("");  // through `latest`
    // Again with the tag named, then the next save sweeps the unfinished one.
    if (world().rank() == 0) fs::rename(dir + "/.tmp-run", newer + "/run");
    world().barrier();
    leave_folders();
    Engine f(cfg, world());
    CkptModel mf(f);
    CHECK(f.load_checkpoint(dir, "run").at("committed") == true);
    CHECK(mf.state(f) == committed);
    mf.train_step(f, 3);
    f.save_checkpoint(dir, {}, 0, "run");
    world().barrier();
    CHECK_FALSE(fs::exists(dir + "/.tmp-run"));
    CHECK_FALSE(fs::exists(dir + "/.old-run"));
  }
}

TEST_CASE("a NUL byte in latest: the whole message, naming the file and the byte's offset") {
  const std::string dir = fresh_dir("latest-nul");
  Engine e(config_for(DType::f32, 1), world());
  CkptModel m(e);
  m.train_step(e, 1);
  e.save_checkpoint(dir, {});
  if (world().rank() == 0) {
    std::ofstream(dir + "/latest", std::ios::binary) << std::string("step-0") + '\0' + "0000001\n";
  }
  world().barrier();
  Engine f(config_for(DType::f32, 1), world());
  CkptModel mf(f);
  const std::string err = load_error(f, dir);
  CHECK_MESSAGE(err.find(dir + "/latest: byte 6 is a NUL byte (0x00); latest must hold one line, the name of a "
                               "checkpoint folder in " + dir + ": the file is damaged; pass the tag to load "
                               "explicitly or rewrite latest") != std::string::npos,
                err);
  CHECK(f.optimizer_steps() == 0);
  // The tag itself still loads.
  CHECK_NOTHROW(f.load_checkpoint(dir, "step-00000001"));
  CHECK(f.optimizer_steps() == 1);
}

namespace {

// Rank 0: writes `value` over the fp32 at byte `offset` of rank 0's file of
// checkpoint `cdir`, and makes the checkpoint consistent again: the file's
// CRC-32 in the manifest, and the manifest's own CRC (to_text), so that only
// the finite check can notice.
void write_float_with_crc(const std::string& cdir, std::uint64_t offset, float value) {
  if (world().rank() == 0) {
    const std::string file = cdir + "/" + rank_file_name(0);
    std::vector<char> bytes(fs::file_size(file));
    std::ifstream(file, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::memcpy(bytes.data() + offset, &value, sizeof(float));
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    Manifest m = Manifest::read(cdir);
    m.files[0].crc32 = crc32_update(0, bytes.data(), bytes.size());
    std::ofstream(cdir + "/manifest.json", std::ios::trunc) << m.to_text();
  }
  world().barrier();
}

// The message of the AgreedError a load of `dir` into a fresh engine throws
// ("not agreed: ..." for another error, "" for none); after an error the
// engine's state must be untouched.
std::string agreed_load_error(const EngineConfig& cfg, const std::string& dir) {
  Engine fresh(cfg, world());
  CkptModel fm(fresh);
  const std::vector<float> before = fm.state(fresh);
  std::string what;
  try {
    fresh.load_checkpoint(dir);
  } catch (const std::exception& e) {
    what = is_agreed(e) ? e.what() : "not agreed: " + std::string(e.what());
  }
  if (!what.empty()) {
    CHECK(fm.state(fresh) == before);  // nothing half-loaded
    CHECK(fresh.optimizer_steps() == 0);
  } else {
    CHECK(fresh.optimizer_steps() == 1);
  }
  return what;
}

}  // namespace

TEST_CASE("non-finite master weights and absmax with consistent CRCs: refused on load on every rank, and on save") {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.states.dtype = StateDtype::q8;
  h.states.block_size = 64;
  h.states.min_8bit_size = 0;
  for (int stage : {0, 3}) {
    CAPTURE(stage);
    const EngineConfig cfg = make_config(stage, h);
    const std::string dir = fresh_dir(fmt::format("finite-{}", stage));
    Engine e(cfg, world());
    CkptModel m(e);
    m.train_step(e, 1);
    const std::string cdir = dir + "/" + e.save_checkpoint(dir, {});
    const Manifest saved = Manifest::read(cdir);
    REQUIRE(saved.units[1].name == "b");
    REQUIRE(saved.units[1].shard > 0);
    CHECK(agreed_load_error(cfg, dir).empty());
    // NaN in rank 0's first master weight of unit b: b.weight's element 0.
    write_float_with_crc(cdir, saved.file_offset(1, 0), std::numeric_limits<float>::quiet_NaN());
    {
      const std::string what = agreed_load_error(cfg, dir);
      CHECK(what.find(cdir + "/rank-00000.bin: master holds nan at parameter \"b.weight\" (unit \"b\"), element 0 "
                      "of the parameter: a checkpoint's master weights and optimizer states must be finite") !=
            std::string::npos);
    }
    if (stage == 3) {
      // State on nvme is loaded a unit at a time ([Note: bounded-memory
      // load]), yet every unit is checked before any is stored: unit a,
      // before b, stays as it was too (agreed_load_error checks it all).
      EngineConfig nvme = cfg;
      const std::string swap = fresh_dir("finite-swap");
      nvme.offload.optimizer.device = OffloadDevice::nvme;
      nvme.offload.optimizer.nvme_path = swap;
      nvme.offload.param.device = OffloadDevice::nvme;
      nvme.offload.param.nvme_path = swap;
      nvme.offload.param.max_in_cpu = 0;
      CHECK(agreed_load_error(nvme, dir).find("master holds nan at parameter \"b.weight\"") != std::string::npos);
    }
    write_float_with_crc(cdir, saved.file_offset(1, 0), 0.5f);
    CHECK(agreed_load_error(cfg, dir).empty());
    // +Inf in the first absmax of exp_avg (after the shard's codes).
    write_float_with_crc(cdir, saved.file_offset(1, 1) + saved.units[1].shard,
                         std::numeric_limits<float>::infinity());
    {
      const std::string what = agreed_load_error(cfg, dir);
      CHECK(what.find(cdir + "/rank-00000.bin: exp_avg absmax holds inf for the block starting at parameter "
                      "\"b.weight\" (unit \"b\"), element 0 of the parameter: a checkpoint's 8-bit absmax scales "
                      "must be finite and not negative") != std::string::npos);
    }
    // A save of a NaN master weight is refused on every rank; nothing is written.
    std::vector<float> bad(e.layout().param(m.params[4]).numel, 1.0f);
    bad[5] = -std::numeric_limits<float>::infinity();
    e.set_parameter(m.params[4], bad);
    std::string what;
    try {
      e.save_checkpoint(dir, {}, 0, "bad");
    } catch (const std::exception& err) {
      what = is_agreed(err) ? err.what() : "not agreed";
    }
    CHECK(what.find("save_checkpoint refused: ") != std::string::npos);
    CHECK(what.find("master holds -inf at parameter \"c.weight\" (unit \"c\"), element 5 of the parameter") !=
          std::string::npos);
    CHECK(what.find("nothing was saved") != std::string::npos);
    world().barrier();
    CHECK(!fs::exists(dir + "/bad"));
    CHECK(!fs::exists(dir + "/.tmp-bad"));
  }
}
