// The checkpoint tools against the engine at this process group's world
// size (3 under mpirun: every flat buffer is padded): zs_ckpt_export's
// safetensors equals gather_master bit for bit at stages 0-3 in fp32, bf16
// and fp16; corrupted or truncated rank files are refused before anything is
// written; zs_ckpt_inspect --verify's exit codes (the programs' paths come in
// ZS_CKPT_INSPECT / ZS_CKPT_EXPORT; without them those cases only log).

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "comm/mesh.h"
#include "core/error.h"
#include "runtime/engine/engine.h"
#include "tests/support/safetensors_reader.h"
#include "tests/support/scratch_files.h"
#include "tests/support/shell_status.h"
#include "tests/support/test_world.h"
#include "tools/checkpoint/checkpoint_verify.h"
#include "tools/checkpoint/safetensors_export.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

/// The test model: shapes [7, 5], [11], [3], [8] in three units.
struct Model {
  std::vector<ParamId> params;
  std::vector<std::string> names = {"a.weight", "a.bias", "b.scale", "c.weight"};

  explicit Model(Engine& e) {
    const UnitId a = e.add_unit("a"), b = e.add_unit("b"), c = e.add_unit("c");
    params.push_back(e.add_parameter(a, names[0], {7, 5}));
    params.push_back(e.add_parameter(a, names[1], {11}));
    params.push_back(e.add_parameter(b, names[2], {3}));
    params.push_back(e.add_parameter(c, names[3], {8}));
    e.finalize();
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::vector<float> v(e.layout().param(params[k]).numel);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * std::sin(0.37f * float(i) + float(k)) + 0.01f * float(k);
      e.set_parameter(params[k], v);
    }
  }

  /// One micro-batch of rank-dependent gradients, then step().
  void train_step(Engine& e) const {
    const float scale = static_cast<float>(e.loss_scale());
    for (std::size_t k = 0; k < params.size(); ++k) {
      auto fill = [&](auto grad) {
        using T = std::remove_cv_t<typename decltype(grad)::element_type>;
        for (std::size_t i = 0; i < grad.size(); ++i) {
          grad[i] = from_float<T>(scale * 0.1f * std::cos(0.5f * float(i) + float(k + e.rank())));
        }
      };
      switch (e.compute_dtype()) {
        case DType::bf16: fill(e.grad_as<bf16>(params[k])); break;
        case DType::f16: fill(e.grad_as<f16>(params[k])); break;
        default: fill(e.grad(params[k])); break;
      }
    }
    e.step();
  }
};

EngineConfig config_for(int stage, DType dtype) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dtype;
  return c;
}

/// A directory for this world size, emptied by rank 0.
std::string fresh_dir(const std::string& name) {
  const std::string dir = fmt::format("ckpt-export-{}-np{}", name, world().world_size());
  make_empty_dir_on_rank0(world(), dir);
  return dir;
}

/// The output the programs wrote to <dir>/log.txt (run_status with a redirect).
std::string log_of(const std::string& dir) { return read_text_file(dir + "/log.txt"); }

/// Checks the export of `save_dir` against `want` (name -> gathered master).
void check_export(const std::string& save_dir, const std::string& out, const Model& model,
                  const std::vector<std::vector<float>>& want, const std::vector<std::vector<std::int64_t>>& shapes,
                  std::int64_t step) {
  const auto r = tools::export_safetensors(save_dir, out);
  CHECK(r.tensors == model.names.size());
  CHECK(fs::file_size(out) == r.file_bytes);
  CHECK_FALSE(fs::exists(out + ".tmp"));
  const SafetensorsFile f = read_safetensors(out);
  CHECK(f.order == model.names);  // no extra tensors, in model order
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.metadata.at("tag") == r.tag);
  CHECK(f.metadata.at("optimizer_step") == std::to_string(step));
  std::uint64_t largest = 0;
  for (std::size_t k = 0; k < model.names.size(); ++k) {
    CAPTURE(model.names[k]);
    const SafetensorsTensor& t = f.tensors.at(model.names[k]);
    CHECK(t.shape == shapes[k]);
    CHECK(t.dtype == "F32");
    REQUIRE(t.values.size() == want[k].size());
    CHECK(std::memcmp(t.values.data(), want[k].data(), want[k].size() * sizeof(float)) == 0);
    largest = std::max<std::uint64_t>(largest, want[k].size() * sizeof(float));
  }
  CHECK(r.buffer_bytes == largest);
}

}  // namespace

