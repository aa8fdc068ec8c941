// ShardOptimizer: the optimizer over this rank's shards, in every state
// format and on every tier, with explicit inputs (the layout, the compute
// device's DeviceOps, the ArrayStore that holds the arrays, the options).
// It owns the parameter groups (lr, weight_decay, the schedule's value at
// each step) and each unit's parameter runs inside the buffers it updates
// (the whole unit at stage 0, with flat offsets; the rank's shard at
// stages 1-3).
//
// step(): every unit's arrays, in memory or sub-group by sub-group through
// the swap pipeline when any array is on nvme (runtime/sharding/
// array_store.h, offload/swap_pipeline.h), window by window (each rank's
// shard; the whole flat buffer's N windows at stage 0), each window part
// one DeviceOps::update (optimizer/range_update.h) with its parameter
// groups as runs, whatever the state format: 8-bit blocks then start at
// each window, so they are the same at every stage and tier ([Note: state
// arrays] in optimizer/state_format.h), and bf16 states pass each part's
// flat-buffer index, so stochastic rounding draws the same bits at every
// stage, tier and world size (optimizer/update_bf16.h). On a GPU engine
// with offload_optimizer the update runs on the host ([Note: optimizer on
// the host for a GPU engine] in shard_optimizer.cpp).
//
// The state windows: a unit's optimizer states one rank's window at a
// time, as stored (checkpoint save) and as fp32 (8-bit dequantized, bf16
// widened: Engine::optimizer_state, gather_optimizer_state, checkpoint
// load), and fp32 values into a window's state arrays (quantized for 8-bit,
// rounded to nearest even for bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tracer.h"
#include "optimizer/lr_schedule.h"
#include "optimizer/muon_params.h"
#include "optimizer/optimizer.h"
#include "runtime/config/offload_config.h"
#include "runtime/update/param_group.h"
#include "runtime/sharding/array_store.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// One parameter group's name and configured values.
struct ParamGroup {
  std::string name;
  double lr = 0;            ///< as OptimizerHyper::lr (a Python float's double)
  double weight_decay = 0;  ///< as OptimizerHyper::weight_decay
  /// Muon's group (optimizer.type "Muon": its matrices, updated by
  /// runtime/update/muon_step.h); the element-wise update skips it.
  bool muon = false;
};

/// ShardOptimizer's settings. Plain value.
struct ShardOptimizerOptions {
  int stage = 0;             ///< ZeRO stage (which buffers are full or shards)
  int rank = 0;              ///< this rank in the data-parallel group
  DType dtype = DType::f32;  ///< compute dtype; not f32: mixed precision (fp32 master weights)
  DType grad_dtype = DType::f32;  ///< the stored gradients' (the accumulator's: f32 or dtype)
  OptimizerHyper hyper;      ///< the rule and its defaults (group 0's lr and weight_decay)
  LrSchedule schedule;       ///< the learning rate at each step
  OffloadOptimizerConfig swap;  ///< buffer_count, pipeline_read / pipeline_write of the swap pipeline
};

/// What ShardOptimizer::step reports after a sub-group's update: unit u,
/// its sub-group g, and the updated parameters (compute dtype) of shard
/// elements [begin, end), valid during the call (a swap buffer or the
/// resident array).
using SubGroupUpdated =
    std::function<void(UnitId u, std::size_t g, const std::byte* params, std::size_t begin, std::size_t end)>;

/// See the file comment. Thread safety: one thread at a time (the engine's,
/// or a DeferredStep's while the engine waits for it).
class ShardOptimizer {
 public:
  /// Group 0 ("default") takes hyper's lr and weight_decay; with Muon
  /// group 1 ("muon") takes MuonHyper's. `layout` and `ops` (the compute
  /// device's) must outlive this object.
  ShardOptimizer(const FlatLayout& layout, DeviceOps& ops, ShardOptimizerOptions options);

  /// A new parameter group; unset values are the optimizer's. Throws
  /// ConfigError naming the group when lr or weight_decay is negative.
  GroupId add_group(std::string name, ParamGroupOptions options);
  const std::vector<ParamGroup>& groups() const { return groups_; }
  /// The "muon" group's id (optimizer.type "Muon"), else -1.
  GroupId muon_group() const { return o_.hyper.kind == OptimizerKind::muon ? kMuonGroup : -1; }
  /// Group g (InvariantError when unknown).
  const ParamGroup& group(GroupId g) const;
  /// Learning rate of group g at applied step k (0-based): the schedule's
  /// value, scaling the group's lr, times lr_scale(). Throws ConfigError
  /// when the schedule's per-group list does not match the groups.
  double lr_at(GroupId g, std::int64_t k) const;
  /// Multiplies every group's learning rate by `scale` (1: as configured)
  /// from the next step() on: a parameter server's staleness-aware lr
  /// (ParameterServerConfig::staleness_aware_lr). Throws InvariantError
  /// unless scale is finite and > 0.
  void set_lr_scale(double scale);
  double lr_scale() const { return lr_scale_; }

