// The messages between a worker and its parameter server, in the order
// they travel over the job's communicator (point-to-point, which MPI keeps
// in order between two ranks):
//   hello      worker -> server  PsHello, then server -> worker PsStatus
//   push k     worker -> server  PsPush (the step and the version it was
//                                computed on), [each unit's parameter shard when
//                                has_params], each unit's gradient shard
//   pull k     server -> worker  PsStatus, each unit's parameter shard
//                                (zeros after an error), so that the
//                                worker posts every receive at its push
//   state      worker -> server  PsPush with kind state; the server sends
//                                for each unit the parameter shard, then
//                                each optimizer state array's window w as
//                                stored, each piece a u64 byte count and
//                                the bytes (the rank file of a checkpoint);
//                                a count of kPsFailed is followed by a
//                                PsStatus with the error, and nothing more
//   put state  worker -> server  PsPush with kind put_state, then the same
//                                pieces as `state` sends (a checkpoint
//                                loaded by the worker); server -> worker
//                                PsStatus once all are stored
//   goodbye    worker -> server  PsPush with kind goodbye
// Shards are fp32, FlatLayout::unit(u).shard elements each (units without
// elements send nothing). Both ends run the same program, so the structs
// travel as bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// What a PsPush asks for.
enum class PsKind : std::int64_t { step = 1, goodbye = 2, state = 3, put_state = 4 };

/// A state piece's byte count that says the server failed instead.
inline constexpr std::uint64_t kPsFailed = ~std::uint64_t{0};

/// A worker's first message: its layout and the dtype its pushes'
/// gradients travel in, which must be the server's.
struct PsHello {
  std::uint64_t layout_hash = 0;  ///< ps_layout_hash of the worker's layout
  std::int64_t worker = 0;        ///< the worker index w
  std::int64_t grad_dtype = 0;    ///< the DType of its pushed gradients, as an integer
};

/// A push's header.
struct PsPush {
  PsKind kind = PsKind::step;
  std::int64_t step = 0;        ///< the 1-based optimizer step the gradient is for
  double grad_scale = 0;        ///< the averaging and clip factor (a float's value)
  std::int64_t has_params = 0;  ///< 1: the worker's parameter shards come first
  /// The version the gradient was computed on: the step whose update the
  /// worker's parameters held (0: the initial ones).
  std::int64_t version = 0;
};

/// Bytes of a PsStatus's error text, its terminating zero included.
inline constexpr std::size_t kPsErrorBytes = 1024;

/// A reply's header: ok, or the server's error (cut to kPsErrorBytes - 1
/// bytes).
struct PsStatus {
  std::int64_t ok = 1;
  std::int64_t step = 0;          ///< the step the reply is for (0: hello)
  std::int64_t updates = 0;       ///< the server's updates applied so far, this push's included
  char text[kPsErrorBytes] = {};  ///< the error (ok == 0), zero-terminated
};

/// A failed status carrying `text` (cut to fit) for `step`.
PsStatus ps_error(std::int64_t step, const std::string& text);

/// What a worker sent and waited for (since construction). Plain value.
struct ParameterServerClientStats {
  std::int64_t pushes = 0;
  std::uint64_t bytes_pushed = 0;  ///< gradient and parameter bytes sent to the server
  std::uint64_t bytes_pulled = 0;  ///< parameter bytes received from it
  double push_s = 0;               ///< seconds in the pushes' sends
  double wait_s = 0;               ///< seconds waiting for a pull that was due
  /// Per installed pull: the step it installed at minus the step it
  /// updated (the staleness the worker then trained at; a "direct"
  /// reply replaced by a newer one that arrived with it is not listed).
  std::vector<std::int64_t> lags;
  /// The updates its server(s) had applied when the newest installed pull
  /// was sent ("direct": every worker's pushes; the fewest over the
  /// servers).
  std::int64_t server_updates = 0;
};

/// A worker a "direct" server stopped serving before its goodbye.
struct ParameterServerLeft {
  int worker = 0;
  std::int64_t step = 0;     ///< its last push applied (0: none)
  std::int64_t version = 0;  ///< the version that push was computed on
  std::int64_t updates = 0;  ///< the server's updates applied when it was taken as gone
};

/// What a server did (since construction). Plain value.
struct ParameterServerStats {
  std::int64_t pushes = 0;  ///< step pushes applied (all hosted workers)
  /// The largest lag of an applied push: its step - 1 - the version its
  /// gradient was computed on (the updates its parameters missed; at most
  /// parameter_server.staleness). "direct": in the worker's own steps (the
  /// other workers' updates in between are not counted).
  std::int64_t max_lag = 0;
  /// "direct": the largest and the summed lag of the applied pushes in
  /// this server's own updates (tau: the updates it applied after those
  /// the push's parameters held, the other workers' included; each server
  /// counts its own), and the summed learning-rate scale over every push
  /// (1 / max(1, tau) with parameter_server.staleness_aware_lr, else 1).
  std::int64_t max_update_lag = 0;
  std::int64_t update_lag_sum = 0;
  double lr_scale_sum = 0;
  std::uint64_t bytes_received = 0;  ///< gradient and parameter bytes pushed to it
  std::uint64_t bytes_sent = 0;      ///< parameter bytes pulled from it
  /// Seconds answering pushes: receiving them (after the header), the
  /// updates, and copying and starting the replies (with the wait for a
  /// worker's previous reply); the rest of serve() is waiting for pushes.
  double receive_s = 0;
  double update_s = 0;
  double send_s = 0;
  /// "direct": the workers taken as gone, in the order they left.
  std::vector<ParameterServerLeft> left;
};

/// Sends one piece of a state stream to `peer`: its byte count (u64),
/// then the bytes. Throws CommError.
void ps_send_piece(Communicator& world, int peer, std::span<const std::byte> bytes);
/// Receives one piece from `peer` into `buf` (resized to it) and returns
/// its byte count, or kPsFailed (then only a PsStatus follows and `buf`
/// is unchanged). Throws CommError.
std::uint64_t ps_recv_piece(Communicator& world, int peer, std::vector<std::byte>& buf);

/// `layout`'s units and parameters (same ids, names, shapes, groups) laid
/// out anew for `world_size` ranks: the servers' layout of a "direct"
/// worker's (parameter_server.push). Throws what FlatLayout::finalize
/// throws.
FlatLayout ps_relaid_layout(const FlatLayout& layout, int world_size);

/// FNV-1a over the layout's world size, units' names and element counts
/// and parameters' names and shapes: equal layouts give equal hashes.
std::uint64_t ps_layout_hash(const FlatLayout& layout);

}  // namespace zeroshard
