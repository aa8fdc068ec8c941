// GradNorm: the global gradient norm and Inf/NaN count of an accumulation
// boundary, in one path, with explicit inputs (the layout, the compute
// device's DeviceOps and buffer pool, the tensor-parallel group, the
// communicator the sums run on, and a GradSource where this rank's
// gradients are):
//   1. tied parameters (tie(): a tied embedding and LM head on the first
//      and last pipeline stage) get their gradient, the part this rank
//      updates, summed over the tie's group in the compute dtype, so the
//      copies take the same update;
//   2. with tensor parallelism (tp > 1) the gradients of replicated
//      parameters (declare(): TensorParallel::replicated()) are averaged
//      over the tp group: one fp32 all-reduce of every replicated run of
//      this rank's shard, cast back as sum * (1 / tp) rounded once;
//   3. this rank's share: the sum of squares and Inf/NaN count of the part
//      of its gradient shard each element of the whole model counts in
//      once (split slices on every tp rank, replicated ones on tp rank 0,
//      a tied copy on its group's rank 0 only; Inf/NaN everywhere); without
//      tp or ties, unit by unit over the shard as GradSource::shard_stats
//      gives it (wherever the shard lives, nvme included);
//   4. the ordered exchange: an all-gather of every rank's two sums added
//      in rank order on every rank (the same bits whatever the backend's
//      all-reduce algorithm, [Note: rank-ordered reduction] in
//      comm/ordered_reduce.h), or one all-reduce with reduction_order
//      "native"; with them go the rank's first unit with an Inf/NaN
//      element and its reduce-order hash and data-parallel group ([Note:
//      reduce order check] in runtime/engine/reduce_order.h), in the
//      same all-gather (with "native", a second all-gather of those).
// [Note: engine on a mesh] in runtime/engine/engine.h says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/ordered_reduce.h"
#include "core/dtype.h"
#include "core/tracer.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine/engine.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// Where GradNorm reads this rank's reduced gradients (the Engine's
/// ArrayStore; a test's buffers).
class GradSource {
 public:
  virtual ~GradSource() = default;
  /// Unit u's gradient buffer that the optimizer reads, in the compute
  /// device's memory, in GradNormOptions::dtype: the full flat buffer (padded
  /// elements) at stages 0/1, the shard at stages 2/3. Asked only with
  /// tensor parallelism or ties, whose gradients are never on nvme.
  virtual std::byte* grads(UnitId u) = 0;
  /// Sum of squares and Inf/NaN count of unit u's gradient shard (at
  /// stages 0/1 the rank's window of the full buffer), wherever it lives.
  virtual kernels::GradStats shard_stats(UnitId u) = 0;
};

/// GradNorm's settings. Plain value.
struct GradNormOptions {
  int stage = 0;            ///< ZeRO stage (which buffer grads(u) is)
  int rank = 0;             ///< this rank in the data-parallel group
  DType dtype = DType::f32; ///< dtype of the stored gradients (the accumulator's, EngineConfig::accumulation_dtype())
  ReductionOrder order = ReductionOrder::rank;
  bool optimizer_on_nvme = false;  ///< offload_optimizer on nvme: ties are refused
  /// This rank's data-parallel group among the ranks of the norm's
  /// communicator (ranks of one group reduce the same units): on a mesh
  /// pp_rank x tp + tp_rank, else 0.
  int dp_group = 0;
  std::string source;       ///< the configuration's name, for errors
};

/// The two sums over every rank. Plain value.
struct GradTotals {
  double sum_of_squares = 0;  ///< of the stored gradients, before any scaling
  double nonfinite = 0;       ///< Inf/NaN elements (the cuda ops count 1 per buffer)
  /// The lowest rank of the norm's communicator with an Inf/NaN element
  /// and its first such unit (in unit order, its own layout's id); -1, -1
  /// when none.
  int first_nonfinite_rank = -1;
  UnitId first_nonfinite_unit = -1;
  /// Every rank's reduce-order hash equals its data-parallel group's first
  /// rank's ([Note: reduce order check]).
  bool orders_agree = true;
};

/// See the file comment. Thread safety: one thread (the engine's).
class GradNorm {
 public:
  /// `layout` (finalized before check_*() and compute()), `ops` and `pool`
  /// (the compute device's), `tp` (null: no tensor parallelism) and `norm`
  /// (the sums' communicator: the world on a mesh) must outlive this object.
  GradNorm(const FlatLayout& layout, DeviceOps& ops, BufferPool& pool, Communicator* tp, Communicator& norm,
           GradNormOptions options);

  /// Records parameter p's tensor-parallel layout.
  void declare(ParamId p, TensorParallel tp);
  /// p's declared layout (replicated when undeclared).
  TensorParallel parallel(ParamId p) const;
  /// Ties p to its copies on the other ranks of `group` (which must outlive
  /// this object), in the order every rank of the group ties them.
  void tie(ParamId p, Communicator& group);
  /// Number of tie() calls so far.
  std::size_t tie_count() const { return ties_.size(); }

  /// With tp > 1: throws ConfigError (the same on every rank, which declare
  /// the same model) naming every parameter without a declaration, then
  /// AgreedConfigError when the tp ranks' parameter sizes differ.
  /// Collective over the tp group when tp > 1; nothing otherwise.
  void check_declarations();
  /// Every tie's copies laid out alike (element count, offset, the unit's
  /// padded size equal to group rank 0's), and no tie with
  /// optimizer_on_nvme: throws AgreedConfigError on every rank of `norm`
  /// otherwise. Collective over every tie's group in tie order, then over
  /// `norm` (ranks without ties take part).
  void check_ties();

  /// Steps 1-4 of the file comment: sums tied gradients, averages the
  /// replicated ones over tp, and returns the sums over every rank of
  /// `norm`, the first Inf/NaN unit and whether the `order_hash` of every
  /// rank agrees within its data-parallel group, the same on every rank.
  /// Writes the gradients it sums or averages (in `grads`). Spans
  /// "tied_gradients" and "norm_exchange" on `tracer` (may be null).
  /// Collective over the tie groups, tp and norm.
  GradTotals compute(GradSource& grads, Tracer* tracer, std::uint64_t order_hash = 0);

 private:
  struct Tie {
    ParamId param = -1;
    Communicator* group = nullptr;
  };
  // A run of one parameter inside this rank's gradient buffer.
  struct GradRun {
    std::byte* data;
    std::size_t n;
    bool replicated;
    bool in_shard;   // counted in the norm (inside this rank's shard window)
    bool tied_copy;  // a tied parameter on a rank other than its group's rank 0
    UnitId unit;
  };
  int tp_size() const { return tp_ ? tp_->world_size() : 1; }
  int tp_rank() const { return tp_ ? tp_->rank() : 0; }
  void param_runs(GradSource& grads, ParamId id, bool all_at_stage0, bool tied_copy, std::vector<GradRun>& out) const;
  void reduce_ties(GradSource& grads);
  kernels::GradStats mesh_stats(GradSource& grads, UnitId& first_nonfinite);

  const FlatLayout& layout_;
  DeviceOps& ops_;
  BufferPool& pool_;
  Communicator* tp_;
  Communicator& norm_;
  GradNormOptions o_;
  std::vector<std::optional<TensorParallel>> declared_;  // by ParamId; missing = not declared
  std::vector<Tie> ties_;                                 // in tie() order
};

}  // namespace zeroshard
