// save_checkpoint's consolidated weights
// (zero_optimization.stage3_gather_16bit_weights_on_model_save,
// docs/checkpoint-format.md "Consolidated weights") at this process group's
// world size: model.safetensors holds every parameter's compute copy bit for
// bit (fp32, bf16, fp16; stages 0-3; units of 10001 and 57 elements and an
// empty parameter, none divisible by 2 or 3 ranks), listed in the manifest
// with its size and CRC-32; none with the key off; the same file with
// parameters on nvme; an nvme read failure on one rank during the gather is
// agreed and leaves nothing behind; on a tp > 1 mesh each tp rank's
// checkpoint holds its slices.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "comm/mesh.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "offload/io/fault_injection.h"
#include "core/durable_file.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "tests/support/ckpt_model.h"
#include "tests/support/safetensors_reader.h"
#include "tests/support/same_bits.h"
#include "tests/support/scratch_files.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// A directory shared by the ranks of this run, emptied at the start.
std::string fresh_dir(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() /
                           fmt::format("zs-test-weights-{}-np{}", name, world().world_size())).string();
  make_empty_dir_on_rank0(world(), dir);
  return dir;
}

EngineConfig config_for(DType dtype, int stage, bool gather = true) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.05f;
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dtype;
  c.loss_scale = LossScaleConfig{.dynamic = false, .static_scale = 1024};
  c.zero.gather_16bit_weights_on_model_save = gather;
  return c;
}

// Three units: "emb" (10001 elements), "blk" (57 + an empty parameter + 5)
// and "head" (57), trained with deterministic gradients.
struct WeightsModel {
  std::vector<ParamId> params;
  std::vector<std::string> names = {"emb.weight", "blk.w", "blk.empty", "blk.b", "head.w"};
  std::vector<std::vector<std::int64_t>> shapes = {{10001}, {3, 19}, {0}, {5}, {57}};

  explicit WeightsModel(Engine& e) {
    const UnitId emb = e.add_unit("emb"), blk = e.add_unit("blk"), head = e.add_unit("head");
    const UnitId unit_of[] = {emb, blk, blk, blk, head};
    for (std::size_t k = 0; k < names.size(); ++k) params.push_back(e.add_parameter(unit_of[k], names[k], shapes[k]));
    e.finalize();
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::vector<float> v(e.layout().param(params[k]).numel);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.013f * static_cast<float>((i * 11 + k * 5) % 97) - 0.6f;
      e.set_parameter(params[k], v);
    }
  }

  // One micro-batch (the same gradient on every rank), then step().
  void train_step(Engine& e, int step) const { sine_gradient_step(e, params, step); }
};

const char* st_dtype(DType t) { return t == DType::f32 ? "F32" : t == DType::bf16 ? "BF16" : "F16"; }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `values` (fp32) rounded to t and widened back: what a compute copy made
// from these master weights holds.
std::vector<float> rounded(const std::vector<float>& values, DType t) {
  std::vector<std::byte> narrow(values.size() * dtype_size(t));
  kernels::cast(narrow.data(), t, values.data(), DType::f32, values.size());
  std::vector<float> out(values.size());
  kernels::cast(out.data(), DType::f32, narrow.data(), t, values.size());
  return out;
}

// Checks <cdir>/model.safetensors against engine e's compute copy (gathered;
// collective) and master weights, and against the manifest's entry.
void check_weights_file(Engine& e, const WeightsModel& m, const std::string& cdir, const std::string& tag) {
  const std::string path = cdir + "/" + kWeightsFileName;
  REQUIRE(fs::exists(path));
  const SafetensorsFile f = read_safetensors(path);
  CHECK(f.order == m.names);  // model order, nothing else
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.metadata.at("tag") == tag);
  CHECK(f.metadata.at("optimizer_step") == std::to_string(e.optimizer_steps()));
  CHECK(f.metadata.at("world_size") == std::to_string(e.world_size()));
  CHECK(f.metadata.at("stage") == std::to_string(e.stage()));
  CHECK(f.metadata.at("compute_dtype") == dtype_name(e.compute_dtype()));
  for (std::size_t k = 0; k < m.params.size(); ++k) {
    CAPTURE(m.names[k]);
    const SafetensorsTensor& t = f.tensors.at(m.names[k]);
    CHECK(t.dtype == st_dtype(e.compute_dtype()));
    CHECK(t.shape == m.shapes[k]);
    const std::vector<float> compute = e.gather_parameter(m.params[k]);
    CHECK(same_bits(t.values, compute));
    CHECK(same_bits(t.values, rounded(e.gather_master(m.params[k]), e.compute_dtype())));
  }
  const Manifest man = Manifest::read(cdir);
  REQUIRE(man.weights.recorded);
  CHECK(man.weights.name == kWeightsFileName);
  CHECK(man.weights.dtype == dtype_name(e.compute_dtype()));
  CHECK(man.weights.bytes == fs::file_size(path));
  CHECK(man.weights.crc32 == FileReader(path).crc32());
}

}  // namespace

