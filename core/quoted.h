// How an error message quotes a value it did not choose (a config value or
// key, a path under a configured folder, a JSON token): cut to a short
// prefix, so that a 10 MB value costs a short line, not a 10 MB one.
#pragma once

#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace zeroshard {

/// Bytes of a value, key, path or token quoted in a message before it is cut.
inline constexpr std::size_t kMaxQuoted = 64;

/// `s` itself when at most kMaxQuoted bytes, else its first kMaxQuoted
/// bytes, "...", and its length in bytes ("abc... (10485760 bytes)").
/// Pure function, thread-safe.
inline std::string brief(const std::string& s) {
  if (s.size() <= kMaxQuoted) return s;
  return fmt::format("{}... ({} bytes)", s.substr(0, kMaxQuoted), s.size());
}

}  // namespace zeroshard
