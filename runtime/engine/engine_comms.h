// EngineComms: the Engine's communicators and their tracing. Every
// communicator the engine uses is wrapped in a TracedCommunicator
// (comm/traced/traced_communicator.h) that numbers, labels and, as configured
// (runtime/config/observe_config.h), times, logs and watches its
// collectives: the data-parallel group's device collectives ("dp"), its
// host-side messages ("dp.host", the same wrapper when the host
// communicator is the device one), and on a mesh ([Note: engine on a mesh]
// in runtime/engine/engine.h) the world ("world"), the tensor-parallel
// group ("tp") and the pipeline-parallel group ("pp", for the caller's
// activations). One comms_logger log is shared by all of them. Where a
// collective runs is the caller's choice: dp() for arrays in the compute
// device's memory, host() for host memory, norm() for the gradient norm's
// sums (the world on a mesh), raw_world() (unwrapped) for the step
// observer's own gathers. finalize() adds ZeRO++'s groups of dp()
// (make_zeropp_groups): hpZ's secondary groups and qgZ's nodes.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/collective_error.h"
#include "comm/node_groups.h"
#include "comm/traced/comms_log.h"
#include "comm/traced/traced_communicator.h"
#include "runtime/checkpoint/mesh_folders.h"
#include "runtime/config/observe_config.h"
#include "runtime/config/zeropp_config.h"
#include "runtime/observe/step_breakdown.h"

namespace zeroshard {

class Mesh;
class Tracer;

/// See the file comment. Thread safety: one thread (the engine's).
class EngineComms {
 public:
  /// Wraps `device` (collectives of the arrays, in the compute device's
  /// memory) and `host` (host-side messages: the norm without a mesh,
  /// agreed errors, checkpoint metadata; pass `device` again for the cpu
  /// device: one wrapper then serves both), and with a `mesh` (null: none;
  /// device must then be mesh->dp_group()) its world, tp and pp groups.
  /// Each wrapper gets `observe`'s options: `tracer` (spans and comm_wait;
  /// used only when observe records, else null), the collective timeout,
  /// fingerprint checks, and the comms log made here from
  /// observe.comms_logger (lines to stdout on rank 0 when verbose). Every
  /// argument must outlive this object. Throws ConfigError for an unknown
  /// comms_logger.prof_ops name, and what TracedCommunicator's constructor
  /// throws (a watched communicator is created collectively).
  EngineComms(Communicator& device, Communicator& host, const Mesh* mesh, const ObserveConfig& observe,
              Tracer* tracer);
  EngineComms(const EngineComms&) = delete;
  EngineComms& operator=(const EngineComms&) = delete;

  /// The data-parallel group, for the arrays' collectives.
  Communicator& dp() { return *dp_; }
  const Communicator& dp() const { return *dp_; }
  /// The data-parallel group unwrapped (Engine::dp_communicator).
  Communicator& raw_dp() { return dp_->inner(); }
  /// The data-parallel group's host messages (dp() itself on the cpu device).
  Communicator& host() { return host_ ? *host_ : *dp_; }
  /// On a mesh: the world, the tensor-parallel and the pipeline-parallel
  /// group (traced). Null without a mesh.
  Communicator* world() { return world_.get(); }
  Communicator* tp() { return tp_.get(); }
  Communicator* pp() { return pp_.get(); }
  bool on_mesh() const { return world_ != nullptr; }
  /// Where the gradient norm and the Inf/NaN count are summed: the world
  /// on a mesh, else host().
  Communicator& norm() { return world_ ? *world_ : host(); }
  /// The unwrapped world (the mesh's, else the host communicator), for the
  /// step observer's gathers, which are not part of any step's records.
  Communicator& raw_world();

  /// The minimum of v over the world (all_reduce; MinOverRanks of
  /// runtime/checkpoint/mesh_commit.h). On a mesh only (InvariantError
  /// otherwise). Collective over the world; throws CommError.
  double world_min(double v);