TEST_CASE("zs_ckpt_export: safetensors equals gather_master bit for bit at stages 0-3, fp32/bf16/fp16") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(stage);
      CAPTURE(dtype_name(dtype));
      const std::string dir = fresh_dir(fmt::format("s{}-{}", stage, dtype_name(dtype)));
      Engine engine(config_for(stage, dtype), world());
      const Model model(engine);
      model.train_step(engine);
      model.train_step(engine);
      engine.save_checkpoint(dir, {{"note", "export test"}});
      std::vector<std::vector<float>> want;
      std::vector<std::vector<std::int64_t>> shapes;
      for (ParamId p : model.params) {
        want.push_back(engine.gather_master(p));
        shapes.push_back(engine.layout().param(p).shape);
      }
      if (world().rank() == 0) {
        try {
          check_export(dir, dir + "/model.safetensors", model, want, shapes, engine.optimizer_steps());
          // The checkpoint directory itself works as well as the save directory.
          check_export(tools::resolve_checkpoint_dir(dir), dir + "/model2.safetensors", model, want, shapes,
                       engine.optimizer_steps());
        } catch (const std::exception& e) {
          FAIL_CHECK("export failed: " << e.what());
        }
      }
      world().barrier();
    }
  }
}

TEST_CASE("zs_ckpt_export refuses corrupted, truncated and missing shards before writing anything") {
  const std::string dir = fresh_dir("bad");
  Engine engine(config_for(3, DType::f32), world());
  const Model model(engine);
  model.train_step(engine);
  engine.save_checkpoint(dir, {});
  if (world().rank() == 0) {
    const std::string ckpt = tools::resolve_checkpoint_dir(dir);
    const std::string shard = ckpt + "/" + rank_file_name(world().world_size() - 1);
    const std::string out = dir + "/out.safetensors";
    flip_bits(shard, 5, 0x20);
    CHECK_THROWS_WITH_AS(tools::export_safetensors(dir, out), doctest::Contains("CRC-32"), IoError);
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(out + ".tmp"));
    flip_bits(shard, 5, 0x20);
    CHECK_NOTHROW(tools::export_safetensors(dir, out));
    fs::resize_file(shard, fs::file_size(shard) - 4);
    CHECK_THROWS_WITH_AS(tools::export_safetensors(dir, out + "2"), doctest::Contains("truncated"), IoError);
    fs::remove(shard);
    CHECK_THROWS_AS(tools::export_safetensors(dir, out + "2"), IoError);
    CHECK_FALSE(fs::exists(out + "2"));
    CHECK_THROWS_WITH_AS(tools::export_safetensors(dir + "/nowhere", out + "2"),
                         doctest::Contains("not a checkpoint"), IoError);
  }
  world().barrier();
}

TEST_CASE("zs_ckpt_inspect --verify and zs_ckpt_export exit codes") {
  const char* inspect = std::getenv("ZS_CKPT_INSPECT");
  const char* exporter = std::getenv("ZS_CKPT_EXPORT");
  const std::string dir = fresh_dir("cli");
  Engine engine(config_for(2, DType::f32), world());
  const Model model(engine);
  model.train_step(engine);
  const std::string tag = engine.save_checkpoint(dir, {{"epoch", 0}});
  if (world().rank() == 0) {
    if (inspect == nullptr || exporter == nullptr) {
      MESSAGE("ZS_CKPT_INSPECT / ZS_CKPT_EXPORT not set: the programs are not run");
    } else {
      const std::string log = " >" + dir + "/log.txt 2>&1";
      CHECK(run_status(fmt::format("{} {}{}", inspect, dir, log)) == 0);
      CHECK(run_status(fmt::format("{} {}/{} --verify{}", inspect, dir, tag, log)) == 0);
      CHECK(run_status(fmt::format("{} {} {}/cli.safetensors{}", exporter, dir, dir, log)) == 0);
      CHECK(fs::exists(dir + "/cli.safetensors"));
      // --quiet: nothing on stdout or stderr, not even the progress line.
      CHECK(run_status(fmt::format("{} {} {}/quiet.safetensors --quiet{}", exporter, dir, dir, log)) == 0);
      CHECK(fs::exists(dir + "/quiet.safetensors"));
      CHECK(fs::file_size(dir + "/log.txt") == 0);
      flip_bits(dir + "/" + tag + "/" + rank_file_name(0), 1, 0x20);
      CHECK(run_status(fmt::format("{} {} --verify{}", inspect, dir, log)) == 2);
      const std::string text = log_of(dir);
      CHECK(text.find("FAILED") != std::string::npos);
      CHECK(run_status(fmt::format("{} {} {}/bad.safetensors{}", exporter, dir, dir, log)) == 1);
      CHECK_FALSE(fs::exists(dir + "/bad.safetensors"));
      CHECK(run_status(fmt::format("{} {}/missing --verify{}", inspect, dir, log)) == 1);
    }
  }
  world().barrier();
}

