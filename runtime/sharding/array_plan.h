// Array plan: the sizing decisions of the ArrayStore as pure functions of a
// finalized FlatLayout and the store's options: which arrays a unit has on
// this rank, their element counts, dtypes, padding and offload tiers, its
// sub-groups, and the bytes each swap folder must hold. The ArrayStore
// (runtime/sharding/array_store.h) allocates exactly what plan_arrays() lists and
// records each entry in its MemoryLedger; the memory estimator
// (runtime/plan/memory_estimate.h) records the same list without allocating, so
// the two cannot drift. No allocation, no I/O, no collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/memory_ledger.h"
#include "optimizer/state_format.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/config/offload_config.h"

namespace zeroshard {

/// One sub-group: elements [begin, end) of a unit's shard.
struct SubGroup {
  std::size_t begin = 0;
  std::size_t end = 0;
};

/// A unit's array, as the store names it. `grad` is the gradient the
/// reductions, the norm and the optimizer read: the accumulator, in the
/// accumulation dtype (full at stages 0/1, the shard at 2/3). `micro_grad`
/// exists at stages 0/1 only, when the accumulator is wider than the
/// compute dtype: the loop's gradient of one micro-batch (full, compute
/// dtype), folded into `grad` at the end of each micro-batch ([Note:
/// gradient accumulator] in runtime/engine/engine.h).
enum class ArrayKind { params, master, state, grad, micro_grad };
struct ArrayRef {
  ArrayKind kind = ArrayKind::params;
  /// ArrayKind::state: the unit's state array index (UnitStates; for fp32
  /// and bf16 the optimizer state index, for 8-bit 2i codes and 2i + 1
  /// absmax of state i: [Note: state arrays] in optimizer/state_format.h).
  int state = 0;
};

/// The element types of a unit's arrays besides its optimizer states.
struct ArrayDtypes {
  DType compute = DType::f32;     ///< parameters and ArrayKind::micro_grad
  DType grad_accum = DType::f32;  ///< ArrayKind::grad, the gradient accumulator
};

/// What the array sizes depend on besides the layout (a subset of
/// ArrayStoreOptions). Plain value type.
struct ArrayPlanOptions {
  int stage = 0;                  ///< ZeRO stage 0-3
  int rank = 0;                   ///< this rank in the data-parallel group (padding of its shard)
  DType dtype = DType::f32;       ///< compute dtype (parameters, the loop's gradients)
  /// The gradient accumulator's dtype (ArrayKind::grad): f32 or `dtype`
  /// (EngineConfig::accumulation_dtype()).
  DType grad_accum_dtype = DType::f32;
  int state_count = 0;            ///< optimizer states per element (optimizer_state_count)
  StateFormat states;             ///< how they are stored (fp32, 8-bit per unit, bf16)
  /// optimizer.type Muon: states from 1 on are packed to the AdamW
  /// parameters' elements ([Note: packed states]); `muon_params` names
  /// Muon's default-group matrices (is_muon_parameter).
  bool muon = false;
  std::vector<std::string> muon_params;
  /// A parameter-server worker ([Note: parameter-server layout] in
  /// runtime/ps/param_server.h): its master weights and optimizer states
  /// are on its server, so its units have no master or state array; their
  /// UnitStates still say how the server stores them (checkpoints).
  bool remote_optimizer = false;
  OffloadConfig offload;          ///< tiers, sub_group_size, offload_param.max_in_cpu / buffer_size
  std::string source = "config";  ///< the configuration's name, for messages
  bool mixed() const { return dtype != DType::f32; }
  /// True when the units have an ArrayKind::micro_grad array (stages 0/1
  /// with an accumulator wider than the compute dtype).
  bool micro_grad() const { return stage < 2 && grad_accum_dtype != dtype; }
  /// The arrays' dtypes (compute and accumulator).
  ArrayDtypes dtypes() const { return ArrayDtypes{.compute = dtype, .grad_accum = grad_accum_dtype}; }
};

/// Elements of array a of a unit on any rank: parameters are the padded
/// full flat buffer at stages 0-2, the shard at stage 3; gradients full at
/// stages 0/1, shard at 2/3 (micro_grad: full, stages 0/1 only); master
/// weights and states full at stage 0,
/// shard at 1-3 (a state array as `states` sizes it: 8-bit absmax one
/// float per block of each shard window; a packed one the kept elements of
/// every window at stage 0, of window `rank` at 1-3).
std::size_t array_numel(int stage, int rank, const UnitInfo& unit, const UnitStates& states, ArrayRef a);
/// Element type of array a: the compute dtype for parameters and the
/// micro-batch gradient, the accumulation dtype for the gradient, fp32 for
/// master weights, the unit's state arrays' own (UnitStates::array_dtype)
/// for optimizer states.
DType array_dtype(ArrayDtypes dtypes, const UnitStates& states, ArrayRef a);
/// Elements [first, last) of array a's part for shard window `window` that
/// hold update elements [begin, end) of that window (a sub-group; begin a
/// multiple of the 8-bit block for absmax). Pure.
void array_range(const UnitStates& states, ArrayRef a, std::size_t window, std::size_t begin, std::size_t end,
                 std::size_t& first, std::size_t& last);
/// The ledger category array a is accounted under: the gradient is
/// MemCategory::grad_accumulator when it is wider than the compute dtype,
/// else (and micro_grad) MemCategory::gradients.
MemCategory array_category(ArrayDtypes dtypes, ArrayRef a);

/// Tier of array a at `stage` for a unit whose parameter shard is on
/// `param_tier` and whose optimizer arrays are on `optimizer_tier`:
/// parameters on param_tier at stage 3 (else the device), gradients
/// (micro_grad too) on the device at stages 0/1, the rest on optimizer_tier.
MemTier array_tier(int stage, MemTier param_tier, MemTier optimizer_tier, ArrayRef a);

/// One unit's tiers and sub-groups.
struct UnitTiers {
  MemTier param_tier = MemTier::device;      ///< stage 3 parameter shard
  MemTier optimizer_tier = MemTier::device;  ///< master, states, gradient shard (stages 2/3)
  std::vector<SubGroup> subgroups;           ///< shard ranges of at most sub_group_elements()
  UnitStates states;                         ///< the unit's optimizer state arrays

