// Error types thrown by zeroshard. Every recoverable failure (bad config,
// I/O, communication, bad checkpoint) is one of these; its message says what
// went wrong, where (key, file, offset, rank) and, where it helps, what to do.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace zeroshard {

/// Base of every exception zeroshard throws. Thread safety: plain value type.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A configuration key is unknown, unsupported, or has an invalid value.
/// The message names the key path (e.g. "zero_optimization.stage") and value.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A communicator call failed (MPI/NCCL error code, mismatched sizes).
class CommError : public Error {
 public:
  using Error::Error;
};

/// A file or device I/O request failed; the message names file, offset,
/// length and errno.
class IoError : public Error {
 public:
  using Error::Error;
};

/// An internal invariant was broken (a bug in zeroshard or a misuse of the
/// API such as an unknown unit id). Thrown by ZS_CHECK.
class InvariantError : public Error {
 public:
  using Error::Error;
};

}  // namespace zeroshard

/// Checks an invariant; on failure throws zeroshard::InvariantError with the
/// formatted message, the condition text and the source location.
#define ZS_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      throw ::zeroshard::InvariantError(fmt::format("{} ({}:{}: check `{}` failed)",     \
                                                    fmt::format(__VA_ARGS__), __FILE__, \
                                                    __LINE__, #cond));                   \
    }                                                                                    \
  } while (0)