TEST_CASE("zs_ckpt_inspect --verify checks the consolidated weights file too") {
  const char* inspect = std::getenv("ZS_CKPT_INSPECT");
  const std::string dir = fresh_dir("cli-weights");
  EngineConfig cfg = config_for(3, DType::bf16);
  cfg.zero.gather_16bit_weights_on_model_save = true;
  Engine engine(cfg, world());
  const Model model(engine);
  model.train_step(engine);
  const std::string tag = engine.save_checkpoint(dir, {});
  if (world().rank() == 0 && inspect != nullptr) {
    const std::string log = " >" + dir + "/log.txt 2>&1";
    CHECK(run_status(fmt::format("{} {} --verify{}", inspect, dir, log)) == 0);
    CHECK(log_of(dir).find(fmt::format("weights: {} (bf16", kWeightsFileName)) != std::string::npos);
    CHECK(log_of(dir).find(fmt::format("all {} files match", world().world_size() + 1)) != std::string::npos);
    const std::string weights = dir + "/" + tag + "/" + kWeightsFileName;
    flip_bits(weights, 100, 0x20);
    CHECK(run_status(fmt::format("{} {} --verify{}", inspect, dir, log)) == 2);
    CHECK(log_of(dir).find("(corrupted weights file)") != std::string::npos);
    flip_bits(weights, 100, 0x20);
    fs::resize_file(weights, fs::file_size(weights) - 2);
    CHECK(run_status(fmt::format("{} {} --verify{}", inspect, dir, log)) == 2);
    CHECK(log_of(dir).find("truncated or wrong file") != std::string::npos);
  }
  world().barrier();
}

TEST_CASE("mesh_save_dirs: pp-SS and pp-SS/tp-TT entries in name order, other names left out") {
  const std::string dir = fresh_dir("mesh-list");
  if (world().rank() == 0) {
    for (const char* sub : {"pp-00/tp-00", "pp-00/tp-01", "pp-01/tp-00", "pp-01/tp-01", "pp-x", "pp-1", "pp-02"}) {
      fs::create_directories(dir + "/" + sub);
    }
    std::ofstream(dir + "/pp-03") << "a file\n";
    CHECK(tools::mesh_top_dirs(dir) ==
          std::vector<std::string>{dir + "/pp-00", dir + "/pp-01", dir + "/pp-02", dir + "/pp-03"});
    CHECK(tools::mesh_save_dirs(dir) ==
          std::vector<std::string>{dir + "/pp-00/tp-00", dir + "/pp-00/tp-01", dir + "/pp-01/tp-00",
                                   dir + "/pp-01/tp-01", dir + "/pp-02", dir + "/pp-03"});
    CHECK(tools::mesh_save_dirs(dir + "/pp-01") ==
          std::vector<std::string>{dir + "/pp-01/tp-00", dir + "/pp-01/tp-01"});
    CHECK(tools::mesh_save_dirs(dir + "/pp-02").empty());
    CHECK(tools::mesh_save_dirs(dir + "/nowhere").empty());
    const std::string named = "4 of them: " + dir + "/pp-00, " + dir + "/pp-01, " + dir + "/pp-02, " + dir +
                              "/pp-03); give one";
    CHECK_THROWS_WITH_AS(tools::resolve_checkpoint_dir(dir), doctest::Contains(named.c_str()), IoError);
  }
  world().barrier();
}

