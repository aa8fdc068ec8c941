// PipelineExecutor: runs one stage's actions of a pipeline schedule
// (parallel/pipeline_schedule.h) over the point-to-point messages of the
// pipeline-parallel group (Mesh::pp_group(), comm/mesh.h), calling the
// stage's forward and backward for each micro-batch and timing every action.
//
// Messages: an activation of micro-batch i goes from stage s to s + 1 as
// one message of output_count elements; the gradient of that activation
// comes back from s + 1 as one message of the same size. Receives are
// posted early: the stage's first activation and first gradient receive at
// the start of run(), and each next one as soon as the previous of its kind
// has arrived, so a message travels while the stage computes. Sends are
// posted (isend) right after the compute that produced them and completed
// later: their buffers return to a pool once a test() finds them done, and
// run() waits for the last ones at its end. The stage's forward and
// backward run on the calling thread; MPI moves the messages meanwhile (its
// progress thread, [Note: MPI progress] in comm/mpi/mpi_progress.h). The
// messages are labelled "activation i" and "gradient i" (set_label, seen by
// a TracedCommunicator's records and hang reports); run() leaves the label
// empty.
//
// [Note: pipeline deadlock freedom]
// Whatever the compute and transfer times, run() finishes on every stage
// when every stage runs the same valid table:
//  1. A stage never waits for one of its own sends before its last action
//     (a send's buffer is recycled only once test() says it is done, else
//     a new buffer is taken), so a stage blocks only in a receive, and only
//     until its neighbour has posted the matching send.
//  2. Messages between two stages are matched in the order they were sent
//     ([Note: point-to-point order] in comm/communicator.h), and in both
//     schedules every stage sends and receives in micro-batch order, so the
//     k-th receive gets the k-th send. A stage is then a process that reads
//     from in-order channels, blocks only on reads and never on writes: a
//     Kahn process network, whose outcome (finishing, or the set of stages
//     left waiting) does not depend on timing.
//  3. So one timing that finishes proves all do: validate_pipeline_table
//     runs the table with unit times under exactly rule 1 (simulate_pipeline)
//     and the executor refuses a table it rejects. For 1F1B the reason is
//     the pairing in the steady state: before stage s waits for the
//     gradient of micro-batch j it has sent the activations up to
//     j + p - s - 1, and stage s + 1 needs only those up to j + p - s - 2
//     before its backward of j, so the gradient stage s waits for never
//     depends on an activation that stage s has not sent yet.
// A blocking send would break rule 1 (on MPI, a large send waits for its
// receive): stage s would wait to send activation j + p - s - 1 while stage
// s + 1 waits to send the gradient of j, each before posting the receive
// the other needs. On NCCL every operation blocks until its match, which is
// why the executor refuses NCCL (see PipelineExecutor).
//
// Errors on one stage: an exception from forward or backward (or a
// CommError) leaves the neighbours waiting for messages that will not
// come. run() then gives up its pending messages without waiting for them
// (their buffers are kept alive until the process ends, as MPI may still
// write into them) and rethrows; the pipeline group cannot be used after
// that, and the caller ends the job with Communicator::abort() ([Note:
// agreeing on errors] in comm/collective_error.h). A TracedCommunicator
// with a timeout as the group reports the waiting neighbours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "parallel/pipeline_schedule.h"

namespace zeroshard {

/// One stage's part of the model, as the executor calls it. Counts are
/// elements of dtype for ONE micro-batch (every micro-batch has the same
/// shapes, as in Megatron-LM's pipeline).
struct PipelineStageFunctions {
  DType dtype = DType::f32;     ///< of activations and their gradients
  /// Elements of one micro-batch's input activation, received from the
  /// previous stage; 0 on the first stage (its forward reads its own input).
  std::size_t input_count = 0;
  /// Elements of one micro-batch's output activation, sent to the next
  /// stage; 0 on the last stage (its forward ends in the loss).
  std::size_t output_count = 0;
  /// forward(i, input, output): micro-batch i; input holds input_count
  /// elements (null on the first stage), output has room for output_count
  /// elements to fill (null on the last stage). The buffers belong to the
  /// executor and are reused after the call: keep what the backward needs.
  std::function<void(int micro_batch, const void* input, void* output)> forward;
  /// backward(i, grad_output, grad_input): grad_output holds d loss /
  /// d output (output_count elements; null on the last stage, whose
  /// backward starts from its loss), grad_input has room for d loss /
  /// d input (input_count elements to fill; null on the first stage).
  std::function<void(int micro_batch, const void* grad_output, void* grad_input)> backward;
};

/// When one action ran, in Tracer::now_ns() (steady clock, this process).
/// A receive begins when the stage starts waiting for it and ends when the
/// message is there; a send's times bracket posting it.
struct PipelineEvent {
  PipelineAction action;
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
};

/// One run() of a stage: its actions' times. Plain value.
struct PipelineTimeline {
  int pp_rank = 0;            ///< the pipeline stage that ran (its rank in the pipeline group)
  std::int64_t begin_ns = 0;  ///< run() started
  std::int64_t end_ns = 0;    ///< run() returned (every send complete)
  std::vector<PipelineEvent> events;  ///< one per action, in the table's order
  /// Time spent in forward and backward calls, nanoseconds.
  std::int64_t compute_ns() const;
  /// (end_ns - begin_ns) - compute_ns(): the stage's idle time (bubble,
  /// waiting and communication), nanoseconds.
  std::int64_t idle_ns() const;
  /// idle_ns() / (end_ns - begin_ns); 0 for an empty run.
  double idle_fraction() const;
};

/// See the file comment. Thread safety: one thread at a time (it uses the
/// communicator, which has that rule).
class PipelineExecutor {
 public:
  /// An executor for stage pp_group.rank() of pp_group.world_size() stages.
  /// Collective over pp_group (one all_gather): every stage checks every
  /// stage's counts and dtype, so all throw the same ConfigError, naming
  /// the stages and counts, when a stage's output_count differs from the
  /// next stage's input_count, the dtypes differ, the first stage's
  /// input_count or the last stage's output_count is not 0, a function is
  /// missing, or the group is an NCCL communicator (the executor moves
  /// host buffers and relies on non-blocking sends: see [Note: pipeline
  /// deadlock freedom]). `pp_group` must outlive the executor.
  PipelineExecutor(Communicator& pp_group, PipelineStageFunctions functions);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  /// This rank's pipeline stage (pp_group.rank()).
  int pp_rank() const { return pp_rank_; }
  /// Number of pipeline stages (pp_group.world_size()).
  int pp_size() const { return pp_size_; }

  /// Runs table.actions[pp_rank()] (every stage must call it with the same
  /// table, as with a collective) and returns the timeline. Throws
  /// InvariantError when table.pipeline_stages differs from pp_size() or
  /// validate_pipeline_table rejects the table (before any message, on
  /// every stage alike); rethrows what forward, backward or the
  /// communicator throw, after giving up the pending messages (see the
  /// file comment: the job must then end).
  PipelineTimeline run(const PipelineTable& table);

  /// A run's buffers and messages (implementation detail,
  /// pipeline_executor.cpp).
  struct Run;

 private:
  Communicator& comm_;
  PipelineStageFunctions fn_;
  int pp_rank_ = 0;
  int pp_size_ = 1;
  std::unique_ptr<Run> run_;  // buffers kept between runs
};

}  // namespace zeroshard
