// zeroshard::torch::shard: a libtorch module (torch::nn::Module) whose
// parameters, gradients and optimizer state the Engine holds and shards at
// every ZeRO stage, with autograd adding straight into the engine's
// gradient buffers. The C++ counterpart of PyTorch's FSDP / DDP wrappers,
// which libtorch lacks.
//
// Use (examples/libtorch/main.cpp; the lines a loop changes are in
// README.md, "A libtorch training loop"):
//   auto model = std::make_shared<NetImpl>();          // float32, the same on every rank
//   zeroshard::Engine engine(config, comm);
//   auto sharded = zeroshard::torch::shard(model, engine, comm);   // declares, finalizes
//   zeroshard::torch::Optimizer opt(sharded);          // was torch::optim::AdamW
//   for each batch:
//     opt.zero_grad();
//     auto loss = torch::nll_loss(sharded(x), y);      // was model->forward(x)
//     loss.backward();                                 // gradients land in engine.grad(p)
//     opt.step();                                      // engine.step(): reduce, clip, update
//
// [Note: libtorch parameters over the engine]
// shard() declares one engine unit per submodule the policy names and one
// engine parameter per module parameter (a parameter shared by two
// submodules, a tied weight, is declared once, by the first unit that
// holds it), finalizes the engine, broadcasts rank 0's values and sets
// them. Each module parameter then keeps its tensor (the same TensorImpl,
// requires_grad, its autograd identity) but its storage becomes one that
// zeroshard owns, whose data pointer it sets to the engine's buffer
// (Engine::param_data, in the compute dtype: torch::kFloat32, kBFloat16 or
// kFloat16): at stages 0-2 the resident full buffer; at stage 3 the
// gathered buffer while the unit is unsharded; otherwise null, with the
// parameter showing shape [0], as FSDP leaves a resharded parameter (read
// outside its unit's forward and backward it is an empty tensor, or a shape
// error in an op, never freed memory). Because tensors and autograd's
// saved tensors hold the storage, not the pointer, re-pointing the storage
// at each unshard is what keeps the tensors autograd saved in the forward
// valid in the backward (FSDP re-points its flat parameter's storage the
// same way). Gradients likewise: each parameter's .grad() is a tensor on a
// zeroshard storage pointed at Engine::grad_data just before autograd
// accumulates into it, so AccumulateGrad adds in place (grad += new, no
// copy) into the engine's buffer: [Note: unit hooks] in
// libtorch/shard_state.h.
//
// Buffers (BatchNorm's running statistics) stay the module's own tensors,
// per rank, not synchronised (as DDP with broadcast_buffers=False).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "comm/communicator.h"
#include "libtorch/unit.h"
#include "runtime/engine/engine.h"

namespace zeroshard::torch {

/// Which submodules become units and which parameters skip weight decay.
/// Plain value type; empty functions mean the defaults.
struct ShardPolicy {
  /// Whether the submodule at `name` (its dotted path from the root, as
  /// named_modules gives it; "" for the root) is a unit. A parameter
  /// belongs to the innermost unit that holds it. Default
  /// (default_is_unit): every Unit wrapper, and every direct child of the
  /// root that holds parameters and has no Unit wrapper inside.
  std::function<bool(const std::string& name, const ::torch::nn::Module& module)> is_unit;
  /// Whether parameter `name` goes to the engine's "no_decay" group
  /// (weight_decay 0). Default (is_bias_or_norm): biases and tensors of at
  /// most one dimension, as users group AdamW's parameters.
  std::function<bool(const std::string& name, const at::Tensor& param)> no_weight_decay;
};

/// The default no_weight_decay: the parameter's last name component is
/// "bias", or it has at most one dimension (LayerNorm / BatchNorm
/// weights). Pure.
bool is_bias_or_norm(const std::string& name, const at::Tensor& param);

/// Counters of what the hooks did since shard(), for tests and logs.
/// Plain value type.
struct ShardStats {
  /// Gradient accumulations (AccumulateGrad calls) checked to have added
  /// in place into the engine's buffer; one that did not throws instead.
  std::int64_t in_place_accumulations = 0;
  /// reduce_gradients calls made in backward as a unit's last gradient
  /// arrived (the rest reduce at the end of backward or in step()).
  std::int64_t reductions_in_backward = 0;
  /// Engine::unshard calls made by forward calls / by backward hooks.
  std::int64_t forward_unshards = 0;
  std::int64_t backward_unshards = 0;
  /// Times a parameter's storage, or its .grad()'s, was re-pointed at an
  /// engine buffer at another address than the last (stage 3's gathered
  /// buffers and stages 2/3's gradient buffers are leased from a pool).
  std::int64_t param_buffers_moved = 0;
  std::int64_t grad_buffers_moved = 0;
};

class ShardState;  // libtorch/shard_state.h

/// A module sharded over an Engine ([Note: libtorch parameters over the
/// engine]). Holds the sharding state; the module, the engine and the
/// communicator must outlive it. Destroying it leaves every parameter
/// empty (shape [0], no memory) rather than pointing at the engine's.
/// Move-only. Thread safety: as the Engine (one
/// thread drives both; libtorch's CPU autograd runs the hooks on the thread
/// that calls backward).
class ShardedModule {
 public:
  /// Declares `module`'s units and parameters on `engine` (before its
  /// finalize(), with no unit declared yet), finalizes it and sets the
  /// parameters to rank 0's values (broadcast over `comm`, the engine's
  /// communicator). Collective over comm. Throws ConfigError naming the
  /// problem for: a parameter in no unit (with the units listed), a
  /// parameter that is not float32, an engine on a device other than the
  /// cpu or on a tensor-parallel mesh, a comm whose ranks differ from the
  /// engine's, and at stage 3 a unit that is not a Unit wrapper and is
  /// inside none; and what Engine::finalize() throws.
  ShardedModule(std::shared_ptr<::torch::nn::Module> module, Engine& engine, Communicator& comm,
                ShardPolicy policy = {});
  ~ShardedModule();
  ShardedModule(ShardedModule&&) noexcept;
  ShardedModule& operator=(ShardedModule&&) noexcept;
  ShardedModule(const ShardedModule&) = delete;
  ShardedModule& operator=(const ShardedModule&) = delete;