TEST_CASE("a pipeline run's save directory: inspected stage by stage and as one mesh; export names the stages") {
  // One stage per rank (pp = world size): each saves its own pp-SS folder.
  const int n = world().world_size();
  if (n < 2) {
    MESSAGE("needs 2 or more ranks (runs in ckpt_export np=3)");
    return;
  }
  const char* inspect = std::getenv("ZS_CKPT_INSPECT");
  const std::string dir = fresh_dir("mesh");
  Mesh mesh(world(), MeshShape{1, 1, n});
  Engine e(config_for(1, DType::f32), mesh);
  const ParamId w = e.add_parameter(e.add_unit("u"), fmt::format("w.{}", mesh.pp_rank()), {7}, 0,
                                    TensorParallel::replicated());
  e.finalize();
  e.set_parameter(w, std::vector<float>(7, 0.25f));
  std::vector<std::string> tags;
  for (int step = 1; step <= 2; ++step) {
    for (float& g : e.grad(w)) g += 0.5f;
    e.step();
    tags.push_back(e.save_checkpoint(dir, {}));
  }
  if (world().rank() == 0) {
    const std::string last = fmt::format("pp-{:02d}", n - 1);
    CHECK(tools::mesh_save_dirs(dir).size() == static_cast<std::size_t>(n));
    CHECK_THROWS_WITH_AS(tools::export_safetensors(dir, dir + "/out.safetensors"),
                         doctest::Contains("run on a mesh"), IoError);
    CHECK_NOTHROW(tools::export_safetensors(dir + "/pp-01", dir + "/pp-01.safetensors"));
    if (inspect == nullptr) {
      MESSAGE("ZS_CKPT_INSPECT not set: the program is not run");
    } else {
      const std::string log = " >" + dir + "/log.txt 2>&1";
      auto inspect_status = [&] { return run_status(fmt::format("{} {} --verify{}", inspect, dir, log)); };
      CHECK(inspect_status() == 0);
      CHECK(log_of(dir).find("== " + dir + "/" + last + "\n") != std::string::npos);
      CHECK(log_of(dir).find(fmt::format("this checkpoint: tp rank 0, pipeline stage {}", n - 1)) !=
            std::string::npos);
      CHECK(log_of(dir).find(fmt::format("mesh: all {} checkpoints of the pp {} x tp 1 mesh are here, at optimizer "
                                        "step 2",
                                        n, n)) != std::string::npos);
      // A corrupted file in one stage: exit 2.
      const std::string shard = dir + "/pp-01/" + tags[1] + "/" + rank_file_name(0);
      flip_bits(shard, 1, 0x20);
      CHECK(inspect_status() == 2);
      CHECK(log_of(dir).find("FAILED") != std::string::npos);
      flip_bits(shard, 1, 0x20);
      // The stages' latest files out of step: exit 1, naming the steps.
      std::ofstream(dir + "/pp-01/latest") << tags[0] << "\n";
      CHECK(inspect_status() == 1);
      CHECK(log_of(dir).find("different optimizer steps") != std::string::npos);
      std::ofstream(dir + "/pp-01/latest") << tags[1] << "\n";
      CHECK(inspect_status() == 0);
      // A stage whose latest file is gone, then one missing, then a file in its place: exit 1.
      fs::rename(dir + "/" + last + "/latest", dir + "/latest.bak");
      CHECK(inspect_status() == 1);
      CHECK(log_of(dir).find(fmt::format("no readable checkpoint of pipeline stage {}, tp rank 0", n - 1)) !=
            std::string::npos);
      fs::rename(dir + "/" + last, dir + "/stage.bak");
      CHECK(inspect_status() == 1);
      CHECK(log_of(dir).find(fmt::format("no readable checkpoint of pipeline stage {}", n - 1)) != std::string::npos);
      std::ofstream(dir + "/" + last) << "not a folder\n";
      CHECK(inspect_status() == 1);
      CHECK(log_of(dir).find("not a checkpoint") != std::string::npos);
    }
  }
  world().barrier();
}

TEST_CASE("fixture for the Python safetensors check (only with ZS_CKPT_FIXTURE)") {
  const char* fixture = std::getenv("ZS_CKPT_FIXTURE");
  if (fixture == nullptr) return;
  const std::string dir = fixture;
  make_empty_dir_on_rank0(world(), dir);
  Engine engine(config_for(3, DType::bf16), world());
  const Model model(engine);
  model.train_step(engine);
  engine.save_checkpoint(dir + "/ckpt", {{"note", "python fixture"}});
  nlohmann::json expected = nlohmann::json::object();
  for (std::size_t k = 0; k < model.params.size(); ++k) {
    const std::vector<float> v = engine.gather_master(model.params[k]);
    std::vector<std::uint32_t> bits(v.size());
    std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
    expected[model.names[k]] = {{"shape", engine.layout().param(model.params[k]).shape}, {"bits", bits}};
  }
  if (world().rank() == 0) {
    std::ofstream(dir + "/expected.json") << nlohmann::json{{"tensors", expected}, {"optimizer_step", engine.optimizer_steps()}}.dump() << "\n";
  }
  world().barrier();
}
