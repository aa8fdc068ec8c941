// zeroshard_torch over 1-4 ranks (libtorch/shard.h): a libtorch model with
// a tied weight, a bias-free layer and a module used twice gives bitwise
// the same parameters and losses at stages 0-3 (fp32 and bf16); autograd
// adds into the engine's buffers in place; stage 3 frees the gathered
// parameters; checkpoints round-trip; exports read back through libtorch.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/utils.h>

#include "core/memory_ledger.h"
#include "libtorch/tensor_storage.h"
#include "tests/libtorch/torch_test_models.h"
#include "tests/support/safetensors_reader.h"
#include "tests/support/scratch_files.h"

namespace zeroshard::testing {
namespace {

namespace fs = std::filesystem;

void check_same_state(const TrainResult& got, const TrainResult& want, const std::string& what) {
  REQUIRE(got.state.size() == want.state.size());
  for (const auto& item : want.state) {
    INFO(what << ": " << item.key());
    CHECK(same_bits(got.state[item.key()], item.value()));
  }
  CHECK_MESSAGE(got.losses == want.losses, what << ": losses differ");
}

TEST_CASE("stages 0-3 train a libtorch model to the same bits") {
  ::torch::set_num_threads(1);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const TrainResult stage0 = train_tied_net(tied_net_config(0, dtype), 4);
    for (const auto& item : stage0.state) {
      if (item.key() == "wte.weight" || item.key() == "shared.weight" || item.key() == "nobias.weight") {
        CHECK((item.value().scalar_type() == torch::scalar_type_of(dtype)));
      }
    }
    for (int stage = 1; stage <= 3; ++stage) {
      check_same_state(train_tied_net(tied_net_config(stage, dtype), 4), stage0,
                       fmt::format("stage {} {}", stage, dtype_name(dtype)));
    }
    // The run trained: the loss fell, and the tied weight is one tensor.
    CHECK(stage0.losses.back() < stage0.losses.front());
    CHECK(same_bits(stage0.state["wte.weight"], stage0.state["head.weight"]));
  }
}

TEST_CASE("autograd adds into the engine's gradient buffers in place") {
  ::torch::set_num_threads(1);
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    TiedNetRun run(tied_net_config(stage));
    auto& [model, engine, sharded, opt] = run;
    const std::int64_t params = static_cast<std::int64_t>(sharded.parameter_names().size());
    for (int step = 0; step < 3; ++step) {
      run.loss(step).backward();
      if (stage < 2) {
        // The full gradient buffer persists to step(): .grad() is a view of it.
        for (const auto& names : sharded.parameter_names()) {
          const at::Tensor p = model->named_parameters()[names[0]];
          REQUIRE(p.grad().defined());
          CHECK(p.grad().data_ptr() == engine.grad(sharded.param_id(names[0])).data());
        }
      } else {
        // Stages 2/3 reduce every unit during the backward: .grad() is gone.
        for (const auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
      }
      opt.step();
      // Every parameter was accumulated once per backward, each checked in
      // place (the hook throws otherwise); every unit reduced as its last
      // gradient arrived.
      CHECK(sharded.stats().in_place_accumulations == params * (step + 1));
      CHECK(sharded.stats().reductions_in_backward ==
            static_cast<std::int64_t>(sharded.unit_names().size()) * (step + 1));
    }
    // Stages 0/1 keep one buffer per parameter; stage 3's gathered
    // parameters and gradient buffers come from a pool at changing
    // addresses, and the storages follow them (the in-place checks above
    // and the stage equivalence depend on it).
    MESSAGE("stage " << stage << ": parameter buffers moved " << sharded.stats().param_buffers_moved
                     << " times, gradient buffers " << sharded.stats().grad_buffers_moved);
    if (stage < 2) {
      CHECK(sharded.stats().param_buffers_moved == 0);
      CHECK(sharded.stats().grad_buffers_moved == 0);
    }
    if (stage == 3) {
      CHECK(sharded.stats().param_buffers_moved > 0);
      CHECK(sharded.stats().grad_buffers_moved > 0);  // the pool hands out buffers of both kinds
    }
  }
}

TEST_CASE("stage 3 holds one unit and its prefetch after the forward") {
  ::torch::set_num_threads(1);
  std::uint64_t largest = 0, all = 0;
  std::vector<std::uint64_t> after_forward;
  auto measure = [&](torch::ShardedModule& m) {
    const Engine& e = m.engine();
    if (largest == 0) {
      for (const auto& u : e.layout().units()) {
        largest = std::max<std::uint64_t>(largest, u.padded * sizeof(float));
        all += u.padded * sizeof(float);
      }
    }
    after_forward.push_back(e.ledger().current(MemCategory::unsharded));
  };
  const TrainResult r = train_tied_net(tied_net_config(3), 3, measure);
  REQUIRE(after_forward.size() == 3);
  REQUIRE(all > 2 * largest);  // else the bound below would say nothing
  for (std::uint64_t bytes : after_forward) {
    CAPTURE(bytes);
    CHECK(bytes <= 2 * largest);
  }
  CHECK(r.stats.forward_unshards == 3 * 7);  // wte, shared x2, nobias, norm, head + wte (tied)
  CHECK(r.stats.backward_unshards == 3 * 7);
}

TEST_CASE("a checkpoint round trip continues bitwise, at another stage too") {
  ::torch::set_num_threads(1);
  const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-torch-ckpt-np{}", world().world_size());
  for (int save_stage : {0, 3}) {
    const int load_stage = 3 - save_stage;
    make_empty_dir_on_rank0(world(), dir);
    // Uninterrupted: 4 steps at the saving stage.
    const TrainResult straight = train_tied_net(tied_net_config(save_stage), 4);
    {
      TiedNetRun saving(tied_net_config(save_stage));
      for (int step = 0; step < 2; ++step) saving.train_step(step);
      saving.sharded.save_checkpoint(dir.string(), {{"step", 2}});
    }
    TiedNetRun run(tied_net_config(load_stage));
    const nlohmann::json client = run.sharded.load_checkpoint(dir.string());
    REQUIRE(client.at("step").get<int>() == 2);
    for (int step = 2; step < 4; ++step) run.train_step(step);
    const auto state = torch::gather_state_dict(run.sharded);
    for (const auto& item : straight.state) {
      INFO("saved at stage " << save_stage << ", loaded at " << load_stage << ": " << item.key());
      CHECK(same_bits(state[item.key()], item.value()));
    }
  }
  remove_dir_on_rank0(world(), dir);
}

TEST_CASE("an export reads back through libtorch and safetensors") {
  ::torch::set_num_threads(1);
  const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-torch-export-np{}", world().world_size());
  make_empty_dir_on_rank0(world(), dir);
  TiedNetRun run(tied_net_config(3));
  auto& [model, engine, sharded, opt] = run;
  for (int step = 0; step < 2; ++step) run.train_step(step);
  const auto state = torch::gather_state_dict(sharded);
  torch::export_state_dict(sharded, (dir / "model.pt").string());
  torch::export_state_dict(sharded, (dir / "model.safetensors").string());
  // The sharded model's output on a batch, at stage 3, without autograd.
  auto [tokens, targets] = tied_net_batch(0, 99);
  at::Tensor sharded_out;
  {
    const at::NoGradGuard no_grad;
    sharded_out = sharded(tokens);
  }
  if (world().rank() == 0) {
    std::ifstream in(dir / "model.pt", std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const c10::Dict<c10::IValue, c10::IValue> dict = ::torch::jit::pickle_load(bytes).toGenericDict();
    // The module's own names, the tied weight under both, the values gathered.
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
    REQUIRE(dict.size() == names.size());
    std::vector<std::string> read;
    for (const auto& item : dict) read.push_back(item.key().toStringRef());
    CHECK(read == names);
    // A plain (unsharded) TiedNet given the file's values computes the same output.
    auto plain = make_tied_net();
    {
      const at::NoGradGuard no_grad;
      for (auto& item : plain->named_parameters()) {
        const at::Tensor t = dict.at(item.key()).toTensor();
        CHECK(same_bits(t, state[item.key()]));
        item.value().set_data(t.clone());
      }
      CHECK(same_bits(plain->forward(tokens), sharded_out));
    }
    const SafetensorsFile st = read_safetensors((dir / "model.safetensors").string());
    CHECK(st.order == names);
    CHECK(st.metadata.at("format") == "pt");
    for (const auto& name : names) {
      const at::Tensor& t = state[name];
      CHECK(st.tensors.at(name).shape == t.sizes().vec());
      CHECK(st.tensors.at(name).bytes == std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()));
    }
  }
  remove_dir_on_rank0(world(), dir);
}

}  // namespace
}  // namespace zeroshard::testing
