// Argument checks shared by every Communicator implementation, so that a
// misuse fails the same way on the self, MPI and NCCL backends.
//
// Each check is local (no communication). Because every rank of an SPMD
// program passes the same root, colour validity and counts, every rank
// throws together and no rank is left waiting inside a collective.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/dtype.h"

namespace zeroshard {

/// Throws CommError unless 0 <= root < world_size. The message names the
/// root, the world size, the calling rank and the backend ("mpi", "self").
/// Thread safety: pure function.
void check_broadcast_root(int root, int world_size, int rank, std::string_view backend);

/// Throws CommError if color is negative (split needs a colour >= 0 on
/// every rank; there is no "not a member" colour). The message names the
/// colour, the rank and the backend. Thread safety: pure function.
void check_split_color(int color, int rank, std::string_view backend);

/// Checks a point-to-point call (`what`: "send" or "recv") on rank `rank`
/// of a `world_size`-rank communicator of `backend`: throws CommError naming
/// the call, the rank, the peer, the world size and the backend if peer is
/// outside [0, world_size); CommError naming the call, rank, peer and count
/// if count exceeds PTRDIFF_MAX elements (a negative count converted to
/// size_t); InvariantError if buf is null while count > 0. Local, like
/// every check here, but unlike a collective's its peer does not throw with
/// it ([Note: point-to-point order] in comm/communicator.h). Thread safety:
/// pure function.
void check_p2p(std::string_view what, const void* buf, std::size_t count, int peer, int rank,
               int world_size, std::string_view backend);

/// Throws InvariantError if buf is null while count > 0 elements. `what`
/// names the collective and argument ("all_reduce buf") for the message.
/// Thread safety: pure function.
void check_buffer(const void* buf, std::size_t count, std::string_view what);

/// True if the byte ranges [a, a + a_bytes) and [b, b + b_bytes) overlap.
/// Empty ranges never overlap. Thread safety: pure function.
bool ranges_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes);

/// Classifies an all-gather's buffers: returns true for the in-place form
/// (send == recv + rank * count elements of dtype), false when send and the
/// recv buffer (count * world_size elements) are disjoint. Throws
/// InvariantError when they overlap in any other way. Thread safety: pure.
bool all_gather_in_place(const void* send, const void* recv, std::size_t count, DType dtype,
                         int rank, int world_size);

/// Throws InvariantError if a reduce-scatter's send buffer (count *
/// world_size elements) overlaps its recv buffer (count elements), which
/// MPI_Reduce_scatter_block and ncclReduceScatter do not allow.
/// Thread safety: pure function.
void check_reduce_scatter_disjoint(const void* send, const void* recv, std::size_t count,
                                   DType dtype, int world_size);

/// Throws InvariantError if an all-to-all's send and recv buffers (count *
/// world_size elements each) overlap, which MPI_Alltoall (without
/// MPI_IN_PLACE) and grouped NCCL sends and receives do not allow.
/// Thread safety: pure function.
void check_all_to_all_disjoint(const void* send, const void* recv, std::size_t count, DType dtype,
                               int world_size);

}  // namespace zeroshard
