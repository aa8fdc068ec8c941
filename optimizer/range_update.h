// One optimizer update over a range of elements, in any state format
// (optimizer/state_format.h): the single entry the compute devices run
// (DeviceOps::update, runtime/sharding/device_ops.h). A range holds runs
// of parameter groups (each with its lr and weight_decay) and the state
// arrays as stored; fp32 runs go to optimizer_update_mixed, bf16 runs to
// optimizer_update_bf16 (optimizer/update_bf16.h), 8-bit ranges to
// optimizer_update_8bit (optimizer/update_8bit.h), which the runs cross
// at shared blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "optimizer/optimizer.h"
#include "optimizer/state_format.h"

namespace zeroshard {

/// Elements [begin, end) of an update range that one parameter group's
/// lr and weight_decay (doubles, as OptimizerHyper) apply to.
struct UpdateRun {
  std::size_t begin = 0;
  std::size_t end = 0;
  double lr = 0;
  double weight_decay = 0;
};

/// The optimizer state arrays of an update range as stored ([Note: state
/// arrays] in optimizer/state_format.h), each addressing the range's
/// element 0. Plain view; the arrays are not owned.
struct StateArrays {
  StateDtype dtype = StateDtype::fp32;
  /// UnitStates' order: fp32: optimizer_state_count arrays of n floats;
  /// bf16: exp_avg and exp_avg_sq, n bf16 bit patterns each; 8-bit:
  /// exp_avg codes (n bytes), exp_avg absmax (quant_block_count(n, block)
  /// floats, element 0's block first), exp_avg_sq codes, exp_avg_sq absmax.
  std::span<void* const> arrays;
  std::size_t block = 0;          ///< 8-bit: elements per absmax block (element 0 starts one)
  std::uint64_t first_index = 0;  ///< bf16: flat-buffer index of element 0 (stochastic rounding stream)
};

/// One update of n elements: `weights` (n fp32 values updated in place:
/// the parameters in fp32 training, the master weights in mixed
/// precision), `grads` (n elements of grad_dtype: f32, bf16, f16, times
/// grad_scale), `copy` (null, or n elements of copy_dtype bf16 / f16
/// receiving the updated weights rounded to nearest even), the states, and
/// the runs the update covers (sorted, disjoint, inside [0, n); elements
/// outside every run keep their values). Plain view.
struct RangeUpdate {
  float* weights = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::f32;
  void* copy = nullptr;
  DType copy_dtype = DType::bf16;
  StateArrays states;
  std::span<const UpdateRun> runs;
  std::size_t n = 0;
};

/// Runs the optimizer `hyper` at 1-based `step` over u on the host
/// (kernels/cpu): fp32 and bf16 states run by run (each run's lr and
/// weight_decay; bf16 with first_index + run.begin as its rounding
/// position), 8-bit states over the whole range with the runs
/// (optimizer_update_8bit). Bitwise the same as one call per run of the
/// format's entry point, for any thread count. Throws InvariantError for
/// step < 1, a state count the format does not hold (bf16 and 8-bit: Adam's
/// two states), a run outside the range, or an optimizer kind the format
/// does not implement (8-bit, bf16: Adam and AdamW only).
/// Thread safety: touches only the given arrays.
void optimizer_update_range(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const RangeUpdate& u);

}  // namespace zeroshard
