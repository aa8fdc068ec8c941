// Argument checks shared by the Communicator implementations; see
// comm/collective_args.h.
#include "comm/collective_args.h"

#include <cstddef>
#include <cstdint>

#include "core/error.h"

namespace zeroshard {

void check_broadcast_root(int root, int world_size, int rank, std::string_view backend) {
  if (root < 0 || root >= world_size) {
    throw CommError(fmt::format(
        "broadcast root {} is out of range for world size {} (valid roots are 0..{}); "
        "called on rank {} of the {} communicator; pass a rank of this communicator as root",
        root, world_size, world_size - 1, rank, backend));
  }
}

void check_split_color(int color, int rank, std::string_view backend) {
  if (color < 0) {
    throw CommError(fmt::format(
        "split color {} is negative on rank {} of the {} communicator; every rank must pass "
        "a color >= 0",
        color, rank, backend));
  }
}

void check_p2p(std::string_view what, const void* buf, std::size_t count, int peer, int rank,
               int world_size, std::string_view backend) {
  if (peer < 0 || peer >= world_size) {
    throw CommError(fmt::format(
        "{} on rank {} of the {} communicator: peer {} is out of range for world size {} (valid "
        "peers are 0..{}); pass a rank of this communicator",
        what, rank, backend, peer, world_size, world_size - 1));
  }
  if (count > static_cast<std::size_t>(PTRDIFF_MAX)) {
    throw CommError(fmt::format(
        "{} on rank {} of the {} communicator to/from peer {}: count {} elements is too large (a "
        "negative count, {} as a signed value?)",
        what, rank, backend, peer, count, static_cast<std::ptrdiff_t>(count)));
  }
  ZS_CHECK(buf != nullptr || count == 0, "{} buf on rank {} (peer {}) is null but count is {} elements",
           what, rank, peer, count);
}

void check_buffer(const void* buf, std::size_t count, std::string_view what) {
  ZS_CHECK(buf != nullptr || count == 0, "{} is null but count is {} elements", what, count);
}

bool ranges_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

bool all_gather_in_place(const void* send, const void* recv, std::size_t count, DType dtype,
                         int rank, int world_size) {
  const std::size_t block = count * dtype_size(dtype);
  const auto own = reinterpret_cast<std::uintptr_t>(recv) + static_cast<std::size_t>(rank) * block;
  if (reinterpret_cast<std::uintptr_t>(send) == own) return true;
  ZS_CHECK(!ranges_overlap(send, block, recv, block * static_cast<std::size_t>(world_size)),
           "all_gather send buffer overlaps recv but is not recv + rank * count (rank {}, count {} "
           "{} elements)",
           rank, count, dtype_name(dtype));
  return false;
}

void check_reduce_scatter_disjoint(const void* send, const void* recv, std::size_t count,
                                   DType dtype, int world_size) {
  const std::size_t block = count * dtype_size(dtype);
  ZS_CHECK(!ranges_overlap(send, block * static_cast<std::size_t>(world_size), recv, block),
           "reduce_scatter recv buffer overlaps send (count {} {} elements, world size {}); use "
           "a separate recv buffer",
           count, dtype_name(dtype), world_size);
}

void check_all_to_all_disjoint(const void* send, const void* recv, std::size_t count, DType dtype,
                               int world_size) {
  const std::size_t bytes = count * dtype_size(dtype) * static_cast<std::size_t>(world_size);
  ZS_CHECK(!ranges_overlap(send, bytes, recv, bytes),
           "all_to_all recv buffer overlaps send (count {} {} elements per block, world size {}); use a "
           "separate recv buffer",
           count, dtype_name(dtype), world_size);
}

}  // namespace zeroshard
