#include "offload/io/fault_injection.h"

#if ZS_TEST_HOOKS

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

struct FaultState {
  std::mutex mu;
  bool env_read = false;
  std::optional<IoFault> armed;
  std::uint64_t seen = 0;  // requests of armed->op since arming
};

FaultState& state() {
  static FaultState s;
  return s;
}

int errno_from_name(std::string_view name) {
  int value = 0;
  const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  if (ec == std::errc() && p == name.data() + name.size() && value > 0) return value;
  for (int e = 1; e < 4096; ++e) {
    const char* n = ::strerrorname_np(e);
    if (n != nullptr && name == n) return e;
  }
  return 0;
}

}  // namespace

IoFault parse_io_fault(std::string_view spec) {
  const auto bad = [&](const char* why) {
    return ConfigError(fmt::format(
        "fault injection spec \"{}\" is invalid ({}); expected <read|write>:<n>:<ERRNO>, e.g. write:3:EIO",
        spec, why));
  };
  const std::size_t a = spec.find(':');
  const std::size_t b = a == std::string_view::npos ? a : spec.find(':', a + 1);
  if (b == std::string_view::npos) throw bad("two ':' expected");
  IoFault f;
  const std::string_view op = spec.substr(0, a);
  if (op == "read") {
    f.op = IoOp::read;
  } else if (op == "write") {
    f.op = IoOp::write;
  } else {
    throw bad("the kind must be read or write");
  }
  const std::string_view n = spec.substr(a + 1, b - a - 1);
  const auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), f.nth);
  if (ec != std::errc() || p != n.data() + n.size() || f.nth == 0) throw bad("n must be an integer >= 1");
  f.err = errno_from_name(spec.substr(b + 1));
  if (f.err == 0) throw bad("unknown errno name");
  return f;
}

void inject_io_fault(const IoFault& fault) {
  FaultState& s = state();
  std::lock_guard lk(s.mu);
  s.env_read = true;
  s.armed = fault;
  s.seen = 0;
}

void load_io_fault_from_env() {
  FaultState& s = state();
  std::lock_guard lk(s.mu);
  s.env_read = true;
  if (const char* env = std::getenv("ZS_FAULT_INJECT"); env != nullptr && *env != '\0') {
    s.armed = parse_io_fault(env);
    s.seen = 0;
  }
}

void clear_io_fault() {
  FaultState& s = state();
  std::lock_guard lk(s.mu);
  s.env_read = true;
  s.armed.reset();
  s.seen = 0;
}

int take_io_fault(IoOp op) {
  FaultState& s = state();
  std::lock_guard lk(s.mu);
  if (!s.env_read) {
    s.env_read = true;
    if (const char* env = std::getenv("ZS_FAULT_INJECT"); env != nullptr && *env != '\0') {
      s.armed = parse_io_fault(env);
      s.seen = 0;
    }
  }
  if (!s.armed || s.armed->op != op) return 0;
  if (++s.seen < s.armed->nth) return 0;
  const int err = s.armed->err;
  s.armed.reset();
  return err;
}

}  // namespace zeroshard

#endif  // ZS_TEST_HOOKS
