// The "parameter_server" section: how many of the job's ranks are
// parameter servers (holding the fp32 parameters and optimizer states of
// the workers' shards), how stale the workers' parameters may be, and on
// which hosts the servers run ([Note: parameter-server layout] in
// runtime/ps/param_server.h). zeroshard's own section: DeepSpeed has none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zeroshard {

class ConfigDiagnostics;

/// parameter_server.push: what a worker sends its servers.
enum class PsPushMode {
  /// The gradient reduced among the workers first; worker w pushes window
  /// w (1/W of it) to server w % S. Deterministic, bitwise the all-reduce
  /// engine at staleness 0; a slow worker delays every step.
  reduce,
  /// Each worker's own gradient, window s to server s; the servers apply
  /// every push as one update in arrival order (asynchronous SGD bounded
  /// by the staleness), so the others do not wait for a slow worker. Not
  /// deterministic across runs for W > 1.
  direct,
};

/// The "parameter_server" keys. Plain value type.
struct ParameterServerConfig {
  /// parameter_server.servers: server ranks S (0: off, every rank trains).
  std::int64_t servers = 0;
  /// parameter_server.staleness: s >= 0. After optimizer step k a worker
  /// trains on the parameters of step max(0, k - s): 0 is synchronous
  /// (bitwise the all-reduce engine's result), s > 0 lets the pull of an
  /// update overlap the next s steps' compute. With push "direct", the
  /// update of the worker's own push of step max(0, k - s) or a later one
  /// (the newest reply that has arrived; the servers apply the other
  /// workers' pushes in between).
  std::int64_t staleness = 0;
  /// parameter_server.staleness_aware_lr (push "direct" only): a server
  /// applies a push computed on parameters that missed tau of its updates
  /// at lr / max(1, tau) (Zhang et al., "Staleness-aware Async-SGD for
  /// Distributed Deep Learning", IJCAI 2016), AdamW's decoupled weight
  /// decay with it; each server counts its own updates, so with S > 1
  /// the windows of one push may be scaled differently.
  bool staleness_aware_lr = false;
  /// parameter_server.placement: host names (gethostname) the servers run
  /// on, in order; empty: the last S ranks are the servers.
  std::vector<std::string> placement;
  /// parameter_server.push: "reduce" (default) or "direct" (PsPushMode).
  PsPushMode push = PsPushMode::reduce;

  bool enabled() const { return servers > 0; }
  bool direct() const { return enabled() && push == PsPushMode::direct; }
  /// The dtype pushed gradients travel in, given communication_data_type
  /// (unset: fp32): bf16 for a "direct" push with bf16 (rounded to
  /// nearest even by the worker, widened exactly by the server: half the
  /// bytes), else fp32 ("reduce" pushes the shard the workers reduced in
  /// that dtype, as the all-reduce engine updates with). Pure.
  DType push_grad_dtype(std::optional<DType> communication_data_type) const {
    return direct() && communication_data_type == DType::bf16 ? DType::bf16 : DType::f32;
  }
  /// Records each range or combination problem in `d`, naming the keys:
  /// servers or staleness negative, placement naming no host, and what
  /// the layout does not carry (a stage below 1, a compute dtype other
  /// than fp32, Muon, zeroshard.overlap_optimizer_step, a "direct" push
  /// with communication_data_type fp16: fp32 training has no loss scale
  /// to keep fp16 gradients in range; staleness_aware_lr without a
  /// "direct" push); a warning for a staleness without servers.
  void collect_problems(int stage, DType compute_dtype, std::optional<DType> communication_data_type, bool muon,
                        bool overlap_optimizer_step, ConfigDiagnostics& d) const;
};

/// W = world_size - servers: the ranks that train in a job of `world_size`
/// ranks of which `servers` are parameter servers (all of them for
/// servers <= 0). Throws ConfigError naming parameter_server.servers,
/// prefixed by `source` unless it is empty, when none would train. Pure.
int ps_training_ranks(std::int64_t servers, int world_size, const std::string& source);

/// The workers whose shards server `server` of `servers` holds among
/// `workers` workers, in increasing order: w with w % servers == server
/// (empty for a server index outside [0, servers)). Pure.
std::vector<int> ps_hosted_workers(int workers, int servers, int server);

}  // namespace zeroshard