  /// Tensor-parallel size and rank (1 and 0 without a mesh).
  int tp_size() const { return tp_ ? tp_->world_size() : 1; }
  int tp_rank() const { return tp_ ? tp_->rank() : 0; }
  /// Pipeline stages of the mesh and this rank's (1 and 0 without a mesh).
  int pp_size() const { return pp_ ? pp_->world_size() : 1; }
  int pp_rank() const { return pp_ ? pp_->rank() : 0; }
  /// This rank's place on the mesh (runtime/checkpoint/mesh_folders.h).
  MeshPosition mesh_position() const {
    return MeshPosition{.dp = dp().world_size(), .tp = tp_size(), .tp_rank = tp_rank(), .pp = pp_size(),
                        .pp_rank = pp_rank()};
  }

  /// Makes ZeRO++'s groups of dp() for `zeropp` at ZeRO `stage`
  /// (runtime/config/zeropp_config.h): at stage 3 with
  /// zero_hpz_partition_size k > 1, hpZ's groups of k consecutive ranks
  /// (hpz(); traced as dp's splits are); at stages 2-3 with
  /// zero_quantized_gradients, qgZ's nodes (zeropp_nodes(): ranks
  /// [n L, (n + 1) L) with zeroshard.zeropp.ranks_per_node L > 0, else the
  /// ranks' host names, comm/node_groups.h). Nothing when neither is on.
  /// Returns a line on how hpZ's groups lie ("" without hpZ): each inside a
  /// node, or spanning nodes. Collective over dp(); call once, before the
  /// GradReducer and Unsharder that use the groups. Throws ConfigError
  /// (prefixed with `source`) when k or L does not divide dp()'s size, and
  /// what split_by_node throws.
  std::string make_zeropp_groups(const ZeroppConfig& zeropp, int stage, const std::string& source);
  /// hpZ's group of this rank (null without hpZ).
  Communicator* hpz() { return hpz_.get(); }
  /// qgZ's nodes (empty groups, null communicators, without qgZ).
  const NodeGroups& zeropp_nodes() const { return nodes_; }

  /// Every wrapper, in the order dp, host, world, tp, pp (absent ones left out).
  std::vector<TracedCommunicator*> traced() const;
  /// comms_logger's log (null when off).
  const CommsLog* log() const { return log_.get(); }
  /// Forgets every wrapper's records so far (the observer's start).
  void forget_records();
  /// The records since the last call, as [issue, completion) intervals of
  /// every wrapper but pp (a receive posted ahead is "in flight" while the
  /// previous pipeline stage computes: counting it would report that wait
  /// as hidden communication; its wait still counts as comm_wait), and the
  /// issue times of dp's collectives (`arrivals`). Appends to both.
  void take_step_records(std::vector<Interval>& intervals, std::vector<std::int64_t>& arrivals);

  /// Runs f() (which may throw; collectives inside it must be over groups
  /// whose members all run f) and, on a mesh, agrees on its outcome over
  /// the world: every rank returns f()'s result, or every rank throws the
  /// AgreedError (io, config or comm, after error_kind) carrying the first
  /// failing rank's message. Without a mesh, f() as is. Collective over the
  /// world on a mesh. Checkpoint save and load agree within one
  /// data-parallel group (each pipeline stage and tp rank's own folder);
  /// without this, a folder missing for one pipeline stage made its ranks
  /// throw together while the other stages went on into the training step
  /// and waited there for them.
  template <class F>
  auto agreed_over_world(F&& f) -> decltype(f()) {
    if (world_ == nullptr) return f();
    std::optional<decltype(f())> result;
    try {
      result.emplace(f());
    } catch (const std::exception& e) {
      agree_on_failure(*world_, e);
    }
    agree_on_error(*world_, "");
    return std::move(*result);
  }

 private:
  std::unique_ptr<CommsLog> log_;  // declared first: the wrappers log into it
  std::unique_ptr<TracedCommunicator> dp_;
  std::unique_ptr<TracedCommunicator> host_;  // null when the host communicator is the device one
  std::unique_ptr<TracedCommunicator> world_;
  std::unique_ptr<TracedCommunicator> tp_;
  std::unique_ptr<TracedCommunicator> pp_;
  std::unique_ptr<Communicator> hpz_;  // ZeRO++ hpZ's group (a split of dp_)
  NodeGroups nodes_;                   // ZeRO++ qgZ's nodes (splits of dp_)
};

}  // namespace zeroshard
