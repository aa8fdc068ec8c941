// The state behind a ShardedModule: the module's parameters as engine
// parameters, their storages, and the hooks that drive the Engine from
// libtorch's forward and autograd. Used by libtorch/shard.cpp,
// optimizer.cpp and state_dict.cpp; not for loops.
//
// [Note: unit hooks]
// What runs, per micro-batch, in the order libtorch calls it:
//   forward of a Unit wrapper (UnitBase::ForwardCall): Engine::unshard of
//     the unit and of the units whose parameters its submodules share (a
//     tied weight, a plain unit nested inside), storages pointed at the
//     gathered buffers, the module's forward, Engine::reshard of each and
//     (stage 3) storages pointed at nothing. The call's outputs get a
//     tensor hook.
//   an output's hook, when its gradient arrives (before the backward of
//     the ops inside the unit runs): unshard the same units again and
//     re-point their storages; the tensors autograd saved in the forward
//     read the gathered values through those storages. Once per forward
//     call, however many outputs it has.
//   AccumulateGrad's pre-hook of each trainable parameter: point its
//     .grad() at Engine::grad_data (stage 2/3: leases the unit's buffer on
//     the first call of the micro-batch, zeroed). AccumulateGrad then adds
//     in place (variable_grad += new_grad: libtorch's rule for a defined
//     grad outside create_graph).
//   AccumulateGrad's post-hook: checks that .grad() is still the engine's
//     buffer (else throws: a create_graph backward adds out of place);
//     when the unit's last trainable parameter has arrived,
//     Engine::reduce_gradients(u) (stage 2/3: its reduce-scatter starts
//     now, under the rest of the backward; .grad() of its parameters is
//     then undefined), and the unit's backward unshards are resharded.
//   the end of the backward (a callback queued on libtorch's autograd
//     engine): units with some but not all gradients reduce now (in unit
//     order), every backward unshard left is resharded. Units with no
//     gradient in this backward reduce in Engine::step(), as the engine
//     does for any unit the loop did not reduce.
// AccumulateGrad runs once per backward for a leaf, after every use's
// contribution has been summed, so a module used twice in one forward and
// a weight tied between two units reduce once, after their last use; the
// hooks live on the accumulator nodes, which the state keeps alive (the
// tensor holds them weakly) and checks at each forward.
// Checks: a backward must follow a forward of this micro-batch (a
// backward through a graph built before the last step(), or a second
// backward without a new forward, throws); at most one backward per
// micro-batch (the engine takes each micro-batch's gradients at the first
// one's end); the module must be as shard() left it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <torch/nn/module.h>

#include "comm/communicator.h"
#include "libtorch/shard.h"
#include "runtime/engine/engine.h"

namespace torch::autograd {
struct Node;
}

namespace zeroshard::torch {

/// One forward call of a unit, which its backward refers to. Plain value.
struct ForwardRecord {
  UnitId unit = -1;             ///< index into ShardState::units()
  std::int64_t micro_step = 0;  ///< Engine::micro_steps() at the forward
  bool backward_started = false;
};

/// A module parameter as an engine parameter.
struct ParamEntry {
  std::vector<std::string> names;  ///< names[0] is the engine's; more when tied
  ParamId id = -1;
  UnitId unit = -1;  ///< index into ShardState::units() (not the engine's id)
  GroupId group = 0;
  at::Tensor param;                                      ///< the module's own tensor
  std::vector<std::int64_t> shape;                       ///< its shape (stage 3 resharded: it shows [0])
  c10::intrusive_ptr<c10::StorageImpl> data;             ///< its storage (engine param buffer)
  c10::intrusive_ptr<c10::StorageImpl> grad_data;        ///< its .grad()'s storage (engine grad buffer)
  at::Tensor grad;                                       ///< the .grad() tensor over grad_data
  std::shared_ptr<::torch::autograd::Node> accumulator;  ///< AccumulateGrad; null if frozen
  bool trainable = false;
  const void* last_data = nullptr;  ///< the engine buffer `data` last pointed at
  const void* last_grad = nullptr;  ///< the engine buffer `grad_data` last pointed at
};

/// A unit: a submodule and the parameters it owns.
struct UnitEntry {
  std::string name;
  UnitId id = -1;                   ///< the engine's unit (-1: owns no parameter, not declared)
  std::string path;                 ///< dotted path in the module ("" = root)
  std::vector<std::size_t> params;  ///< indices into ShardState::params
  std::vector<UnitId> also;         ///< units its forward gathers too (shared weights, nested plain units)
  std::size_t trainable = 0;
  bool wrapped = false;  ///< a Unit wrapper (gathers itself in forward)
  // This micro-batch:
  std::size_t arrived = 0;  ///< trainable parameters whose gradient has arrived
  bool reduced = false;
  int forward_holds = 0;   ///< unshards of running forward calls
  int backward_holds = 0;  ///< unshards made by backward hooks, not yet resharded
};

/// See the file comment. Thread safety: as the Engine.
class ShardState : public std::enable_shared_from_this<ShardState> {
 public:
  ShardState(std::shared_ptr<::torch::nn::Module> module, Engine& engine, Communicator& comm,
             const ShardPolicy& policy);
  ~ShardState();
  /// Declares, finalizes, sets the values and installs the hooks
  /// (ShardedModule's constructor). Separate from the constructor because
  /// the hooks hold weak pointers to this.
  void init(const ShardPolicy& policy);

