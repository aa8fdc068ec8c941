// ShardedModule and its state: declaring a libtorch module on the Engine,
// the parameter and gradient storages, and the hooks of [Note: unit hooks]
// (libtorch/shard_state.h).
#include "libtorch/shard_state.h"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include <ATen/core/grad_mode.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"
#include "libtorch/tensor_storage.h"

namespace zeroshard::torch {

namespace {

// AccumulateGrad's hooks of one parameter ([Note: unit hooks]); weak, so a
// graph that outlives the ShardedModule finds nothing to call.
class AccumulatePreHook final : public ::torch::autograd::FunctionPreHook {
 public:
  AccumulatePreHook(std::weak_ptr<ShardState> s, std::size_t p) : s_(std::move(s)), p_(p) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& grads) override {
    if (auto s = s_.lock()) s->before_accumulate(p_);
    return grads;
  }

 private:
  std::weak_ptr<ShardState> s_;
  std::size_t p_;
};

class AccumulatePostHook final : public ::torch::autograd::FunctionPostHook {
 public:
  AccumulatePostHook(std::weak_ptr<ShardState> s, std::size_t p) : s_(std::move(s)), p_(p) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list&) override {
    if (auto s = s_.lock()) s->after_accumulate(p_);
    return outputs;
  }

 private:
  std::weak_ptr<ShardState> s_;
  std::size_t p_;
};

// The module path of parameter `name` ("blocks.0.attn.weight" -> "blocks.0.attn").
std::string module_path(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

// Whether module path `inner` is `outer` or inside it.
bool within(const std::string& inner, const std::string& outer) {
  return outer.empty() || inner == outer ||
         (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 && inner[outer.size()] == '.');
}

bool has_unit_wrapper(const ::torch::nn::Module& m) {
  for (const auto& item : m.named_modules("", true)) {
    if (dynamic_cast<const UnitBase*>(item.value().get()) != nullptr) return true;
  }
  return false;
}

std::string list_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + ("\"" + n + "\"");
  return out.empty() ? "none" : out;
}

}  // namespace

bool is_bias_or_norm(const std::string& name, const at::Tensor& param) {
  const auto dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return last == "bias" || param.dim() <= 1;
}

// ---- construction ----

ShardState::ShardState(std::shared_ptr<::torch::nn::Module> module, Engine& engine, Communicator& comm,
                       const ShardPolicy& /*policy*/)
    : module_(std::move(module)), engine_(engine), comm_(comm), scalar_type_(scalar_type_of(engine.compute_dtype())) {}

