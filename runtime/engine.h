// The Engine: ZeRO stages 0-3 over a Communicator, driven by a C++ training
// loop. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models" (SC 2020); the unshard/reshard vocabulary is
// FSDP2's (torch.distributed.fsdp.fully_shard).
//
// Use:
//   Engine engine(config, comm);
//   UnitId fc1 = engine.add_unit("fc1");
//   ParamId w = engine.add_parameter(fc1, "fc1.weight", {1024, 784});
//   GroupId no_decay = engine.add_param_group("no_decay", {.weight_decay = 0.0f});
//   ParamId b = engine.add_parameter(fc1, "fc1.bias", {1024}, no_decay);
//   engine.finalize();
//   engine.set_parameter(w, initial_values);      // same values on every rank
//   for each micro-batch:
//     forward:  engine.unshard(u); read engine.param(p); engine.reshard(u);
//     backward (reverse): engine.unshard(u); add into engine.grad(p);
//               engine.reduce_gradients(u); engine.reshard(u);
//     engine.step();   // updates at every gradient_accumulation_steps-th call
//
// [Note: gradient semantics]
// engine.grad(p) is an accumulation buffer, as torch's param.grad: code adds
// the gradient of its micro-batch's *mean* loss into it (two uses of a tied
// parameter both add). The engine averages over ranks and micro-batches, so
// the update uses the gradient of the mean loss over the global batch. At
// stages 0/1 the buffer is the full gradient and persists until the step; at
// stages 2/3 it exists from the first grad() call of a micro-batch until that
// unit's reduce_gradients(), which reduce-scatters it into the rank's
// gradient shard. step() reduces any unit not yet reduced, in unit order.
//
// [Note: SPMD]
// Every rank must make the same sequence of unshard / reduce_gradients /
// step calls (they issue collectives). Only data differs between ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/config.h"
#include "runtime/flat_layout.h"
#include "runtime/memory_ledger.h"

namespace zeroshard {

/// Per-group overrides of the optimizer's lr and weight_decay.
struct ParamGroupOptions {
  std::optional<float> lr;
  std::optional<float> weight_decay;
};

/// What one step() call did.
struct StepResult {
  bool applied = false;         ///< true at an accumulation boundary: the optimizer ran
  double grad_norm = 0.0;       ///< global L2 norm of the averaged gradient (before clipping); 0 if !applied
  double clip_coef = 1.0;       ///< factor applied to the gradient (1 = not clipped)
  std::int64_t optimizer_step = 0;  ///< optimizer steps taken so far
};

class EngineState;  // implementation

/// ZeRO engine over one data-parallel communicator.
/// Thread safety: one thread drives an Engine. Every method that issues a
/// collective says so; those must be called in the same order on all ranks.
class Engine {
 public:
  /// Validates config (ConfigError) against comm's world size. comm must
  /// outlive the engine.
  Engine(const EngineConfig& config, Communicator& comm);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- model declaration (before finalize) ----

  /// New unit (a group of parameters gathered, reduced and freed together).
  UnitId add_unit(std::string name);
  /// New parameter group; group 0 ("default") uses the optimizer's values.
  GroupId add_param_group(std::string name, ParamGroupOptions options);
  /// Declares a parameter of `shape` (elements, row-major; zeros allowed)
  /// stored in `unit`'s flat buffer. Names must be unique. A parameter used
  /// by several layers (tied) is declared once; code that uses it from
  /// another unit unshards its owning unit too.
  ParamId add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape,
                        GroupId group = 0);
  /// Lays out flat buffers for the world size, allocates (parameters zero).
  /// No collective.
  void finalize();

  // ---- values ----

  /// Sets parameter p from its full values (numel floats, the same on every
  /// rank); each rank keeps what its stage stores. No collective.
  /// Throws InvariantError if values.size() != numel.
  void set_parameter(ParamId p, std::span<const float> values);
  /// Full values of parameter p on every rank. Collective at stage 3.
  std::vector<float> gather_parameter(ParamId p);

  // ---- the training loop ----

  /// Makes unit u's full parameters available (stage 3: all-gathers them,
  /// having prefetched them if the recorded order predicts u; starts the
  /// prefetch of the next unit). Counted: each unshard needs one reshard.
  /// Collective at stage 3.
  void unshard(UnitId u);
  /// Releases one unshard of u; at stage 3 the full buffer is freed when the
  /// count drops to zero. No collective.
  void reshard(UnitId u);
  /// Full values of parameter p (numel floats). Valid while its unit is
  /// unsharded (always at stages 0-2). Throws InvariantError otherwise.
  std::span<float> param(ParamId p);
  /// Gradient accumulation buffer of p (numel floats, see [Note: gradient
  /// semantics]). At stage 3 its unit need not be unsharded.
  std::span<float> grad(ParamId p);
  /// Declares unit u's gradients of this micro-batch complete; starts their
  /// reduction (stages 2/3: reduce-scatter now; stages 0/1: all-reduce at the
  /// accumulation boundary). Collective.
  void reduce_gradients(UnitId u);
  /// Ends a micro-batch. At every gradient_accumulation_steps-th call:
  /// finishes the reductions, computes the global gradient norm (one
  /// all-reduce), clips to gradient_clipping, runs the optimizer on the
  /// local shards, all-gathers the updated shards (stages 1/2), and clears
  /// gradients. Collective.
  StepResult step();

  // ---- introspection ----

  int stage() const;
  int rank() const;
  int world_size() const;
  const EngineConfig& config() const;
  const FlatLayout& layout() const;
  const MemoryLedger& ledger() const;
  std::int64_t micro_steps() const;
  std::int64_t optimizer_steps() const;
  /// Learning rate of a group (after any override).
  float group_lr(GroupId g) const;
  /// Optimizer state array `index` (see optimizer_state_name) over this
  /// rank's shard of unit u: layout().unit(u).shard elements, rank r's slice
  /// of the flat buffer (at stage 0, which holds the full state, the same
  /// slice of it). For tests and checkpoints.
  std::span<const float> optimizer_state(UnitId u, int index) const;
  /// Parameter elements of this rank's shard of unit u (shard elements;
  /// the values the optimizer updates).
  std::span<const float> param_shard(UnitId u) const;

 private:
  std::unique_ptr<EngineState> s_;
};

}  // namespace zeroshard
