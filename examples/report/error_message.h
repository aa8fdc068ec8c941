// Error messages of the programs (examples/ and tools/): one line each.
#pragma once

#include <string>

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

}  // namespace zeroshard::examples