void ShardState::init(const ShardPolicy& policy) {
  if (!module_) throw ConfigError("zeroshard::torch::shard: the module is null");
  if (engine_.device() != ComputeDevice::cpu) {
    throw ConfigError(
        "zeroshard::torch::shard: the engine runs on the cuda device; libtorch modules are sharded "
        "over a cpu engine (Engine(config, comm))");
  }
  if (engine_.tp_size() > 1 || engine_.pp_size() > 1) {
    throw ConfigError(
        fmt::format("zeroshard::torch::shard: the engine is on a mesh with tp {} and pp {}; libtorch "
                    "modules are sharded over data parallelism only",
                    engine_.tp_size(), engine_.pp_size()));
  }
  if (comm_.rank() != engine_.rank() || comm_.world_size() != engine_.world_size()) {
    throw ConfigError(
        fmt::format("zeroshard::torch::shard: the communicator is rank {} of {}, the engine rank {} of "
                    "{}; pass the engine's own communicator",
                    comm_.rank(), comm_.world_size(), engine_.rank(), engine_.world_size()));
  }
  if (!engine_.layout().units().empty()) {
    throw ConfigError(
        "zeroshard::torch::shard: the engine already has units; shard() declares the whole model on a "
        "new engine");
  }

  // Units: the policy's modules, each module object once (first name wins).
  const auto is_unit = policy.is_unit ? policy.is_unit : [](const std::string& name, const ::torch::nn::Module& m) {
    if (dynamic_cast<const UnitBase*>(&m) != nullptr) return true;
    return !name.empty() && name.find('.') == std::string::npos && !m.named_parameters(true).is_empty() &&
           !has_unit_wrapper(m);
  };
  std::set<const ::torch::nn::Module*> seen;
  std::vector<std::shared_ptr<::torch::nn::Module>> unit_modules;
  for (const auto& item : module_->named_modules("", true)) {
    const ::torch::nn::Module* m = item.value().get();
    if (!seen.insert(m).second || !is_unit(item.key(), *m)) continue;
    UnitEntry u;
    u.path = item.key();
    u.name = u.path.empty() ? "root" : u.path;
    u.wrapped = dynamic_cast<const UnitBase*>(m) != nullptr;
    if (u.wrapped && !dynamic_cast<const UnitBase*>(m)->state_.expired()) {
      throw ConfigError(
          fmt::format("zeroshard::torch::shard: unit \"{}\" is already sharded by another "
                      "ShardedModule",
                      u.name));
    }
    units_.push_back(std::move(u));
    unit_modules.push_back(item.value());
  }
  // The innermost unit (or wrapped unit) holding a module path; npos: none.
  auto innermost = [&](const std::string& path, bool wrapped_only) {
    std::size_t best = std::string::npos;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      if ((wrapped_only && !units_[u].wrapped) || !within(path, units_[u].path)) continue;
      if (best == std::string::npos || units_[u].path.size() >= units_[best].path.size()) best = u;
    }
    return best;
  };

  // Parameters: each tensor once, owned by the innermost unit of its first name.
  std::unordered_map<const c10::TensorImpl*, std::size_t> by_impl;
  std::vector<std::string> unowned;
  std::vector<std::set<std::size_t>> also(units_.size());
  std::vector<std::string> no_gatherer;
  for (const auto& item : module_->named_parameters(true)) {
    const std::string& name = item.key();
    const at::Tensor& t = item.value();
    module_names_.push_back(name);
    const std::string path = module_path(name);
    std::size_t p = 0;
    if (auto it = by_impl.find(t.unsafeGetTensorImpl()); it != by_impl.end()) {
      p = it->second;
      params_[p].names.push_back(name);
    } else {
      const std::size_t u = innermost(path, false);
      if (u == std::string::npos) {
        unowned.push_back(name);
        continue;
      }
      if (t.scalar_type() != c10::ScalarType::Float) {
        throw ConfigError(
            fmt::format("zeroshard::torch::shard: parameter \"{}\" is {}; build the module in float32 "
                        "(the engine's compute dtype, {}, decides its tensors' dtype)",
                        name, c10::toString(t.scalar_type()), dtype_name(engine_.compute_dtype())));
      }
      ParamEntry e;
      e.names.push_back(name);
      e.unit = static_cast<UnitId>(u);
      e.param = t;
      e.shape = t.sizes().vec();
      e.trainable = t.requires_grad();
      p = params_.size();
      by_impl.emplace(t.unsafeGetTensorImpl(), p);
      params_.push_back(std::move(e));
      units_[u].params.push_back(p);
    }
    // The wrapped unit whose forward runs this use gathers the owner too.
    const std::size_t owner = static_cast<std::size_t>(params_[p].unit);
    const std::size_t runner = innermost(path, true);
    if (runner == std::string::npos) {
      if (!units_[owner].wrapped) no_gatherer.push_back(name);
    } else if (runner != owner) {
      also[runner].insert(owner);
    }
  }
  if (!unowned.empty()) {
    std::vector<std::string> unit_names;
    for (const auto& u : units_) unit_names.push_back(u.name);
    throw ConfigError(fmt::format(
        "zeroshard::torch::shard: parameter{} {} in no unit (the units are {}); register {} in a submodule, or "
        "give ShardPolicy::is_unit a module that holds {}",
        unowned.size() > 1 ? "s" : "", list_names(unowned), list_names(unit_names), unowned.size() > 1 ? "them" : "it",
        unowned.size() > 1 ? "them" : "it"));
  }
  if (engine_.stage() == 3 && !no_gatherer.empty()) {
    throw ConfigError(fmt::format(
        "zeroshard::torch::shard: at stage 3 a unit's parameters are gathered by its forward, which only a "
        "zeroshard::torch::Unit wrapper sees; parameter{} {} {} in a unit that is no Unit wrapper and has none "
        "around it: declare the submodule as Unit<...> (libtorch/unit.h)",
        no_gatherer.size() > 1 ? "s" : "", list_names(no_gatherer), no_gatherer.size() > 1 ? "are" : "is"));
  }
  for (std::size_t u = 0; u < units_.size(); ++u) units_[u].also.assign(also[u].begin(), also[u].end());

  // Engine declaration: units with parameters, in module order.
  const auto no_decay = policy.no_weight_decay ? policy.no_weight_decay : is_bias_or_norm;
  GroupId no_decay_group = -1;
  GroupId frozen_group = -1;
  for (auto& e : params_) {
    if (!e.trainable) {
      if (frozen_group < 0) frozen_group = engine_.add_param_group("frozen", {.lr = 0.0, .weight_decay = 0.0});
      e.group = frozen_group;
    } else if (no_decay(e.names[0], e.param)) {
      if (no_decay_group < 0) no_decay_group = engine_.add_param_group("no_decay", {.weight_decay = 0.0});
      e.group = no_decay_group;
    }
  }
  for (auto& u : units_) {
    if (u.params.empty()) continue;
    u.id = engine_.add_unit(u.name);
    for (std::size_t p : u.params) {
      ParamEntry& e = params_[p];
      e.id = engine_.add_parameter(u.id, e.names[0], e.shape, e.group);
      e.group = engine_.layout().param(e.id).group;  // Muon's muon_params move matrices to its group
      if (e.trainable) ++u.trainable;
    }
  }
  engine_.finalize();

  // Rank 0's values, then the module's tensors over zeroshard's storages.
  for (std::size_t p = 0; p < params_.size(); ++p) {
    ParamEntry& e = params_[p];
    const at::Tensor src = e.param.detach().contiguous();
    std::vector<float> values(static_cast<std::size_t>(src.numel()));
    std::copy_n(src.data_ptr<float>(), values.size(), values.data());
    comm_.broadcast(values.data(), values.size(), DType::f32, 0);
    engine_.set_parameter(e.id, values);
    for (const auto& name : e.names) by_name_.emplace(name, p);

    e.data = make_storage(e.param.numel(), scalar_type_);
    e.grad_data = make_storage(e.param.numel(), scalar_type_);
    e.grad = tensor_on(e.grad_data, scalar_type_, e.shape);
    {
      const at::NoGradGuard no_grad;
      e.param.set_data(tensor_on(e.data, scalar_type_, e.shape));
    }
    e.param.mutable_grad() = at::Tensor();
    if (e.trainable) {
      e.accumulator = ::torch::autograd::impl::grad_accumulator(e.param);
      e.accumulator->add_pre_hook(std::make_unique<AccumulatePreHook>(weak_from_this(), p));
      e.accumulator->add_post_hook(std::make_unique<AccumulatePostHook>(weak_from_this(), p));
    }
  }
  point_resident();
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (auto* w = dynamic_cast<UnitBase*>(unit_modules[u].get())) {
      w->state_ = weak_from_this();
      w->unit_ = static_cast<UnitId>(u);
    }
  }
  micro_step_ = engine_.micro_steps();
}