  /// What Sharded<M>::forward does before the module's forward: checks
  /// that the module is as shard() left it (InvariantError naming the
  /// parameter and the change: a parameter added, removed, replaced,
  /// given new data by set_data / to(), or its requires_grad flipped) and
  /// that no backward is running, and marks a forward of this micro-batch
  /// (the backward that follows checks for it).
  void begin_forward();

  /// The engine and the module shard() was given.
  Engine& engine() const;
  ::torch::nn::Module& module() const;
  /// Unit names in engine order (the submodules' dotted paths; "root" for
  /// the root module).
  std::vector<std::string> unit_names() const;
  /// The engine's id of parameter `name` (any of a tied parameter's
  /// names). Throws InvariantError for an unknown name.
  ParamId param_id(const std::string& name) const;
  /// Every parameter's names (the first is the engine's), in engine order.
  std::vector<std::vector<std::string>> parameter_names() const;
  /// Counters since shard().
  ShardStats stats() const;

  /// Engine::save_checkpoint (collective; docs/checkpoint-format.md).
  /// Throws InvariantError during a forward or backward, and what the
  /// engine throws.
  std::string save_checkpoint(const std::string& save_dir, const nlohmann::json& client_state, int keep_last = 0,
                              const std::string& tag = "");
  /// Engine::load_checkpoint, then the module's parameters show the loaded
  /// values. Collective. Errors as save_checkpoint.
  nlohmann::json load_checkpoint(const std::string& save_dir, const std::string& tag = "");

  /// The sharding state (for Optimizer and export; libtorch/shard_state.h).
  ShardState& state() const;
  std::shared_ptr<ShardState> shared_state() const { return s_; }

 private:
  std::shared_ptr<ShardState> s_;
};

/// ShardedModule over a module of type M whose forward it calls.
template <class M>
class Sharded : public ShardedModule {
 public:
  Sharded(std::shared_ptr<M> module, Engine& engine, Communicator& comm, ShardPolicy policy = {})
      : ShardedModule(module, engine, comm, std::move(policy)), module_(std::move(module)) {}

  /// begin_forward(), then M::forward(args...).
  template <class... Args>
  auto forward(Args&&... args) {
    begin_forward();
    return module_->forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  M* operator->() const { return module_.get(); }
  const std::shared_ptr<M>& ptr() const { return module_; }

 private:
  std::shared_ptr<M> module_;
};

/// Shards `module` over `engine` (ShardedModule's constructor).
template <class M>
Sharded<M> shard(std::shared_ptr<M> module, Engine& engine, Communicator& comm, ShardPolicy policy = {}) {
  return Sharded<M>(std::move(module), engine, comm, std::move(policy));
}
/// The same for a module holder (torch::nn::Sequential, TORCH_MODULE types).
template <class M>
Sharded<M> shard(const ::torch::nn::ModuleHolder<M>& module, Engine& engine, Communicator& comm,
                 ShardPolicy policy = {}) {
  return Sharded<M>(module.ptr(), engine, comm, std::move(policy));
}

}  // namespace zeroshard::torch
