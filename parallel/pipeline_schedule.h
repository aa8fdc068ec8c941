// Pipeline schedules: for p stages and m micro-batches, the explicit list of
// actions each stage runs, in order.
//
// A stage s in [0, p) runs, for micro-batch i in [0, m):
//   recv_activation i   (s > 0)      the input of micro-batch i from stage s - 1
//   forward i                        its layers on that input
//   send_activation i   (s < p - 1)  the output to stage s + 1
//   recv_gradient i     (s < p - 1)  d loss / d output from stage s + 1
//   backward i                       its layers backwards
//   send_gradient i     (s > 0)      d loss / d input to stage s - 1
// The loss lives on the last stage: its forward ends in the loss and its
// backward starts from it.
//
// GPipe (Huang et al., NeurIPS 2019): every forward, then every backward.
// Each stage keeps the activations of all m micro-batches until their
// backward.
//
// 1F1B (PipeDream-Flush: Narayanan et al., ICML 2021, "Memory-efficient
// pipeline-parallel DNN training"; the non-interleaved schedule of
// Megatron-LM, Narayanan et al., SC 2021): stage s first runs
// w = min(p - s - 1, m) warm-up forwards, then alternates one forward and
// one backward (steady state, m - w times: forward w + k, backward k), then
// runs the last w backwards (cool-down). A stage never holds more than
// min(p - s, m) micro-batches forwarded and not yet backwarded (at most p),
// against m for GPipe, at the same bubble: with equal stage times t_f and
// t_b both leave each stage idle (p - 1)(t_f + t_b) of a step of
// (m + p - 1)(t_f + t_b), a bubble fraction of (p - 1) / (m + p - 1).
//
// Backwards run in micro-batch order in both schedules (as in Megatron-LM
// and torch.distributed.pipelining's ScheduleGPipe), so every stage sends
// and receives gradients in the same order as activations: the k-th
// message from a stage to a neighbour is the k-th one that neighbour
// receives from it ([Note: point-to-point order] in comm/communicator.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard {

/// The schedules this file builds.
enum class PipelineScheduleKind : std::uint8_t {
  gpipe,        ///< all forwards, then all backwards
  one_f_one_b,  ///< warm-up forwards, one forward one backward, cool-down
};

/// "gpipe" or "1f1b" (the names of the GPT example's --schedule).
const char* to_string(PipelineScheduleKind kind);
/// The kind named "gpipe" or "1f1b". Throws ConfigError naming `name` and
/// the valid names otherwise.
PipelineScheduleKind parse_pipeline_schedule(std::string_view name);

/// What one action of a stage does; see the file comment.
enum class PipelineOp : std::uint8_t {
  recv_activation,
  forward,
  send_activation,
  recv_gradient,
  backward,
  send_gradient,
};

/// "recv_act", "fwd", "send_act", "recv_grad", "bwd", "send_grad".
const char* to_string(PipelineOp op);

/// One action: an op on one micro-batch. Plain value.
struct PipelineAction {
  PipelineOp op = PipelineOp::forward;
  int micro_batch = 0;  ///< in [0, m)
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

/// "fwd 3", "send_act 3", ...: the op's name and the micro-batch.
std::string to_string(const PipelineAction& action);

/// Every stage's actions for one step. Plain value.
struct PipelineTable {
  PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b;
  int pipeline_stages = 1;  ///< p
  int micro_batches = 1;    ///< m
  /// actions[s]: stage s's actions in the order it runs them.
  std::vector<std::vector<PipelineAction>> actions;
};

/// Pipeline stage `pipeline_stage`'s actions under `kind` for
/// `pipeline_stages` stages and `micro_batches` micro-batches (see the file
/// comment). Throws ConfigError naming the values when pipeline_stages < 1,
/// micro_batches < 1 or pipeline_stage is outside [0, pipeline_stages).
/// Thread safety: pure function.
std::vector<PipelineAction> pipeline_stage_actions(PipelineScheduleKind kind, int pipeline_stages,
                                                   int pipeline_stage, int micro_batches);

/// Every stage's actions (pipeline_stage_actions for s = 0..pipeline_stages-1).
/// Throws as pipeline_stage_actions. Thread safety: pure function.
PipelineTable make_pipeline_table(PipelineScheduleKind kind, int pipeline_stages, int micro_batches);

/// The table as text: a header line "1f1b: 2 stages, 3 micro-batches" and
/// one line per stage, "stage 0: fwd 0 | send_act 0 | ...".
std::string to_string(const PipelineTable& table);

/// The compute order of a stage's actions alone: "F0 F1 B0 F2 B1 B2"
/// (forwards F, backwards B, communication left out), the form of the
/// schedule figures in the papers.
std::string compute_order(const std::vector<PipelineAction>& actions);

/// The largest number of micro-batches forwarded and not yet backwarded at
/// any point of `actions`: the activations a stage keeps at its peak
/// (min(p - s, m) for 1F1B, m for GPipe).
int max_in_flight(const std::vector<PipelineAction>& actions);

/// Per stage, when each action ran in a simulated step: every forward takes
/// `forward_time` and every backward `backward_time` (arbitrary integer
/// units), communication takes none, a send never waits and a receive
/// waits until its matching send has run: the executor's blocking rule
/// (parallel/pipeline_executor.h). Plain value.
struct PipelineSimulation {
  /// start[s][k], end[s][k]: time action k of stage s began and ended
  /// (a receive "begins" when the stage reaches it and ends when the
  /// message is there).
  std::vector<std::vector<std::int64_t>> start, end;
  std::int64_t makespan = 0;  ///< when the last action of any stage ended
  /// Per stage: makespan minus its compute time (forwards and backwards).
  std::vector<std::int64_t> idle;
  /// Sum of idle over stages / (stages x makespan): the bubble fraction.
  double bubble_fraction() const;
};

/// Runs `table` in the simulation described at PipelineSimulation. Throws
/// InvariantError when the table deadlocks (a stage waits for a message no
/// stage sends before waiting itself), naming every blocked stage and the
/// action it waits in; forward_time and backward_time must be >= 0
/// (InvariantError). Thread safety: pure function.
PipelineSimulation simulate_pipeline(const PipelineTable& table, std::int64_t forward_time,
                                     std::int64_t backward_time);

/// Checks that `table` is a valid step for the executor: the sizes match
/// (actions.size() == pipeline_stages, micro_batches >= 1); every stage
/// forwards and backwards each micro-batch exactly once, backwards after
/// the forward; stage 0 never receives activations or sends gradients and
/// the last stage never sends activations or receives gradients; a stage
/// receives micro-batch i's activation before forwarding it and sends it
/// after, and likewise for gradients around the backward; each stage's
/// sends to a neighbour are in the order the neighbour receives them; and
/// the simulation finishes (no deadlock). Throws InvariantError naming the
/// stage, the action and what is wrong. Thread safety: pure function.
void validate_pipeline_table(const PipelineTable& table);

}  // namespace zeroshard