ShardState::~ShardState() {
  for (auto& e : params_) {
    if (e.data) {
      point_storage(*e.data, nullptr);
      e.param.unsafeGetTensorImpl()->set_sizes_contiguous({0});
    }
    if (e.grad_data) point_storage(*e.grad_data, nullptr);
    if (e.param.defined()) e.param.mutable_grad() = at::Tensor();
  }
}

// ---- checks ----

void ShardState::fail_if_broken() const {
  if (!broken_.empty()) {
    throw InvariantError("zeroshard::torch: the sharded module is unusable after an error in a backward (" + broken_ +
                         "); load a checkpoint into a new ShardedModule");
  }
}

namespace {

// What is wrong with parameter e, or "".
std::string change_of(const ParamEntry& e, c10::ScalarType type) {
  if (e.param.storage().unsafeGetStorageImpl() != e.data.get()) {
    return "has new data (set_data, to(), or a module reset)";
  }
  if (e.param.scalar_type() != type) return fmt::format("changed dtype to {}", c10::toString(e.param.scalar_type()));
  if (e.param.requires_grad() != e.trainable) {
    return fmt::format("has requires_grad {} (was {})", e.param.requires_grad(), e.trainable);
  }
  if (e.trainable && ::torch::autograd::impl::try_get_grad_accumulator(e.param).get() != e.accumulator.get()) {
    return "has a new gradient accumulator (its data was replaced)";
  }
  return {};
}

}  // namespace

void ShardState::check_unit(UnitId u) const {
  for (std::size_t p : units_[static_cast<std::size_t>(u)].params) {
    const std::string what = change_of(params_[p], scalar_type_);
    if (!what.empty()) {
      throw InvariantError(
          fmt::format("zeroshard::torch: the module changed after shard(): parameter \"{}\" {}; "
                      "change a module before sharding it",
                      params_[p].names[0], what));
    }
  }
}

