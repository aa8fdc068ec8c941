// Checkpoint test hooks: see runtime/checkpoint/save_hooks.h.
#include "runtime/checkpoint/save_hooks.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "core/durable_file.h"
#include "core/error.h"
#include "zs_config.h"

namespace zeroshard {

namespace {

// The hook's value, or null without hooks or when it is not set.
const char* hook(const char* name) {
#if ZS_TEST_HOOKS
  return std::getenv(name);
#else
  (void)name;
  return nullptr;
#endif
}

}  // namespace

void checkpoint_crash_point(const char* point, int rank) {
  const char* env = hook("ZS_CHECKPOINT_CRASH_AT");
  if (rank == 0 && env != nullptr && std::string_view(env) == point) ::raise(SIGKILL);
}

void checkpoint_pause_point(const std::string& dir, int rank) {
  const char* env = hook("ZS_CHECKPOINT_PAUSE_RANK");
  if (env != nullptr && std::atoi(env) == rank) {
    write_file_atomic(dir + "/paused", "paused\n");
    std::this_thread::sleep_for(std::chrono::minutes(10));
  }
}

void checkpoint_fail_point(const std::string& file, int rank) {
  const char* env = hook("ZS_CHECKPOINT_FAIL_RANK");
  if (env != nullptr && std::atoi(env) == rank) {
    throw IoError(fmt::format("injected failure of rank {}'s checkpoint file {} (ZS_CHECKPOINT_FAIL_RANK)", rank, file));
  }
}

void checkpoint_write_error_point(const std::string& file, std::uint64_t offset, std::size_t bytes) {
  const char* env = hook("ZS_CHECKPOINT_WRITE_ERRNO");
  if (env == nullptr) return;
  const int err = std::atoi(env);
  throw IoError(fmt::format("writing {} bytes at offset {} of {}: {} (errno {}; injected by "
                            "ZS_CHECKPOINT_WRITE_ERRNO)",
                            bytes, offset, file, std::strerror(err), err));
}

void checkpoint_write_delay() {
  const char* env = hook("ZS_CHECKPOINT_WRITE_DELAY_MS");
  if (env != nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(env)));
}

bool checkpoint_hard_links_refused() {
  const char* env = hook("ZS_CHECKPOINT_NO_HARD_LINKS");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace zeroshard
