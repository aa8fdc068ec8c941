// ParameterServerClient: a worker's side of the parameter-server layout
// ([Note: parameter-server layout] in runtime/ps/param_server.h): the
// hello, each step's push of the worker's gradient shard and the pull of
// its updated parameter shard, installed `staleness` steps later.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/tracer.h"
#include "runtime/ps/ps_messages.h"
#include "runtime/ps/ps_roles.h"
#include "runtime/sharding/array_store.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// The worker side. The store is a cpu engine's (every array host
/// addressable) at the workers' stage: parameters full at stages 1/2 (this
/// worker's window w is pushed and pulled), the shard at stage 3;
/// gradients full at stage 1, the shard at 2/3. Thread safety: one thread
/// (the engine's).
class ParameterServerClient {
 public:
  /// `roles`, `layout` (finalized for the W workers) and `store` must
  /// outlive this object.
  ParameterServerClient(const ParameterServerRoles& roles, const FlatLayout& layout, ArrayStore& store, int stage,
                        std::int64_t staleness, Tracer* tracer);
  /// Drains the pulls in flight and says goodbye; never throws.
  ~ParameterServerClient();
  ParameterServerClient(const ParameterServerClient&) = delete;
  ParameterServerClient& operator=(const ParameterServerClient&) = delete;

  /// The hello and the server's answer. Local: the caller agrees on the
  /// outcome among the workers. Throws Error with the server's message
  /// (another model), CommError.
  void connect();
  /// Pushes step `step`'s gradient shard with `grad_scale` (and the
  /// parameter shard when marked), posts the receive of its pull, and
  /// installs every pull due (steps up to step - staleness). Returns true
  /// when the parameters changed. Local; throws the server's error
  /// (Error), CommError, IoError (nvme parameters at stage 3).
  bool step(std::int64_t step, float grad_scale);
  /// Installs every pull in flight. Returns true when the parameters
  /// changed. Throws as step().
  bool drain();
  /// The next push carries this worker's parameter shard (after the
  /// parameters were set outside the protocol).
  void mark_params_dirty() { params_dirty_ = true; }
  /// The step whose update the installed parameters hold (0: none yet).
  std::int64_t version() const { return version_; }
  /// Steps pushed whose pulls are not installed.
  std::size_t in_flight() const { return pending_.size(); }
  const ParameterServerClientStats& stats() const { return stats_; }

 private:
  struct Pull;
  void push_array(ArrayKind kind);
  void install(Pull& p, std::int64_t at_step);
  float* window(UnitId u, ArrayKind kind);

  const ParameterServerRoles& roles_;
  const FlatLayout& layout_;
  ArrayStore& store_;
  int stage_ = 1;
  std::int64_t staleness_ = 0;
  int peer_ = 0;
  bool params_dirty_ = true;
  bool connected_ = false;
  std::int64_t version_ = 0;
  std::deque<std::unique_ptr<Pull>> pending_;
  ParameterServerClientStats stats_;
  Tracer* tracer_ = nullptr;
};

}  // namespace zeroshard
