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

void agree_on_error(Communicator& comm, const std::string& local_error, ErrorKind kind, bool names_its_rank) {
  const int n = comm.world_size();
  double first = local_error.empty() ? n : comm.rank();
  comm.all_reduce(&first, 1, DType::f64, ReduceOp::min);
  if (first >= n) return;
  const int root = static_cast<int>(first);
  // Length, kind and whether the message names its rank already, then the
  // message as raw 2-byte elements (no arithmetic on them).
  double head[3] = {static_cast<double>(local_error.size()), static_cast<double>(kind), names_its_rank ? 1.0 : 0.0};
  comm.broadcast(head, 3, DType::f64, root);
  const auto len = static_cast<std::size_t>(head[0]);
  std::vector<char> text((len + 1) / 2 * 2, ' ');
  if (comm.rank() == root) std::memcpy(text.data(), local_error.data(), local_error.size());
  comm.broadcast(text.data(), text.size() / 2, DType::f16, root);
  const std::string message(text.data(), len);
  const bool named = head[2] != 0.0, prefix = n > 1 && !named;
  const std::string what = prefix ? fmt::format("rank {}: {}", root, message) : message;
  switch (static_cast<ErrorKind>(static_cast<int>(head[1]))) {
    case ErrorKind::config: throw AgreedConfigError(what, comm.rank(), named || prefix);
    case ErrorKind::comm: throw AgreedCommError(what, comm.rank(), named || prefix);
    case ErrorKind::io: break;
  }
  throw AgreedIoError(what, comm.rank(), named || prefix);
}

void agree_on_failure(Communicator& comm, const std::exception& e) {
  std::string message = e.what();
  if (message.empty()) message = "unknown error";
  const auto* agreed = dynamic_cast<const AgreedError*>(&e);
  agree_on_error(comm, message, error_kind(e), agreed != nullptr && agreed->names_rank());
  throw InvariantError("agree_on_failure: agree_on_error returned for a failed rank");  // not reached
}

}  // namespace zeroshard