void ShardState::check_module() const {
  const auto now = module_->named_parameters(true);
  std::size_t i = 0;
  for (const auto& item : now) {
    const std::string& name = item.key();
    std::string what;
    if (i >= module_names_.size() || module_names_[i] != name) {
      what = by_name_.count(name) ? "moved in the parameter order" : "was added";
    } else if (item.value().unsafeGetTensorImpl() != params_[by_name_.at(name)].param.unsafeGetTensorImpl()) {
      what = "was replaced by another tensor";
    } else {
      what = change_of(params_[by_name_.at(name)], scalar_type_);
    }
    if (!what.empty()) {
      throw InvariantError(
          fmt::format("zeroshard::torch: the module changed after shard(): parameter \"{}\" {}; "
                      "change a module before sharding it",
                      name, what));
    }
    ++i;
  }
  if (i < module_names_.size()) {
    throw InvariantError(
        fmt::format("zeroshard::torch: the module changed after shard(): parameter \"{}\" was "
                    "removed; change a module before sharding it",
                    module_names_[i]));
  }
}

void ShardState::check_idle(const char* what) const {
  fail_if_broken();
  bool holds = in_backward_;
  for (const auto& u : units_) holds = holds || u.forward_holds > 0 || u.backward_holds > 0;
  if (holds) throw InvariantError(fmt::format("zeroshard::torch: {} during a forward or backward", what));
}

std::size_t ShardState::index_of(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) throw InvariantError(fmt::format("zeroshard::torch: no parameter \"{}\"", name));
  return it->second;
}

// ---- storages ----

void ShardState::point_params(UnitId u) {
  for (std::size_t p : units_[static_cast<std::size_t>(u)].params) {
    ParamEntry& e = params_[p];
    void* data = engine_.param_data(e.id, engine_.compute_dtype());
    if (e.last_data != nullptr && e.last_data != data) ++stats_.param_buffers_moved;
    e.last_data = data;
    point_storage(*e.data, data);
    e.param.unsafeGetTensorImpl()->set_sizes_contiguous(e.shape);
  }
}

void ShardState::detach_params(UnitId u) {
  // No memory behind the storage (views autograd saved see it again at the
  // next unshard), and the parameter itself empty, as FSDP leaves a
  // resharded parameter: a read outside the unit is an empty tensor or a
  // shape error, never a read of freed memory.
  for (std::size_t p : units_[static_cast<std::size_t>(u)].params) {
    const ParamEntry& e = params_[p];
    point_storage(*e.data, nullptr);
    e.param.unsafeGetTensorImpl()->set_sizes_contiguous({0});
  }
}

void ShardState::point_resident() {
  for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
    const UnitEntry& ue = units_[static_cast<std::size_t>(u)];
    if (engine_.stage() < 3 || ue.forward_holds + ue.backward_holds > 0) {
      point_params(u);
    } else {
      detach_params(u);
    }
  }
}

void ShardState::sync_micro_batch() {
  if (engine_.micro_steps() == micro_step_) return;
  micro_step_ = engine_.micro_steps();
  for (auto& u : units_) {
    u.arrived = 0;
    u.reduced = false;
  }
  backward_done_ = false;
  forward_since_backward_ = false;
  // Stages 2/3: step() took the gradients (stages 0/1: it zeroed the
  // buffers .grad() shows).
  if (engine_.stage() >= 2) {
    for (auto& e : params_) {
      point_storage(*e.grad_data, nullptr);
      e.param.mutable_grad() = at::Tensor();
    }
  }
}

bool ShardState::gradients_pending() {
  sync_micro_batch();
  return backward_done_ || in_backward_;
}

// ---- forward ----

void ShardState::begin_forward() {
  fail_if_broken();
  sync_micro_batch();
  if (in_backward_) throw InvariantError("zeroshard::torch: a forward of the sharded module during its backward");
  check_module();
  if (engine_.stage() < 3) point_resident();
  forward_since_backward_ = true;
  forward_micro_step_ = micro_step_;
}

