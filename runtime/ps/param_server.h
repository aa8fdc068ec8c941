// ParameterServer: a server rank's side of the parameter-server layout.
// Details: [Note: parameter-server layout] below.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/memory_ledger.h"
#include "core/tracer.h"
#include "runtime/ps/ps_messages.h"
#include "runtime/ps/ps_roles.h"
#include "runtime/sharding/array_store.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/update/shard_optimizer.h"

// [Note: parameter-server layout]
// A job with parameter_server.servers = S splits its ranks into S servers
// and W = world - S workers (runtime/ps/ps_roles.h). The workers run the
// Engine among themselves as they would without servers, at the
// configured ZeRO stage, except that they hold no optimizer state: their
// ArrayStore has parameters and gradients only. At a step, after the
// reduce-scatter (or all-reduce) among the workers and the global norm,
// worker w pushes the gradient shard it holds (window w of each unit: 1/W
// of the gradient, so the bytes to the servers fall with W) with the step
// and the averaging and clip factor to server w % S; the server holds, for
// each of its workers, what that worker's rank would hold at stage 3: the
// fp32 parameter shard, the gradient shard and the optimizer states (an
// ArrayStore for rank w, on offload_optimizer's tier, nvme included), and
// updates it with the same ShardOptimizer the engine runs. The worker then
// pulls the updated shard into its parameters and gathers them among the
// workers as stage 1-3 do after a step. The update reads the same
// gradient, factor and step as the all-reduce engine's on rank w, and the
// engine's update of a shard does not depend on the stage (the
// stage-equivalence tests), so synchronous training (staleness 0) gives
// bitwise the all-reduce engine's parameters at W ranks.
//
// The server holds the parameters: a worker's first push (and the first
// after Engine::set_parameters or a checkpoint load) carries its
// parameter shard, which replaces the server's copy.
//
// parameter_server.staleness s > 0: step k's pull is installed at step
// k + s (the worker posts the receive at its push and waits for it s steps
// later), so after step k a worker trains on the parameters of step
// max(0, k - s), the server updates with gradients s steps stale
// (delayed SGD), and the pull's transfer and the server's update overlap
// the workers' next s steps. A server sends each reply without blocking,
// from a copy of the shards (one window per hosted worker, so W windows
// on a "direct" server; like a worker's pulls in flight, (s + 1)
// windows, they are not in the memory ledger), so that a worker busy with its next steps, which takes the
// reply in only at its next call into MPI, holds up no other worker's
// push. Each push names the version its gradient was
// computed on; the server applies a worker's pushes in increasing step
// order and keeps the largest lag (ParameterServerStats::max_lag, s once
// the run is past step s). Which version is installed when depends on
// the step count only, so two runs give the same bits. The workers still
// reduce among themselves every step, so a slow worker delays every
// worker's step as it does without servers; calls that read or write the
// parameters as a whole (gathers, saves, set_parameters) first install
// every pull in flight.
//
// A server's error (an I/O error of its nvme tier) is its reply's status:
// every worker agrees on it at the step that installs that reply (the
// engine is unusable then), and the server answers every later push with
// the same error until its workers say goodbye. A process that dies ends
// the MPI job (Open MPI names it); the run resumes from its checkpoint.
//
// parameter_server.push "direct" (opt-in): a worker's Engine trains
// alone (a one-rank layout: its own gradient, norm and clip factor, no
// reduction among the workers) and pushes window s of that gradient, in
// the layout finalized for the S servers, to each server s. A server
// holds one state, rank s of that layout, and applies every push as the
// next update (the optimizer's step is the server's update count) in
// arrival order: asynchronous SGD (Dean et al., NIPS 2012) whose
// staleness is bounded on the worker's side as above, counted in the
// worker's own steps (a push of step k was computed on the update of its
// own push max(0, k - 1 - s) or a later one: at each push the worker also
// installs every reply that has arrived, so it trains on the freshest
// parameters it has, as stale synchronous parallel allows; Ho et al.,
// NIPS 2013). The optimizer's step (bias correction,
// lr schedule) is the server's update count. A slow worker then delays
// the others only while a server receives from it (one push at a time);
// a failed update of the shared state is every worker's error; the
// result depends on the arrival order and, at s > 0, on when replies
// arrive, so two runs with W > 1 or s > 0 differ (one worker at
// staleness 0: bitwise the one-rank engine). With
// parameter_server.staleness_aware_lr a server applies a push whose
// parameters missed tau of its updates (from the reply they came from,
// the other workers' updates included) at lr / max(1, tau) (Zhang et
// al., "Staleness-aware Async-SGD for Distributed Deep Learning", IJCAI
// 2016; ShardOptimizer::set_lr_scale; the decoupled weight decay scales
// with it). Each server counts its own updates: with S > 1 the servers
// may apply two workers' pushes in different orders, and then scale one
// push's windows differently. With
// communication_data_type bf16 a worker rounds its gradient to bf16 once
// (to nearest even) before the push and the server widens it exactly:
// half the bytes of the push, the one rounding the update sees
// (ParameterServerConfig::push_grad_dtype; "reduce" pushes stay fp32,
// the shard the workers reduced). The first parameters pushed are the
// servers'; every other worker's first push must carry the same (CRC-32
// of the server's window), else that worker's step fails
// naming both workers (as after set_parameters on one worker once another
// pushed); set_parameters after a worker's own first step, and
// checkpoints, are refused. A worker that cannot be reached, or sends nothing for
// zeroshard.collective_timeout_s (kPsLeftAfterDefaultS when off) while
// the others went on (kPsLeftAfterMessages messages each) or all others
// (at least one) are done, is
// taken as gone (a step longer than that timeout is taken for a
// departure): the server prints which worker left after which step and
// version (ParameterServerStats::left), cancels its receive and serves
// the others. Open MPI ends the whole job when a rank dies unless the job
// is started with orte_enable_recovery, and its shared-memory transport
// does not notice a dead peer (a server's reply to it hangs), so such a
// job also runs over TCP: --mca btl tcp,self (tests/meson.build's
// ps_worker_leaves).
//
// Checkpoints are the all-reduce engine's format at W ranks: a worker's
// save writes its rank file from what its server sends (the master values
// and the state windows of rank w, in the file's order), so that the
// checkpoint loads into an all-reduce run or a job with another number of
// servers (resharded as any checkpoint); a worker's load sends the windows
// it read to its server. Asynchronous saves are refused.

