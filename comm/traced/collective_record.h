// What one collective (or point-to-point message) is, for logs, traces and
// hang reports: its kind, its fingerprint (kind, count, dtype, root, peer,
// label) and the record a TracedCommunicator keeps of it once complete. Byte counts and bus
// bandwidth factors follow nccl-tests' definitions (doc/PERFORMANCE.md
// there): the "size" of a collective and the factor that turns algorithm
// bandwidth into bus bandwidth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace zeroshard {

/// The collectives of the Communicator interface, and its point-to-point
/// send and recv (one rank's side of a message; they are numbered per peer,
/// not by the communicator's collective sequence: see TracedCommunicator).
enum class CollectiveKind : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  all_to_all,
  broadcast,
  barrier,
  send,
  recv,
};
inline constexpr std::size_t kCollectiveKinds = 8;

/// True for send and recv.
constexpr bool is_point_to_point(CollectiveKind kind) {
  return kind == CollectiveKind::send || kind == CollectiveKind::recv;
}

/// Lower-case name ("all_reduce", "reduce_scatter", ..., "send", "recv"),
/// as in logs and spans (DeepSpeed's comms logger names send and recv alike).
const char* to_string(CollectiveKind kind);
/// The kind named `name` (to_string's inverse); false if none is.
bool parse_collective_kind(std::string_view name, CollectiveKind& kind);

/// nccl-tests' "size" of a collective in bytes, for `count` elements of
/// `dtype` per rank block on `world_size` ranks: all_reduce and broadcast
/// count * elt; all_gather count * world * elt (total received);
/// reduce_scatter count * world * elt (total sent); all_to_all count *
/// world * elt; barrier 0; send and recv count * elt (nccl-tests'
/// sendrecv).
std::uint64_t collective_bytes(CollectiveKind kind, std::size_t count, DType dtype,
                               int world_size);

/// Bytes this rank (`rank`) sends to ranks on other hosts in one collective
/// of `count` elements of `dtype` (per block, as the fingerprint counts
/// them), given every rank's host (`node_of_rank`, indexed by rank of the
/// communicator; empty: 0). The model is the direct exchange a linear
/// algorithm performs (Open MPI libnbc's default for the all-gather, the
/// all-to-all of the rank-ordered reductions), counting each block once per
/// remote receiver; R = the ranks whose host is not this rank's:
///   all_gather, all_to_all, reduce_scatter: count x size x R;
///   all_reduce: 2 x count x size x R / world (a reduce-scatter and an
///     all-gather of world blocks), rounded down;
///   broadcast: count x size x R at the root, 0 elsewhere;
///   send: count x size when `peer` is on another host; recv, barrier: 0.
/// Summed over the ranks of a job it is the bytes that cross between hosts.
/// Pure.
std::uint64_t cross_host_bytes(CollectiveKind kind, std::size_t count, DType dtype, int rank, int root, int peer,
                               const std::vector<int>& node_of_rank);

/// nccl-tests' bus bandwidth factor on n ranks: all_reduce 2(n-1)/n;
/// all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, send, recv 1
/// (nccl-tests' sendrecv); barrier 0.
/// busbw = algbw * factor. n < 1 is treated as 1.
double bus_bandwidth_factor(CollectiveKind kind, int world_size);

/// What every rank must agree on for one collective (SPMD): compared by the
/// fingerprint check and printed by hang reports.
struct CollectiveFingerprint {
  CollectiveKind kind = CollectiveKind::barrier;
  std::size_t count = 0;  ///< elements per rank block (0 for a barrier)
  DType dtype = DType::f32;
  int root = -1;          ///< broadcast root, -1 for other kinds
  std::string label;      ///< unit or bucket name set by the caller, may be empty
  int peer = -1;          ///< send: destination rank, recv: source rank; -1 for collectives

  bool operator==(const CollectiveFingerprint&) const = default;
};

/// "all_gather #812 (dp, unit fc2, 262144 f32)": kind, sequence number,
/// communicator name, label (if any), count and dtype (none for a barrier),
/// root (broadcast); "send #3 (pp, to rank 1, 1024 f32)" and "recv #3 (pp,
/// from rank 0, 1024 f32)" for point-to-point, whose number counts the
/// messages to (from) that peer.
std::string describe(const CollectiveFingerprint& fp, std::int64_t seq,
                     std::string_view communicator);

/// One completed collective as a TracedCommunicator records it. Times are
/// Tracer::now_ns() (steady clock, nanoseconds) of this process.
struct CollectiveRecord {
  std::int64_t seq = 0;          ///< per-communicator sequence number, from 1
  CollectiveKind kind = CollectiveKind::barrier;
  std::size_t count = 0;         ///< elements per rank block
  DType dtype = DType::f32;
  std::uint64_t bytes = 0;       ///< collective_bytes()
  std::string label;
  std::int64_t issue_ns = 0;     ///< the call was made
  std::int64_t wait_begin_ns = -1;  ///< wait() began; -1 if test() saw completion
  std::int64_t end_ns = 0;       ///< wait() returned, or test() first saw completion
  bool blocking = false;         ///< a blocking call (issue_ns == wait_begin_ns)
  int peer = -1;                 ///< send/recv: the other rank; -1 for collectives
};

}  // namespace zeroshard
