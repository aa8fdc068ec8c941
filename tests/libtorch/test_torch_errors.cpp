// zeroshard_torch's errors (libtorch/shard.h, optimizer.h): each bad use is
// refused with a message naming what is wrong, never a crash or a silent
// wrong result.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/serialize.h>

#include "core/error.h"
#include "tests/libtorch/torch_test_models.h"
#include "tests/support/thrown.h"

namespace zeroshard::testing {
namespace {


// A model with a parameter of its own beside its submodule's.
struct RootParamNetImpl : ::torch::nn::Module {
  RootParamNetImpl() {
    fc = register_module("fc", ::torch::nn::Linear(3, 2));
    scale = register_parameter("scale", ::torch::ones({2}));
  }
  at::Tensor forward(const at::Tensor& x) { return fc(x) * scale; }
  ::torch::nn::Linear fc{nullptr};
  at::Tensor scale;
};

TEST_CASE("a parameter in no unit is named") {
  Engine engine(tied_net_config(0), world());
  const std::string what = required_error_message<ConfigError>(
      [&] { torch::shard(std::make_shared<RootParamNetImpl>(), engine, world()); }, "no error for a root parameter");
  CHECK(contains(what, "parameter \"scale\" in no unit"));
  CHECK(contains(what, "the units are \"fc\""));
}

TEST_CASE("stage 3 needs Unit wrappers; stages 0-2 take plain submodules") {
  ::torch::set_num_threads(1);
  auto make = [] {
    ::torch::manual_seed(3);
    return ::torch::nn::Sequential(::torch::nn::Linear(4, 5), ::torch::nn::Tanh(), ::torch::nn::Linear(5, 2));
  };
  {
    Engine engine(tied_net_config(3), world());
    const std::string what = required_error_message<ConfigError>([&] { torch::shard(make(), engine, world()); },
                                                                 "no error for plain units at stage 3");
    CHECK(contains(what, "no Unit wrapper"));
    CHECK(contains(what, "\"0.weight\""));
  }
  for (int stage = 0; stage <= 2; ++stage) {
    Engine engine(tied_net_config(stage), world());
    auto sharded = torch::shard(make(), engine, world());
    CHECK(sharded.unit_names() == std::vector<std::string>{"0", "2"});
    torch::Optimizer opt(sharded);
    ::torch::manual_seed(5);
    const at::Tensor x = ::torch::randn({6, 4}), y = ::torch::randn({6, 2});
    float first = 0, last = 0;
    for (int step = 0; step < 5; ++step) {
      at::Tensor loss = (sharded(x) - y).pow(2).mean();
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item<float>();
    }
    CHECK(last < first);
  }
}

TEST_CASE("an engine with units already declared is refused") {
  Engine engine(tied_net_config(0), world());
  engine.add_unit("mine");
  CHECK(contains(required_error_message<ConfigError>([&] { torch::shard(make_tied_net(), engine, world()); },
                                                     "no error for a used engine"),
                 "already has units"));
}

TEST_CASE("a module changed after shard() is named at the next forward") {
  ::torch::set_num_threads(1);
  struct Change {
    const char* what;
    void (*apply)(TiedNetImpl&);
    bool reads_values;  // to() reads the parameters: at stage 3 libtorch refuses first
  };
  const Change changes[] = {
      {"parameter \"shared.weight\" has new data",
       [](TiedNetImpl& m) {
         m.shared->weight.set_data(::torch::zeros({7, 7}));
       },
       false},
      {"parameter \"wte.weight\" has new data", [](TiedNetImpl& m) { m.to(::torch::kDouble); }, true},
      {"parameter \"extra\" was added", [](TiedNetImpl& m) { m.register_parameter("extra", ::torch::ones({1})); },
       false},
      {"parameter \"norm.bias\" has requires_grad false", [](TiedNetImpl& m) { m.norm->bias.set_requires_grad(false); },
       false},
  };
  for (const Change& c : changes) {
    CAPTURE(c.what);
    for (int stage : {0, 3}) {
      if (stage == 3 && c.reads_values) continue;
      TiedNetRun run(tied_net_config(stage));
      run.train_step(0);
      c.apply(*run.model);
      const std::string what =
          required_error_message<InvariantError>([&] { run.loss(1); }, "no error for a changed module");
      CHECK(contains(what, "the module changed after shard()"));
      CHECK(contains(what, c.what));
    }
  }
}

TEST_CASE("a backward without a forward, or a second one, is refused") {
  ::torch::set_num_threads(1);
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    TiedNetRun run(tied_net_config(stage));
    auto& [model, engine, sharded, opt] = run;
    // The graph of a forward before the last step().
    at::Tensor stale = run.loss(0);
    opt.step();
    CHECK(contains(required_error_message<InvariantError>([&] { stale.backward(); }, "stale graph accepted"),
                   "backward without a forward"));
    // A second backward through one forward.
    at::Tensor loss = run.loss(1);
    loss.backward({}, /*retain_graph=*/true);
    CHECK(contains(required_error_message<InvariantError>([&] { loss.backward(); }, "second backward accepted"),
                   "a second backward in one micro-batch"));
    CHECK(contains(required_error_message<InvariantError>([&] { opt.zero_grad(); }, "zero_grad accepted"),
                   "zero_grad() after a backward"));
    opt.step();
    // The module still trains after the refusals.
    run.train_step(2);
    CHECK(sharded.stats().in_place_accumulations == 2 * 7);
  }
}

TEST_CASE("stage 3 parameters are empty outside their unit's forward") {
  TiedNetRun run(tied_net_config(3));
  const auto& model = run.model;
  // As FSDP leaves a resharded parameter: shape [0], no memory to read.
  CHECK(model->shared->weight.numel() == 0);
  const std::string what = required_error_message<c10::Error>(
      [&] {
        (void)::torch::nn::functional::linear(::torch::ones({2, 7}), model->shared->weight);
      },
      "a resharded parameter was used");
  CHECK_FALSE(what.empty());
  // Inside the unit's forward it has its shape and values again.
  at::Tensor out = model->shared(::torch::ones({2, 7}));
  CHECK(out.sizes() == c10::IntArrayRef({2, 7}));
  CHECK(model->shared->weight.numel() == 0);
}

TEST_CASE("a create_graph backward, which adds out of place, is refused") {
  TiedNetRun run(tied_net_config(0));
  at::Tensor loss = run.loss(0);
  const std::string what = required_error_message<InvariantError>(
      [&] { loss.backward({}, /*retain_graph=*/true, /*create_graph=*/true); }, "create_graph accepted");
  CHECK(contains(what, "was not added in place"));
}

TEST_CASE("the optimizer refuses changed groups and torch's archives") {
  TiedNetRun run(tied_net_config(0));
  torch::Optimizer& opt = run.opt;
  REQUIRE(opt.param_groups().size() == 2);  // the defaults and "no_decay"
  CHECK(opt.param_groups()[0].options().get_lr() == doctest::Approx(0.02));
  opt.param_groups()[0].options().set_lr(0.5);
  CHECK(contains(required_error_message<InvariantError>([&] { opt.step(); }, "a changed lr accepted"),
                 "lr was set to 0.5"));
  opt.param_groups()[0].options().set_lr(0.02);
  ::torch::serialize::OutputArchive archive;
  CHECK(
      contains(required_error_message<InvariantError>([&] { opt.save(archive); }, "save accepted"), "save_checkpoint"));
}

TEST_CASE("the optimizer's param_groups show the schedule's learning rate") {
  ::torch::set_num_threads(1);
  EngineConfig c = tied_net_config(0);
  c.scheduler.kind = LrScheduleKind::warmup_lr;
  c.scheduler.warmup_min_lr = {0.0};
  c.scheduler.warmup_max_lr = {0.02};
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.warmup_type = "linear";
  TiedNetRun run(c);
  double previous = -1;
  for (int step = 0; step < 4; ++step) {
    for (const auto& group : run.opt.param_groups()) CHECK(group.options().get_lr() == run.engine.current_lr(0));
    CHECK(run.opt.param_groups()[0].options().get_lr() > previous);  // warming up
    previous = run.opt.param_groups()[0].options().get_lr();
    run.train_step(step);
  }
}

}  // namespace
}  // namespace zeroshard::testing