void ShardState::unshard(UnitId u, bool backward) {
  UnitEntry& ue = units_[static_cast<std::size_t>(u)];
  if (ue.params.empty()) return;
  try {
    engine_.unshard(ue.id);
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
  (backward ? ue.backward_holds : ue.forward_holds) += 1;
  (backward ? stats_.backward_unshards : stats_.forward_unshards) += 1;
  point_params(u);
}

void ShardState::release(UnitId u, bool backward) {
  UnitEntry& ue = units_[static_cast<std::size_t>(u)];
  if (ue.params.empty()) return;
  (backward ? ue.backward_holds : ue.forward_holds) -= 1;
  engine_.reshard(ue.id);
  if (engine_.stage() == 3 && ue.forward_holds + ue.backward_holds == 0) detach_params(u);
}

std::shared_ptr<ForwardRecord> ShardState::enter_unit(UnitId u) {
  fail_if_broken();
  sync_micro_batch();
  if (in_backward_) {
    throw InvariantError(
        fmt::format("zeroshard::torch: a forward of unit \"{}\" during the backward (activation "
                    "recomputation is not supported)",
                    units_[static_cast<std::size_t>(u)].name));
  }
  check_unit(u);
  forward_since_backward_ = true;
  forward_micro_step_ = micro_step_;
  unshard(u, false);
  for (UnitId a : units_[static_cast<std::size_t>(u)].also) unshard(a, false);
  if (!at::GradMode::is_enabled()) return nullptr;
  return std::make_shared<ForwardRecord>(ForwardRecord{.unit = u, .micro_step = micro_step_});
}

void ShardState::exit_unit(UnitId u) noexcept {
  try {
    const auto& also = units_[static_cast<std::size_t>(u)].also;
    for (auto it = also.rbegin(); it != also.rend(); ++it) release(*it, false);
    release(u, false);
  } catch (const std::exception& e) {
    broken_ = e.what();
  }
}

// ---- backward ----

void ShardState::begin_backward() {
  if (in_backward_) return;
  sync_micro_batch();
  if (backward_done_) {
    throw InvariantError(
        "zeroshard::torch: a second backward in one micro-batch; call step() (it ends the "
        "micro-batch: set gradient_accumulation_steps to accumulate) before the next backward, or "
        "add the losses and run one backward");
  }
  if (!forward_since_backward_ || forward_micro_step_ != micro_step_) {
    throw InvariantError(fmt::format(
        "zeroshard::torch: a backward without a forward of the sharded module in this micro-batch (micro-batch {}): "
        "its graph was built before the last step(), or the module's forward ran outside ShardedModule::forward "
        "and the Unit wrappers; run the forward again",
        micro_step_));
  }
  in_backward_ = true;
  std::weak_ptr<ShardState> weak = weak_from_this();
  ::torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto s = weak.lock()) s->end_backward();
  });
}

void ShardState::pre_backward(ForwardRecord& call) {
  fail_if_broken();
  begin_backward();
  if (call.micro_step != micro_step_) {
    throw InvariantError(
        fmt::format("zeroshard::torch: a backward through unit \"{}\"'s forward of micro-batch {} in "
                    "micro-batch {} (step() ran since); run the forward again",
                    units_[static_cast<std::size_t>(call.unit)].name, call.micro_step, micro_step_));
  }
  if (call.backward_started) return;
  call.backward_started = true;
  unshard(call.unit, true);
  for (UnitId a : units_[static_cast<std::size_t>(call.unit)].also) unshard(a, true);
}

void ShardState::before_accumulate(std::size_t p) {
  fail_if_broken();
  begin_backward();
  ParamEntry& e = params_[p];
  const UnitEntry& u = units_[static_cast<std::size_t>(e.unit)];
  if (u.reduced) {
    throw InvariantError(
        fmt::format("zeroshard::torch: a gradient of \"{}\" after unit \"{}\" was reduced in this "
                    "micro-batch",
                    e.names[0], u.name));
  }
  void* grad = engine_.grad_data(e.id, engine_.compute_dtype());
  if (e.last_grad != nullptr && e.last_grad != grad) ++stats_.grad_buffers_moved;
  e.last_grad = grad;
  point_storage(*e.grad_data, grad);
  if (!e.param.grad().defined() || e.param.grad().unsafeGetTensorImpl() != e.grad.unsafeGetTensorImpl()) {
    e.param.mutable_grad() = e.grad;
  }
}

void ShardState::after_accumulate(std::size_t p) {
  ParamEntry& e = params_[p];
  const at::Tensor& g = e.param.grad();
  if (!g.defined() || g.unsafeGetTensorImpl() != e.grad.unsafeGetTensorImpl() || g.data_ptr() != e.grad_data->data()) {
    broken_ = fmt::format("the gradient of \"{}\" was not added in place", e.names[0]);
    throw InvariantError(fmt::format(
        "zeroshard::torch: the gradient of \"{}\" was not added in place into the engine's buffer (a backward with "
        "create_graph=true, or .grad() replaced during the backward); the engine would miss it",
        e.names[0]));
  }
  ++stats_.in_place_accumulations;
  UnitEntry& u = units_[static_cast<std::size_t>(e.unit)];
  if (++u.arrived == u.trainable) {
    reduce(e.unit, true);
    while (u.backward_holds > 0) release(e.unit, true);
  }
}

