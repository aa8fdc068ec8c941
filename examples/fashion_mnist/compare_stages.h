// --compare-stages: the same training steps at ZeRO stages 0, 1, 2 and 3,
// each with a fresh Engine from the same initialisation, and one table of
// per-rank model-state bytes against the ZeRO paper's prediction.
//
// [Note: predicted model-state ratios]
// Rajbhandari et al. 2020, section 5 / figure 1, count model states per rank
// for Psi parameters and N ranks as (P + G + K) Psi bytes: P and G bytes per
// parameter for the parameters and gradients (2 + 2 in their mixed-precision
// setting) and K for the optimizer side (fp32 master weights and optimizer
// states: K = 12 for mixed-precision Adam). For fp32 training there are no
// master weights: P = G = 4 and K = 4 x (state arrays) = 8 for Adam/AdamW,
// 16 Psi in all. Relative to stage 0:
//   stage 1 (P_os):      (P + G + K / N)   / (P + G + K)
//   stage 2 (P_os+g):    (P + (G + K) / N) / (P + G + K)
//   stage 3 (P_os+g+p):  1 / N
// which for fp32 Adam is 1, (8 + 8/N)/16, (4 + 12/N)/16 and 1/N. The
// measured figures include the padding of each flat buffer to a multiple of
// N x 16 elements, so they sit slightly above the prediction.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "examples/fashion_mnist/idx_dataset.h"
#include "examples/fashion_mnist/report.h"
#include "examples/fashion_mnist/trainer.h"
#include "runtime/config/config.h"

namespace zeroshard::examples {

/// Bytes per parameter of each part of the model states (see [Note:
/// predicted model-state ratios]); the defaults are fp32 training with Adam.
struct StateBytesPerParam {
  double parameters = 4.0;  ///< P: compute dtype size
  double gradients = 4.0;   ///< G: compute dtype size
  double optimizer = 8.0;   ///< K: fp32 master weights (mixed precision) + 4 per state array

  /// The figures for an engine configuration (compute dtype, optimizer).
  static StateBytesPerParam of(const EngineConfig& config);
};

/// The paper's model-state bytes at `stage` relative to stage 0 for
/// `world_size` ranks (see [Note: predicted model-state ratios]). stage in
/// 0..3, world_size >= 1.
double predicted_model_state_ratio(int stage, int world_size, const StateBytesPerParam& bytes = {});

/// Figures of one stage of the comparison.
struct StageRun {
  int stage = 0;
  std::string offload = "none";  ///< offload tier of optimizer state and parameters: none, cpu or nvme
  TrainResult result;
  std::size_t num_parameters = 0;    ///< Psi
  std::vector<LedgerFigures> ranks;  ///< every rank's ledger after training
  int shown_rank = 0;  ///< rank the table shows: largest model states, then most padding
  double step_seconds = 0.0;  ///< rank 0's median step time after the stage's warm-up steps
};

/// Trains `spec` at stages 0-3 without offload, then at stage 3 with the
/// optimizer state and parameters on the cpu tier and on the nvme tier
/// (swap files under `nvme_path`; that row is left out when it is empty),
/// config's other settings unchanged, each from a fresh Engine, and returns
/// the figures. An untimed warm-up run comes first, and each stage's step
/// time leaves out its own first steps, so no stage absorbs the process's
/// or its engine's first-use costs. Collective.
std::vector<StageRun> compare_stages(const EngineConfig& config, Communicator& comm,
                                     const LabeledImages& train, const LabeledImages& test,
                                     const RunSpec& spec, const std::string& nvme_path = "");

/// The comparison table (one line per stage): per-rank model-state bytes by
/// category (parameters, gradients, optimizer states incl. master weights,
/// padding), total, ratio to stage 0, the paper's ratio, final loss, test
/// accuracy and median step time. `config` gives the bytes per parameter for the prediction.
std::string stage_table(const std::vector<StageRun>& runs, int world_size,
                        const EngineConfig& config);

/// The comparison as JSON (one object per stage).
nlohmann::json to_json(const std::vector<StageRun>& runs, int world_size,
                       const EngineConfig& config);

}  // namespace zeroshard::examples
