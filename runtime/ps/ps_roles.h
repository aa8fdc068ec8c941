// Which ranks of a job are parameter servers and which are workers
// ([Note: parameter-server layout] in runtime/ps/param_server.h): S
// server ranks, chosen by parameter_server.placement's hosts or else the
// last S ranks, and the W = world - S workers, each served by server
// w % S (parameter_server.push "reduce") or by every server ("direct").
// Made once per job, before the Engine's state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "runtime/config/ps_config.h"

namespace zeroshard {

/// The roles of every rank and this rank's group (see the file comment).
/// Move-only (owns the group's communicator). Thread safety: const
/// methods from any thread; the communicators as theirs.
class ParameterServerRoles {
 public:
  /// Splits `world` (which must outlive this object) by role. Collective
  /// over `world`: one all-gather of the placement hosts each rank runs
  /// on, then a split (and on "direct" workers one more, each alone). Throws ConfigError, the same on every rank and
  /// prefixed by `source`, naming parameter_server.servers when S is not
  /// below the world size, or parameter_server.placement when a host it
  /// names runs no rank or its hosts run fewer than S ranks.
  ParameterServerRoles(Communicator& world, const ParameterServerConfig& config, const std::string& source);

  bool is_server() const { return server_; }
  /// This rank's worker index w in [0, W), or server index in [0, S).
  int index() const { return index_; }
  int workers() const { return static_cast<int>(worker_ranks_.size()); }
  int servers() const { return static_cast<int>(server_ranks_.size()); }
  /// World rank of worker w / of server s.
  int worker_rank(int w) const { return worker_ranks_.at(static_cast<std::size_t>(w)); }
  int server_rank(int s) const { return server_ranks_.at(static_cast<std::size_t>(s)); }
  /// parameter_server.push is "direct": every server serves every worker.
  bool direct() const { return direct_; }
  /// Throws InvariantError, naming `grad_dtype`, unless this job's pushes
  /// can carry gradients in it: fp32, or bf16 with "direct" pushes. The
  /// server's and the worker's constructors check it.
  void check_push_grad_dtype(DType grad_dtype) const;
  /// The server that holds worker w's shards: w % S ("reduce" only).
  int server_of(int w) const { return w % servers(); }
  /// The workers server s serves, in increasing order: w % S == s
  /// ("reduce"), all of them ("direct").
  std::vector<int> hosted_workers(int s) const;
  /// The job's communicator (messages between workers and servers).
  Communicator& world() const { return world_; }
  /// The workers' communicator (W ranks, worker index order) on a worker,
  /// the servers' (S ranks, server index order) on a server.
  Communicator& group() const { return *group_; }
  /// The communicator a rank's Engine runs over: group(), except on a
  /// "direct" worker, which trains alone (a one-rank communicator).
  Communicator& engine_group() const { return solo_ ? *solo_ : *group_; }

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> group_;
  std::unique_ptr<Communicator> solo_;
  std::vector<int> worker_ranks_, server_ranks_;
  bool server_ = false;
  bool direct_ = false;
  int index_ = 0;
};

}  // namespace zeroshard
