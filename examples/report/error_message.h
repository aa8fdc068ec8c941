// Error messages of the programs (examples/ and tools/): one line each.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "core/error.h"

namespace zeroshard::examples {

/// `message` on one line: each line break, with the indentation after it,
/// becomes "; " (" " after a colon). Library messages that list several
/// problems, such as a checkpoint from a different model, put one per line.
inline std::string one_line_message(std::string message) {
  while (!message.empty() && message.back() == '\n') message.pop_back();
  std::size_t pos = 0;
  while ((pos = message.find('\n', pos)) != std::string::npos) {
    std::size_t end = pos + 1;
    while (end < message.size() && message[end] == ' ') ++end;
    const bool after_colon = pos > 0 && message[pos - 1] == ':';
    message.replace(pos, end - pos, after_colon ? " " : "; ");
  }
  return message;
}

/// "error" for a zeroshard::Error (bad input or state its message names),
/// "unexpected error" for any other exception. Never throws.
inline const char* error_kind(const std::exception& e) noexcept {
  return dynamic_cast<const Error*>(&e) != nullptr ? "error" : "unexpected error";
}

/// Prints "<program>: <error_kind(e)>: <e.what() on one line>" on stderr
/// and returns 1, the exit status of a program that ends with it. Never
/// throws.
inline int print_error(const char* program, const std::exception& e) noexcept {
  std::fprintf(stderr, "%s: %s: %s\n", program, error_kind(e), one_line_message(e.what()).c_str());
  return 1;
}

}  // namespace zeroshard::examples
