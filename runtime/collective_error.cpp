#include "runtime/collective_error.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace zeroshard {

void agree_on_error(Communicator& comm, const std::string& local_error) {
  const int n = comm.world_size();
  double first = local_error.empty() ? n : comm.rank();
  comm.all_reduce(&first, 1, DType::f64, ReduceOp::min);
  if (first >= n) return;
  const int root = static_cast<int>(first);
  // The message travels as raw 2-byte elements (no arithmetic on them).
  double len = static_cast<double>(local_error.size());
  comm.broadcast(&len, 1, DType::f64, root);
  std::vector<char> text((static_cast<std::size_t>(len) + 1) / 2 * 2, ' ');
  if (comm.rank() == root) std::memcpy(text.data(), local_error.data(), local_error.size());
  comm.broadcast(text.data(), text.size() / 2, DType::f16, root);
  const std::string message(text.data(), static_cast<std::size_t>(len));
  throw IoError(n > 1 ? fmt::format("rank {}: {}", root, message) : message);
}

}  // namespace zeroshard