  // ---- the hooks, in [Note: unit hooks]'s order; each throws
  // InvariantError naming the misuse it finds ----
  /// ShardedModule::begin_forward.
  void begin_forward();
  /// A Unit wrapper's forward starts (u: index into units()): unshards u
  /// and its `also` units; returns the call's record (null without grad mode).
  std::shared_ptr<ForwardRecord> enter_unit(UnitId u);
  /// ... and ends: reshards them (an error marks the state unusable).
  void exit_unit(UnitId u) noexcept;
  /// The first gradient reached an output of forward call `call`.
  void pre_backward(ForwardRecord& call);
  /// AccumulateGrad of parameter p (index into params()) is about to run / has run.
  void before_accumulate(std::size_t p);
  void after_accumulate(std::size_t p);
  /// The autograd engine finished the backward.
  void end_backward();

  /// Throws InvariantError naming what changed when the module is not as
  /// shard() left it (all parameters by name, or only those of unit u).
  void check_module() const;
  void check_unit(UnitId u) const;
  /// Throws InvariantError unless no forward or backward is running.
  void check_idle(const char* what) const;
  /// Points every resident parameter's storage at the engine's buffer
  /// (stages 0-2: always; stage 3: units unsharded now).
  void point_resident();

  // ---- what shard() built ----
  Engine& engine() const { return engine_; }
  Communicator& comm() const { return comm_; }
  ::torch::nn::Module& module() const { return *module_; }
  const std::vector<ParamEntry>& params() const { return params_; }
  const std::vector<UnitEntry>& units() const { return units_; }
  /// Index into params() of parameter `name` (any of its names); throws
  /// InvariantError for an unknown name.
  std::size_t index_of(const std::string& name) const;
  const ShardStats& stats() const { return stats_; }
  /// libtorch's dtype of the engine's compute dtype.
  c10::ScalarType scalar_type() const { return scalar_type_; }
  /// Micro-batch state reset when the engine has moved on (step() ran).
  void sync_micro_batch();
  /// Whether a backward ran (or runs) in this micro-batch.
  bool gradients_pending();

 private:
  void unshard(UnitId u, bool backward);
  void release(UnitId u, bool backward);
  void point_params(UnitId u);
  void detach_params(UnitId u);
  void reduce(UnitId u, bool in_backward);
  void begin_backward();
  void fail_if_broken() const;

  std::shared_ptr<::torch::nn::Module> module_;
  Engine& engine_;
  Communicator& comm_;
  c10::ScalarType scalar_type_;
  std::vector<ParamEntry> params_;
  std::vector<UnitEntry> units_;
  std::unordered_map<std::string, std::size_t> by_name_;
  std::vector<std::string> module_names_;  ///< named_parameters() keys at shard()
  ShardStats stats_;
  std::int64_t micro_step_ = 0;  ///< the micro-batch the per-micro-batch state is of
  bool forward_since_backward_ = false;
  std::int64_t forward_micro_step_ = -1;
  bool in_backward_ = false;
  bool backward_done_ = false;  ///< a backward ended in this micro-batch
  std::string broken_;          ///< why the state is unusable ("" = usable)
};

}  // namespace zeroshard::torch