void ShardState::reduce(UnitId u, bool in_backward) {
  UnitEntry& ue = units_[static_cast<std::size_t>(u)];
  if (ue.params.empty() || ue.reduced) return;
  try {
    engine_.reduce_gradients(ue.id);
  } catch (const std::exception& ex) {
    broken_ = ex.what();
    throw;
  }
  ue.reduced = true;
  if (in_backward) ++stats_.reductions_in_backward;
  if (engine_.stage() >= 2) {
    // The buffer is the reduce-scatter's now, and then the pool's.
    for (std::size_t p : ue.params) {
      point_storage(*params_[p].grad_data, nullptr);
      params_[p].param.mutable_grad() = at::Tensor();
    }
  }
}

void ShardState::end_backward() {
  try {
    for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
      if (units_[static_cast<std::size_t>(u)].arrived > 0) reduce(u, false);
    }
    for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
      while (units_[static_cast<std::size_t>(u)].backward_holds > 0) release(u, true);
    }
  } catch (const std::exception& ex) {
    broken_ = ex.what();
    throw;
  }
  in_backward_ = false;
  backward_done_ = true;
  forward_since_backward_ = false;
}

// ---- the Unit wrapper's forward call (libtorch/unit.h) ----

UnitBase::ForwardCall::ForwardCall(UnitBase& unit) : state_(unit.state_.lock()), unit_(unit.unit_) {
  if (state_) record_ = state_->enter_unit(unit_);
}

UnitBase::ForwardCall::~ForwardCall() {
  if (state_) state_->exit_unit(unit_);
}

void UnitBase::ForwardCall::hook_output(const at::Tensor& out) {
  if (!record_ || !out.defined() || !out.requires_grad()) return;
  std::weak_ptr<ShardState> weak = state_;
  std::shared_ptr<ForwardRecord> record = record_;
  out.register_hook([weak, record](const at::Tensor&) {
    if (auto s = weak.lock()) s->pre_backward(*record);
  });
}

// ---- ShardedModule ----

ShardedModule::ShardedModule(std::shared_ptr<::torch::nn::Module> module, Engine& engine, Communicator& comm,
                             ShardPolicy policy)
    : s_(std::make_shared<ShardState>(std::move(module), engine, comm, policy)) {
  s_->init(policy);
}

ShardedModule::~ShardedModule() = default;
ShardedModule::ShardedModule(ShardedModule&&) noexcept = default;
ShardedModule& ShardedModule::operator=(ShardedModule&&) noexcept = default;

void ShardedModule::begin_forward() { s_->begin_forward(); }
Engine& ShardedModule::engine() const { return s_->engine(); }
::torch::nn::Module& ShardedModule::module() const { return s_->module(); }
ShardState& ShardedModule::state() const { return *s_; }
ShardStats ShardedModule::stats() const { return s_->stats(); }

std::vector<std::string> ShardedModule::unit_names() const {
  std::vector<std::string> out;
  for (const auto& u : s_->units()) {
    if (!u.params.empty()) out.push_back(u.name);
  }
  return out;
}

ParamId ShardedModule::param_id(const std::string& name) const { return s_->params()[s_->index_of(name)].id; }

std::vector<std::vector<std::string>> ShardedModule::parameter_names() const {
  std::vector<const ParamEntry*> order;
  for (const auto& e : s_->params()) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const ParamEntry* a, const ParamEntry* b) { return a->id < b->id; });
  std::vector<std::vector<std::string>> out;
  for (const ParamEntry* e : order) out.push_back(e->names);
  return out;
}

std::string ShardedModule::save_checkpoint(const std::string& save_dir, const nlohmann::json& client_state,
                                           int keep_last, const std::string& tag) {
  s_->check_idle("save_checkpoint()");
  return s_->engine().save_checkpoint(save_dir, client_state, keep_last, tag);
}

nlohmann::json ShardedModule::load_checkpoint(const std::string& save_dir, const std::string& tag) {
  s_->check_idle("load_checkpoint()");
  nlohmann::json client = s_->engine().load_checkpoint(save_dir, tag);
  s_->sync_micro_batch();
  s_->point_resident();
  return client;
}

}  // namespace zeroshard::torch
