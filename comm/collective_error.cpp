#include "comm/collective_error.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace zeroshard {

bool is_agreed(const std::exception& e) { return dynamic_cast<const AgreedError*>(&e) != nullptr; }

ErrorKind error_kind(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e) != nullptr) return ErrorKind::config;
  if (dynamic_cast<const CommError*>(&e) != nullptr) return ErrorKind::comm;
  return ErrorKind::io;
}

void agree_on_error(Communicator& comm, const std::string& local_error, ErrorKind kind) {
  const int n = comm.world_size();
  double first = local_error.empty() ? n : comm.rank();
  comm.all_reduce(&first, 1, DType::f64, ReduceOp::min);
  if (first >= n) return;
  const int root = static_cast<int>(first);
  // Length and kind, then the message as raw 2-byte elements (no arithmetic on them).
  double head[2] = {static_cast<double>(local_error.size()), static_cast<double>(kind)};
  comm.broadcast(head, 2, DType::f64, root);
  const auto len = static_cast<std::size_t>(head[0]);
  std::vector<char> text((len + 1) / 2 * 2, ' ');
  if (comm.rank() == root) std::memcpy(text.data(), local_error.data(), local_error.size());
  comm.broadcast(text.data(), text.size() / 2, DType::f16, root);
  const std::string message(text.data(), len);
  const std::string what = n > 1 ? fmt::format("rank {}: {}", root, message) : message;
  switch (static_cast<ErrorKind>(static_cast<int>(head[1]))) {
    case ErrorKind::config: throw AgreedConfigError(what, comm.rank());
    case ErrorKind::comm: throw AgreedCommError(what, comm.rank());
    case ErrorKind::io: break;
  }
  throw AgreedIoError(what, comm.rank());
}

}  // namespace zeroshard
