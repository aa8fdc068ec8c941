// How an optimizer's states are stored: fp32 (torch.optim's format), 8-bit
// blockwise (Dettmers et al. 2022, "8-bit Optimizers via Block-wise
// Quantization"; bitsandbytes' AdamW8bit / Adam8bit) or bf16 (DeepSpeed's
// cpu_adam offers bf16 states), and the arrays each format keeps per state.
//
// [Note: state arrays]
// An optimizer with k states (optimizer_state_count: exp_avg, exp_avg_sq
// for Adam) keeps, for a range of n elements,
//   - fp32: k arrays of n floats;
//   - bf16: k arrays of n bf16 values;
//   - 8-bit: 2k arrays: for state i, array 2i holds n one-byte codes (u8)
//     and array 2i + 1 one fp32 absmax per block of `block` elements
//     (kernels/cpu/adam/quant_map.h).
// Blocks are counted from the start of each shard window: an engine's
// state array covers one shard (stages 1-3) or every rank's shard end to end
// (stage 0, the full flat buffer), and block b of window w covers window
// elements [b * block, min(shard, (b + 1) * block)), so the blocks, and
// with them the updated values, are the same at every stage for a world
// size. A range that starts at a block boundary of its window maps to
// absmax entries [begin / block, ceil(end / block)) (state_array_range).
// The decision fp32 or 8-bit is per unit (a flat buffer of parameters, the
// "tensor" of bitsandbytes' min_8bit_size): units with fewer than
// min_8bit_size logical elements keep fp32 states, whatever the world size.
//
// [Note: packed states]
// Muon keeps one state (its momentum, in exp_avg) on its matrices and
// AdamW's two on the other parameters. So with Muon the fp32 states from
// `PackedStates::first_state` on (exp_avg_sq) are packed: each window's
// array holds only the elements of that window's kept runs (the AdamW
// parameters' elements), in order; window w's part starts after the kept
// elements of windows 0..w-1 (stage 0), and element x of window w is at
// index(w, x). Checkpoints store packed arrays expanded to the window (0 at
// the other elements), so the file format and resharding are unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace zeroshard {

/// Storage of the optimizer states.
enum class StateDtype : std::uint8_t {
  fp32,  ///< fp32 arrays (the default; torch.optim's)
  q8,    ///< 8-bit blockwise codes + fp32 absmax (Adam / AdamW only)
  bf16,  ///< bf16 arrays (round to nearest even or stochastic)
};

/// "fp32", "8bit" or "bf16": the names the checkpoint manifest and the
/// ledger printouts use. Pure.
std::string_view state_dtype_name(StateDtype d);

/// How bf16 states round the updated fp32 value.
enum class StateRounding : std::uint8_t { nearest, stochastic };

/// The configured state format (ds_config: optimizer.type "AdamW8bit" /
/// "Adam8bit" with optimizer.params.block_size and min_8bit_size, or
/// optimizer.params.state_dtype "bf16" with stochastic_rounding and seed;
/// docs/config.md). Plain value type.
struct StateFormat {
  StateDtype dtype = StateDtype::fp32;
  std::size_t block_size = 256;        ///< 8-bit: elements per absmax block (power of two, 64..4096)
  std::size_t min_8bit_size = 4096;    ///< 8-bit: units with fewer logical elements keep fp32 states
  StateRounding rounding = StateRounding::nearest;  ///< bf16 only
  std::uint64_t seed = 0;              ///< bf16 stochastic rounding only

  /// The storage of a unit of `unit_numel` logical elements: q8 only when
  /// unit_numel >= min_8bit_size (else fp32); fp32 and bf16 as configured.
  StateDtype for_unit(std::size_t unit_numel) const {
    return dtype == StateDtype::q8 && unit_numel < min_8bit_size ? StateDtype::fp32 : dtype;
  }
};

/// The runs of each window of a unit that keep the states from
/// first_state on ([Note: packed states]). Plain value.
struct PackedStates {
  int first_state = 1;
  /// Per window: sorted, disjoint [begin, end) element ranges, window-relative.
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> runs;
  /// Kept elements of window w.
  std::size_t count(std::size_t w) const;
  /// Kept elements of window w before window element x (its packed index).
  std::size_t index(std::size_t w, std::size_t x) const;
};

/// The states of one unit as stored: format and block size (8-bit only),
/// and how many optimizer states (optimizer_state_count). Plain value type.
struct UnitStates {
  StateDtype dtype = StateDtype::fp32;
  std::size_t block = 0;  ///< 8-bit: elements per block; 0 otherwise
  int count = 0;          ///< optimizer states (exp_avg, exp_avg_sq, ...)
  /// fp32 only: the states packed to some runs of each window (Muon), or null.
  std::shared_ptr<const PackedStates> packed;

  /// Array k is packed ([Note: packed states]).
  bool packs(int k) const { return packed != nullptr && k >= packed->first_state; }
  /// Elements of array k that hold window w of `window` elements.
  std::size_t window_numel(int k, std::size_t w, std::size_t window) const;
  /// Elements of array k before window w's part, when the array holds
  /// windows 0, 1, ... end to end (stage 0).
  std::size_t window_offset(int k, std::size_t w, std::size_t window) const;
  /// Elements [first, last) of array k's window-w part that hold window
  /// elements [begin, end): array_range, or the packed indices.
  void window_range(int k, std::size_t w, std::size_t begin, std::size_t end, std::size_t& first,
                    std::size_t& last) const;

  /// Arrays per range: count (fp32, bf16) or 2 * count (8-bit).
  int arrays() const { return dtype == StateDtype::q8 ? 2 * count : count; }
  /// The optimizer state array k holds (k / 2 for 8-bit).
  int state_of(int k) const { return dtype == StateDtype::q8 ? k / 2 : k; }
  /// 8-bit: array k holds absmax (odd k), not codes.
  bool is_absmax(int k) const { return dtype == StateDtype::q8 && k % 2 == 1; }
  /// Element type of array k: f32, bf16, or u8 codes / f32 absmax.
  DType array_dtype(int k) const;
  /// Elements of array k for `elements` state elements made of windows of
  /// `window` elements (the shard; elements is a multiple of it): elements,
  /// or for absmax (elements / window) * ceil(window / block). window 0:
  /// elements must be 0.
  std::size_t array_numel(int k, std::size_t elements, std::size_t window) const;
  /// Elements [first, last) of array k that hold window elements [begin,
  /// end) of a single window; for absmax begin must be a multiple of block
  /// (InvariantError otherwise). Pure.
  void array_range(int k, std::size_t begin, std::size_t end, std::size_t& first, std::size_t& last) const;
  /// Bytes of all state arrays for `elements` elements in windows of
  /// `window` (sum of array_numel x dtype size).
  std::uint64_t bytes(std::size_t elements, std::size_t window) const;
};

/// The unit states of a unit with `unit_numel` logical elements under
/// format f with `count` optimizer states. Pure.
UnitStates unit_states(const StateFormat& f, int count, std::size_t unit_numel);

/// Bytes of optimizer state per parameter element in format f for `count`
/// states, large units assumed (8-bit: count * (1 + 4 / block); fp32: 4 *
/// count; bf16: 2 * count). For estimates that do not size per unit (the
/// cost model's optimizer bytes per element). Pure.
double state_bytes_per_element(const StateFormat& f, int count);

}  // namespace zeroshard