TEST_CASE("the key on: model.safetensors holds every parameter's compute copy bit for bit, stages 0-3") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(stage);
      const std::string dir = fresh_dir(fmt::format("on-{}-{}", dtype_name(dtype), stage));
      Engine e(config_for(dtype, stage), world());
      WeightsModel m(e);
      for (int s = 1; s <= 2; ++s) m.train_step(e, s);
      const std::string tag = e.save_checkpoint(dir, {{"k", 1}});
      world().barrier();
      check_weights_file(e, m, dir + "/" + tag, tag);
      world().barrier();
      remove_dir_on_rank0(world(), dir);
    }
  }
}

TEST_CASE("a checkpoint with the weights file loads back; with the key off there is none") {
  const std::string dir = fresh_dir("load");
  Engine e(config_for(DType::bf16, 3), world());
  WeightsModel m(e);
  m.train_step(e, 1);
  e.save_checkpoint(dir, {{"k", 2}}, 0, "with");
  Engine off(config_for(DType::bf16, 3, false), world());
  WeightsModel mo(off);
  CHECK(off.load_checkpoint(dir, "with").at("k") == 2);
  for (ParamId p : m.params) CHECK(off.gather_parameter(p) == e.gather_parameter(p));
  off.save_checkpoint(dir, {}, 0, "without");
  world().barrier();
  CHECK(fs::exists(dir + "/with/" + kWeightsFileName));
  CHECK_FALSE(fs::exists(dir + "/without/" + kWeightsFileName));
  CHECK_FALSE(Manifest::read(dir + "/without").weights.recorded);
  CHECK(std::distance(fs::directory_iterator(dir + "/without"), fs::directory_iterator()) ==
        1 + world().world_size());  // manifest.json and the rank files
  world().barrier();
  remove_dir_on_rank0(world(), dir);
}

TEST_CASE("stage 3 with parameters on nvme writes the same file as without offload") {
  const fs::path swap = fs::temp_directory_path() / fmt::format("zs-test-weights-swap-np{}", world().world_size());
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool optimizer_on_nvme : {false, true}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(optimizer_on_nvme);
      const std::string dir = fresh_dir(fmt::format("nvme-{}", dtype_name(dtype)));
      EngineConfig cfg = config_for(dtype, 3);
      cfg.offload.param.device = OffloadDevice::nvme;
      cfg.offload.param.nvme_path = swap.string();
      cfg.offload.param.max_in_cpu = 0;
      if (optimizer_on_nvme) {
        cfg.offload.optimizer.device = OffloadDevice::nvme;
        cfg.offload.optimizer.nvme_path = swap.string();
        cfg.offload.sub_group_size = 4096;
      }
      std::string plain_file;
      {
        Engine plain(config_for(dtype, 3), world());
        WeightsModel mp(plain);
        for (int s = 1; s <= 2; ++s) mp.train_step(plain, s);
        plain.save_checkpoint(dir, {}, 0, "plain");
        world().barrier();
        plain_file = file_bytes(dir + "/plain/" + kWeightsFileName);
      }
      Engine e(cfg, world());
      WeightsModel m(e);
      for (int s = 1; s <= 2; ++s) m.train_step(e, s);
      e.save_checkpoint(dir, {}, 0, "plain");  // the same tag: the same metadata
      world().barrier();
      check_weights_file(e, m, dir + "/plain", "plain");
      CHECK(file_bytes(dir + "/plain/" + kWeightsFileName) == plain_file);
      world().barrier();
      remove_dir_on_rank0(world(), dir);
    }
  }
  remove_dir_on_rank0(world(), swap);
}