namespace zeroshard {

/// "direct": the seconds a silent worker is served before it is taken as
/// gone when zeroshard.collective_timeout_s is off.
inline constexpr double kPsLeftAfterDefaultS = 300;
/// "direct": the messages per other worker the server must have had
/// since a silent worker's last before it takes that worker as gone
/// (unless all others are done): a pause of every worker is no departure.
inline constexpr std::int64_t kPsLeftAfterMessages = 8;

/// What a ParameterServer is built with besides the layout. Plain value.
struct ParameterServerOptions {
  /// The update's settings as the workers' engine would use them (stage
  /// and rank are set per hosted worker).
  ShardOptimizerOptions optimizer;
  /// The store's settings at stage 3 (ps_server_array_plan_options in
  /// runtime/engine/engine_options.h: offload_optimizer's tier is the
  /// server's, offload_param off); the rank is set per hosted worker.
  ArrayStoreOptions store;
  /// The parameter groups after group 0, as ShardOptimizer::groups() lists
  /// them on the workers.
  std::vector<ParamGroup> groups;
  /// "direct": seconds without a message after which a worker is taken as
  /// gone, once the others went on or are all done (<= 0: never).
  double left_after_s = 0;
  /// The dtype pushed gradients travel in
  /// (ParameterServerConfig::push_grad_dtype): fp32, or bf16 with
  /// "direct" (widened exactly on arrival; InvariantError else).
  DType push_grad_dtype = DType::f32;
  /// ParameterServerConfig::staleness_aware_lr ("direct" only:
  /// InvariantError else).
  bool staleness_aware_lr = false;
};

/// The server side (see the Note). Thread safety: one thread.
class ParameterServer {
 public:
  /// Allocates an ArrayStore and a ShardOptimizer for each worker that
  /// `roles` gives this server. `layout` must be finalized for the W
  /// workers and outlive this object, as must `ops`, `ledger`, `roles`.
  /// Throws what the store and optimizer throw (ConfigError, IoError,
  /// allocation errors).
  ParameterServer(const ParameterServerRoles& roles, const FlatLayout& layout, DeviceOps& ops, MemoryLedger& ledger,
                  const ParameterServerOptions& options, Tracer* tracer);
  ~ParameterServer();

  /// Answers the hosted workers' hellos, then their pushes in arrival
  /// order, until every one said goodbye. A worker's pushes must come in
  /// increasing step order (a push that does not is answered with an
  /// error naming both steps). Each update records the step and the
  /// version it used in the trace (the "optimizer" span's unit: "worker
  /// w, step k, version v"; "direct" adds the update, the updates its
  /// parameters missed and the lr scale) and in stats(). Throws CommError when a message
  /// cannot be received; a failed update is the reply's status instead
  /// (see the Note). A hello whose layout or pushed-gradient dtype differs
  /// is answered with an error naming the worker, and serving goes on.
  void serve();
  const ParameterServerStats& stats() const { return stats_; }
  /// The store of hosted worker w (InvariantError when not hosted here).
  ArrayStore& store_of(int w);

 private:
  struct Hosted;
  void answer_hello(Hosted& h);
  void answer_push(Hosted& h, const PsPush& push);
  void answer_state(Hosted& h);
  void answer_put_state(Hosted& h);
  void leave(Hosted& h, const std::string& why);
  const ParameterServerRoles& roles_;
  const FlatLayout& layout_;
  std::vector<std::unique_ptr<ArrayStore>> stores_;
  std::vector<std::unique_ptr<ShardOptimizer>> optimizers_;
  std::vector<std::unique_ptr<Hosted>> hosted_;
  std::uint64_t layout_hash_ = 0;
  double left_after_s_ = 0;
  DType grad_dtype_ = DType::f32;
  bool staleness_aware_lr_ = false;
  std::int64_t updates_ = 0;  ///< updates applied ("direct": the optimizer's step count)
  /// "direct": who pushed the parameters the server holds, and their CRC-32.
  struct FirstParams {
    int worker = 0;
    std::uint64_t crc32 = 0;
  };
  std::optional<FirstParams> first_params_;
  ParameterServerStats stats_;
  Tracer* tracer_ = nullptr;
};

}  // namespace zeroshard
