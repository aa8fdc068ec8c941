// ParameterServerClient: a worker's side of the parameter-server layout
// ([Note: parameter-server layout] in runtime/ps/param_server.h): the
// hello, each step's push of the worker's gradient shard and the pull of
// its updated parameter shard, installed `staleness` steps later; with
// parameter_server.push "direct", of the worker's whole gradient, window
// s to each server s, and the pull of every server's window, installed
// once it has arrived and at most `staleness` steps later.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
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
/// gradients full at stage 1, the shard at 2/3. A "direct" worker's
/// engine runs alone (layout finalized for one rank: every array full);
/// server s gets and returns window s of the layout finalized for the S
/// servers. Thread safety: one thread (the engine's).
class ParameterServerClient {
 public:
  /// `roles`, `layout` (finalized for the W workers, or for 1 when
  /// roles.direct()) and `store` must outlive this object. `grad_dtype`:
  /// what pushed gradients travel in
  /// (ParameterServerConfig::push_grad_dtype: fp32, or bf16 with
  /// "direct", rounded to nearest even here; InvariantError else).
  ParameterServerClient(const ParameterServerRoles& roles, const FlatLayout& layout, ArrayStore& store, int stage,
                        std::int64_t staleness, DType grad_dtype, Tracer* tracer);
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
  /// installs the newest of the pulls due (steps up to step - staleness)
  /// and, with "direct", the later ones that have arrived (those before
  /// it only checked). Returns true
  /// when the parameters changed. Local; throws the server's error
  /// (Error), CommError, IoError (nvme parameters at stage 3).
  bool step(std::int64_t step, float grad_scale);
  /// Installs every pull in flight. Returns true when the parameters
  /// changed. Throws as step().
  bool drain();
  /// One piece of this worker's state on its server: unit u's parameter
  /// shard (k = -1, fp32) or state array k's window, as stored; valid
  /// during the call.
  using StatePiece = std::function<void(UnitId u, int k, std::span<const std::byte> bytes)>;
  /// Asks the server ("reduce" only: InvariantError) for this worker's
  /// parameter shards and optimizer state windows and hands them to `use` in order (units in order; in
  /// each the parameters, then the state arrays), each piece's size
  /// checked against `expected(u, k)` (bytes). The pulls in flight must be
  /// installed first (InvariantError). Local; throws the server's error
  /// (Error), CommError, InvariantError for a size other than expected, or
  /// what `use` throws, after reading the rest of the stream (no piece is
  /// handed over after the first failure).
  void fetch_state(const std::function<std::uint64_t(UnitId u, int k)>& expected, const StatePiece& use);
  /// Sends this worker's state to its server ("reduce" only) (a loaded
  /// checkpoint):
  /// begin_put_state(), then for each unit in order its parameter shard
  /// (fp32, shard elements) and each state array's window as stored
  /// (put_piece), then end_put_state(), which waits until the server
  /// stored them all. The pulls in flight must be installed first
  /// (InvariantError). `version` is the step whose update the state holds
  /// (the checkpoint's optimizer steps): version() and pushed() become it.
  /// Local; end_put_state throws the server's error (Error), every call
  /// CommError.
  void begin_put_state();
  void put_piece(std::span<const std::byte> bytes);
  void end_put_state(std::int64_t version);
  /// Ends a put begun by begin_put_state() early (the caller's load
  /// failed): the server keeps an error until the next put. Never throws.
  void abort_put_state() noexcept;
  /// The next push carries this worker's parameter shard (after the
  /// parameters were set outside the protocol).
  void mark_params_dirty() { params_dirty_ = true; }
  /// The step whose update the installed parameters hold (0: none yet).
  std::int64_t version() const { return version_; }
  /// The last step pushed (0: none yet); pushed() - version() is the
  /// staleness of the parameters the worker trains on next.
  std::int64_t pushed() const { return pushed_; }
  /// Steps pushed whose pulls are not installed.
  std::size_t in_flight() const { return pending_.size(); }
  const ParameterServerClientStats& stats() const { return stats_; }

 private:
  struct Pull;
  void push_array(std::size_t link, ArrayKind kind);
  /// True when every receive of `p` is complete (tests each, in order).
  bool arrived(Pull& p);
  /// Waits for `p`, checks its status (throws the server's error,
  /// CommError for a reply to another step) and counts its bytes.
  void settle(Pull& p);
  /// settle(), then copies its shards into the parameters.
  void install(Pull& p, std::int64_t at_step);
  void install_direct(const Pull& p);
  float* window(UnitId u, ArrayKind kind);
  std::size_t units() const { return layout_.units().size(); }

  const ParameterServerRoles& roles_;
  const FlatLayout& layout_;
  /// "direct": the layout finalized for the S servers, whose shard sizes
  /// travel; null for "reduce" (layout_'s travel).
  std::unique_ptr<FlatLayout> server_layout_;
  const FlatLayout& wire_;  ///< *server_layout_ or layout_
  std::vector<int> peers_;  ///< the servers' world ranks, one per link
  ArrayStore& store_;
  int stage_ = 1;
  std::int64_t staleness_ = 0;
  DType grad_dtype_ = DType::f32;  ///< what pushed gradients travel in
  bool params_dirty_ = true;
  bool connected_ = false;
  std::int64_t version_ = 0;
  std::int64_t pushed_ = 0;
  std::deque<std::unique_ptr<Pull>> pending_;
  ParameterServerClientStats stats_;
  Tracer* tracer_ = nullptr;
};

}  // namespace zeroshard