  /// After the layout is finalized: each unit's parameter runs (without
  /// the Muon group's), and the schedule checked against every group
  /// (ConfigError; not at step 1).
  void finalize();
  /// Spans of the swap pipeline's sub-groups (null: none). Not owned.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

  /// One optimizer update of every unit's arrays in `store` at 1-based
  /// `step`, gradients multiplied by grad_scale (the averaging and clip
  /// factor): fp32 training updates the parameters in place, mixed
  /// precision the fp32 master weights and writes the rounded compute copy.
  /// Throws what the swap pipeline (IoError) and the update throw; on a
  /// GPU engine no staging buffer goes back to the pool under a copy in
  /// flight. With arrays on nvme, `updated` (when set) is called after each
  /// sub-group's update, on the calling thread, in the pipeline's order
  /// (units in order, each unit's sub-groups in order), before the
  /// sub-group is written back.
  void step(ArrayStore& store, std::int64_t step, float grad_scale, const SubGroupUpdated& updated = {});

  /// The bytes of state array k of unit u (UnitStates: fp32 / bf16 values,
  /// 8-bit codes or absmax) that hold window w, a rank's shard, as a
  /// checkpoint stores them (a packed array expanded to the window, 0 at
  /// the elements it does not keep: [Note: packed states]): every
  /// window is on this rank at stage 0, only its own (w = rank) at stages
  /// 1-3 (InvariantError otherwise). Read from nvme when swapped.
  std::vector<std::byte> state_array_window(ArrayStore& store, UnitId u, int k, int w) const;
  /// Where window w of state array k of unit u lies in the stored array:
  /// {offset, size} in bytes (the packed layout aside: a packed array's
  /// window is expanded, see state_array_window). Windows as there.
  std::pair<std::size_t, std::size_t> state_window_range(const ArrayStore& store, UnitId u, int k, int w) const;
  /// state_array_window without the copy: `use` receives the window's
  /// bytes, valid during the call (the stored array itself where it is not
  /// packed; host memory or a swap buffer read from nvme).
  void with_state_array_window(ArrayStore& store, UnitId u, int k, int w,
                               const std::function<void(std::span<const std::byte>)>& use) const;
  /// Optimizer state `state` (optimizer_state_name's index) of unit u over
  /// window w as shard-many fp32 values: fp32 states as stored, bf16
  /// widened, 8-bit dequantized (dequantize_blockwise with their absmax:
  /// signed map for exp_avg, unsigned for exp_avg_sq). Windows as above.
  std::vector<float> state_window_f32(ArrayStore& store, UnitId u, int state, int w) const;
  /// The state arrays of window w of unit u holding `values` (shard-many
  /// fp32 values of each optimizer state, in state order), as stored: fp32
  /// as given (a packed array: window w's kept elements only), bf16
  /// rounded to nearest even, 8-bit quantized blockwise from the window's
  /// start: one byte buffer per state array.
  std::vector<std::vector<std::byte>> state_arrays_from_f32(const ArrayStore& store, UnitId u, int w,
                                                            const std::vector<std::vector<float>>& values) const;

 private:
  struct UpdateView;
  struct StagingView;
  bool mixed() const { return o_.dtype != DType::f32; }
  UpdateView resident_view(ArrayStore& store, UnitId u, std::size_t begin, std::size_t end) const;
  void update_view(const ArrayStore& store, DeviceOps& ops, UnitId u, std::int64_t step, float grad_scale,
                   const UpdateView& v) const;
  StagingView start_staging(ArrayStore& store, UnitId u, const UpdateView& v);
  void update_with_staging(ArrayStore& store, UnitId u, std::int64_t step, float grad_scale, StagingView& st);
  bool needs_staging(const ArrayStore& store, UnitId u) const;
  void step_in_memory(ArrayStore& store, std::int64_t step, float grad_scale);
  void step_swapped(ArrayStore& store, std::int64_t step, float grad_scale, const SubGroupUpdated& updated);

  const FlatLayout& layout_;
  DeviceOps& ops_;
  ShardOptimizerOptions o_;
  OptimizerHyper update_hyper_;  // what DeviceOps::update runs: element_wise_hyper(o_.hyper)
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ShardSegment>> segments_;  // per unit, made by finalize()
  std::vector<bool> leaves_muon_;  // per unit: some of its segments are Muon's (MuonStep updates them)
  Tracer* tracer_ = nullptr;
  double lr_scale_ = 1;  // set_lr_scale
};

}  // namespace zeroshard
