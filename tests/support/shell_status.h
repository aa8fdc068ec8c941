// A command run through the shell by the tests that drive the tools'
// programs (std::system: blocks until it ends; not thread-safe with other
// std::system calls on some C libraries).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace zeroshard::testing {

/// Runs `command` through the shell; its exit status, or -1 when it did
/// not exit (a signal ended it).
inline int run_status(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace zeroshard::testing