  /// array_tier() of this unit.
  MemTier tier(int stage, ArrayRef a) const { return array_tier(stage, param_tier, optimizer_tier, a); }
  /// Bytes of array a that sub-group sg of shard window `window` covers
  /// (array_range x dtype size).
  std::uint64_t subgroup_bytes(ArrayDtypes dtypes, ArrayRef a, std::size_t window, const SubGroup& sg) const;
};

/// The arrays of a unit in the store's order: params, grad, micro_grad
/// (ArrayPlanOptions::micro_grad() only), master (mixed precision only),
/// then the state arrays 0 .. states.arrays() - 1 (neither master nor
/// states with remote_optimizer).
std::vector<ArrayRef> unit_arrays(const ArrayPlanOptions& options, const UnitStates& states);

/// One resident (or swap-file) array of one unit, as the ledger records it.
struct ArrayAllocation {
  UnitId unit = -1;
  ArrayRef array;
  MemCategory category = MemCategory::parameters;
  MemTier tier = MemTier::device;
  DType dtype = DType::f32;
  std::size_t numel = 0;         ///< elements (padding included)
  std::uint64_t bytes = 0;       ///< numel x dtype size
  std::uint64_t padding = 0;     ///< bytes of bytes that are padding
};

/// Every array of every unit on one rank and the swap space it needs.
struct ArrayPlan {
  std::vector<UnitTiers> units;               ///< per unit, in layout order
  /// Per unit: unit_arrays(); units in layout order. What ArrayStore allocates, in that order.
  std::vector<ArrayAllocation> arrays;
  std::uint64_t nvme_optimizer_bytes = 0;     ///< bytes of the optimizer swap files
  std::uint64_t nvme_param_bytes = 0;         ///< bytes of the parameter swap files
  /// Room a write in flight needs beside the files it replaces (the
  /// free-space check adds it): every staging set's sub-group of every
  /// array and one unit's parameters. 0 without nvme.
  std::uint64_t nvme_in_flight_bytes = 0;
  bool offloaded = false;                     ///< some array on a host or nvme tier
};

/// The plan of rank options.rank for a layout finalized for its world
/// size. Each unit's states: unit_states(options.states, state_count,
/// unit numel) (8-bit only for units of at least min_8bit_size elements);
/// sub-group boundaries are multiples of 4096 elements and so of every
/// 8-bit block size, so an absmax block never straddles sub-groups. Tiers: stage 0 and empty shards stay on the device; at stages 1-3
/// the optimizer tier follows offload_optimizer.device; at stage 3 the
/// parameter tier follows offload_param.device, except that with "nvme"
/// units whose shard fits the remaining offload_param.max_in_cpu elements
/// (in unit order) go to the host. Throws ConfigError (prefixed by
/// options.source) when a stage-3 nvme parameter shard exceeds
/// offload_param.buffer_size; InvariantError when the layout is not
/// finalized or the rank is outside it. Pure; thread safe.
ArrayPlan plan_arrays(const FlatLayout& layout, const ArrayPlanOptions& options);

}  // namespace zeroshard
