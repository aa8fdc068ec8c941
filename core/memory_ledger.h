// The memory ledger: bytes held per rank by category and tier, current and
// peak, with padding itemised. The ZeRO paper's model-state accounting
// (Rajbhandari et al. 2020, section 3.1 / figure 1) is what it reproduces:
// parameters, gradients, master weights and optimizer states.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace zeroshard {

/// What the bytes hold.
enum class MemCategory : int {
  parameters,        ///< model parameters in the compute dtype (full or shard)
  gradients,         ///< the loop's gradient buffers in the compute dtype (full or shard); in fp32 training also the accumulator
  grad_accumulator,  ///< mixed precision: the fp32 sum of the micro-batches' gradients (full at stages 0/1, shard at 2/3)
  master_weights,    ///< fp32 master copy (mixed precision only)
  optimizer_states,  ///< exp_avg, exp_avg_sq, momentum buffers
  unsharded,         ///< transient buffers: full units of stage 3 / stage 2 (all-gather, reduce-scatter), offload staging
  persistent,        ///< full buffers of stage 3's persistent units (stage3_param_persistence_threshold), kept gathered
  secondary,         ///< ZeRO++ hpZ's secondary parameter shards (zero_hpz_partition_size)
  residual,          ///< ZeRO++ qgZ's error-feedback residuals (zeroshard.zeropp.error_feedback)
  checkpoint_staging,  ///< async checkpoints' snapshot in host memory (Engine::save_checkpoint_async)
  activations,       ///< the loop's checkpointed activations (Engine::activations(), runtime/activation/)
  count
};

/// Where the bytes live: the memory compute runs on (the CPU's RAM in a CPU
/// build, the GPU's in a CUDA build), host memory used as an offload tier,
/// or files on NVMe.
enum class MemTier : int { device, host, nvme, count };

std::string_view mem_category_name(MemCategory c);
std::string_view mem_tier_name(MemTier t);

/// Per-rank byte counts. Thread safety: every member takes an internal
/// mutex (the engine's thread and a deferred optimizer step's thread,
/// runtime/update/deferred_step.h, lease buffers at once); a copy is a
/// snapshot.
class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger& other);
  MemoryLedger& operator=(const MemoryLedger& other);

  /// Records an allocation of `bytes`, of which `padding_bytes` are padding
  /// (already included in `bytes`).
  void add(MemCategory c, MemTier t, std::uint64_t bytes, std::uint64_t padding_bytes = 0);
  /// Records a release matching an earlier add.
  void remove(MemCategory c, MemTier t, std::uint64_t bytes, std::uint64_t padding_bytes = 0);

  /// Bytes held now in a category (all tiers, padding included).
  std::uint64_t current(MemCategory c) const;
  std::uint64_t current(MemCategory c, MemTier t) const;
  /// Highest value current(c) has had.
  std::uint64_t peak(MemCategory c) const;
  /// Padding bytes held now in a category (included in current(c)).
  std::uint64_t padding(MemCategory c) const;
  /// Sum over parameters, gradients, the gradient accumulator, master
  /// weights and optimizer states (the ZeRO paper's "model states"),
  /// padding included.
  std::uint64_t model_state_bytes() const;
  /// Padding part of model_state_bytes().
  std::uint64_t model_state_padding() const;
  /// Highest total over all categories at any moment.
  std::uint64_t peak_total() const;
  /// Highest total of one tier over all categories at any moment (what a
  /// tier must have room for; the planner's budget check).
  std::uint64_t peak_total(MemTier t) const;
  /// Current total over all categories.
  std::uint64_t current_total() const;
  /// Current total of one tier over all categories.
  std::uint64_t current_total(MemTier t) const;

  /// A table: one row per category (current, of which padding, peak) and
  /// per tier.
  std::string table(std::string_view title) const;

 private:
  static constexpr int kC = static_cast<int>(MemCategory::count);
  static constexpr int kT = static_cast<int>(MemTier::count);
  struct Counts {
    std::array<std::array<std::uint64_t, kT>, kC> cur{};
    std::array<std::array<std::uint64_t, kT>, kC> pad{};
    std::array<std::uint64_t, kC> peak{};
    std::uint64_t total = 0;
    std::uint64_t peak_total = 0;
    std::array<std::uint64_t, kT> tier_total{};
    std::array<std::uint64_t, kT> peak_tier{};
    std::uint64_t current(int c) const;
    std::uint64_t padding(int c) const;
  };
  Counts snapshot() const;
  mutable std::mutex mutex_;
  Counts n_;  // guarded by mutex_
};

/// Human-readable byte count ("1.50 MiB").
std::string format_bytes(std::uint64_t bytes);

}  // namespace zeroshard
