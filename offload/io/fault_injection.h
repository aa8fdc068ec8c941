// Test hook: make the n-th I/O request of a kind fail with a chosen errno.
//
// Compiled only when ZS_TEST_HOOKS is 1 (meson option test_hooks); otherwise
// take_io_fault() is an inline no-op and the rest is absent. A fault is
// armed either from C++ (inject_io_fault) or from the environment variable
// ZS_FAULT_INJECT="<read|write>:<n>:<ERRNO>", e.g. "write:3:EIO", read when
// the first request is submitted. It is one-shot: requests of that kind are
// counted from the moment it is armed (1-based), the n-th one fails and the
// fault disarms. The failing request transfers all its pieces but the last,
// which completes with the errno instead of reaching the disk, so the file
// is left partially written, as after a real failure.
#pragma once

#include <cstdint>
#include <string_view>

#include "zs_config.h"
#include "offload/io/io_engine.h"

namespace zeroshard {

#if ZS_TEST_HOOKS

/// A parsed fault: the `nth` request (1-based) of `op` fails with `err`.
struct IoFault {
  IoOp op = IoOp::write;
  std::uint64_t nth = 1;
  int err = 0;
};

/// Parses "<read|write>:<n>:<ERRNO name or number>". Throws ConfigError
/// naming the text when it is malformed.
IoFault parse_io_fault(std::string_view spec);

/// Arms `fault`, replacing any armed one; counting starts now. Thread safe.
void inject_io_fault(const IoFault& fault);

/// Reads ZS_FAULT_INJECT now and arms it if set (tests that set the
/// variable after the first request call this). Throws ConfigError if it is
/// malformed. Thread safe.
void load_io_fault_from_env();

/// Disarms any fault (and stops ZS_FAULT_INJECT from being read later).
/// Thread safe.
void clear_io_fault();

/// Called by the engines once per submitted request of `op` with a non-zero
/// length: returns the errno to inject into that request, or 0. Thread safe.
/// Throws ConfigError if ZS_FAULT_INJECT is malformed.
int take_io_fault(IoOp op);

#else

inline int take_io_fault(IoOp) { return 0; }

#endif

}  // namespace zeroshard