#if ZS_TEST_HOOKS
TEST_CASE("an nvme read failure on one rank while gathering the weights: agreed, nothing left behind") {
  const fs::path swap = fs::temp_directory_path() / fmt::format("zs-test-weights-fault-np{}", world().world_size());
  const std::string dir = fresh_dir("fault");
  // bf16 with only the parameters on nvme: the rank files read nothing
  // from disk, so the first read of the save is the weights' first shard.
  EngineConfig cfg = config_for(DType::bf16, 3);
  cfg.offload.param.device = OffloadDevice::nvme;
  cfg.offload.param.nvme_path = swap.string();
  cfg.offload.param.max_in_cpu = 0;
  Engine e(cfg, world());
  WeightsModel m(e);
  m.train_step(e, 1);
  e.save_checkpoint(dir, {});
  m.train_step(e, 2);
  const int last = world().world_size() - 1;
  if (world().rank() == last) inject_io_fault(IoFault{.op = IoOp::read, .nth = 1, .err = EIO});
  std::string msg;
  bool agreed = false;
  try {
    e.save_checkpoint(dir, {});
  } catch (const IoError& err) {
    msg = err.what();
    agreed = is_agreed(err);
  }
  clear_io_fault();
  CHECK(agreed);
  CHECK_MESSAGE(msg.find("Input/output error") != std::string::npos, msg);
  if (last > 0) CHECK_MESSAGE(msg.find(fmt::format("rank {}: ", last)) != std::string::npos, msg);
  world().barrier();
  CHECK_FALSE(fs::exists(dir + "/.tmp-step-00000002"));
  CHECK_FALSE(fs::exists(dir + "/step-00000002"));
  CHECK(read_text_file(dir + "/latest") == "step-00000001\n");
  const Manifest kept = Manifest::read(dir + "/step-00000001");  // the previous checkpoint, whole
  CHECK(kept.weights.crc32 == FileReader(dir + "/step-00000001/" + kWeightsFileName).crc32());
  world().barrier();
  // The engine saves again (a failed save changes no state).
  e.save_checkpoint(dir, {});
  world().barrier();
  check_weights_file(e, m, dir + "/step-00000002", "step-00000002");
  world().barrier();
  remove_dir_on_rank0(world(), dir);
}
#endif

TEST_CASE("on a mesh with tp > 1 each tp rank's checkpoint holds its slices") {
  const int n = world().world_size();
  for (int tp = 2; tp <= n; ++tp) {
    if (n % tp != 0) continue;
    for (int stage : {0, 3}) {
      CAPTURE(tp);
      CAPTURE(stage);
      const std::string dir = fresh_dir(fmt::format("mesh-{}-{}", tp, stage));
      Mesh mesh(world(), MeshShape{n / tp, tp});
      Engine e(config_for(DType::bf16, stage), mesh);
      const UnitId u0 = e.add_unit("u0"), u1 = e.add_unit("u1");
      const std::int64_t local = 19;  // this tp rank's slice of a [19 x tp] tensor
      const ParamId a = e.add_parameter(u0, "a", {local}, 0, TensorParallel::split(0));
      const ParamId b = e.add_parameter(u0, "b", {5}, 0, TensorParallel::replicated());
      const ParamId c = e.add_parameter(u1, "c", {57}, 0, TensorParallel::replicated());
      e.finalize();
      std::vector<float> av(static_cast<std::size_t>(local)), bv(5), cv(57);
      for (std::size_t i = 0; i < av.size(); ++i) av[i] = 0.25f * static_cast<float>(mesh.tp_rank() * 100 + i);
      for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = -0.5f * static_cast<float>(i);
      for (std::size_t i = 0; i < cv.size(); ++i) cv[i] = 0.125f * static_cast<float>(i % 7);
      e.set_parameter(a, av);
      e.set_parameter(b, bv);
      e.set_parameter(c, cv);
      const std::string tag = e.save_checkpoint(dir, {});
      world().barrier();
      const std::string path = fmt::format("{}/tp-{:02d}/{}/{}", dir, mesh.tp_rank(), tag, kWeightsFileName);
      const SafetensorsFile f = read_safetensors(path);
      CHECK(f.order == std::vector<std::string>{"a", "b", "c"});
      CHECK(f.metadata.at("tp_size") == std::to_string(tp));
      CHECK(f.metadata.at("tp_rank") == std::to_string(mesh.tp_rank()));
      CHECK(f.metadata.at("world_size") == std::to_string(n / tp));
      CHECK(f.tensors.at("a").shape == std::vector<std::int64_t>{local});
      CHECK(same_bits(f.tensors.at("a").values, e.gather_parameter(a)));
      CHECK(same_bits(f.tensors.at("a").values, rounded(av, DType::bf16)));
      CHECK(same_bits(f.tensors.at("b").values, rounded(bv, DType::bf16)));
      CHECK(same_bits(f.tensors.at("c").values, e.gather_parameter(c)));
      world().barrier();
      remove_dir_on_rank0(world(), dir);
    }
  }
}
