// make_io_engine: the one place that knows whether the build has liburing.
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "zs_config.h"
#include "offload/io/io_engine.h"
#include "offload/io/os_error.h"
#include "offload/io/thread_pool_io_engine.h"
#if ZS_HAVE_IO_URING
#include "offload/io/io_uring_engine.h"
#endif

namespace zeroshard {

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace

std::unique_ptr<IoEngine> make_io_engine(const AioConfig& cfg) {
  cfg.validate();
  const char* forced = cfg.force_no_io_uring               ? "by configuration (force_no_io_uring)"
                       : env_flag("ZS_FORCE_NO_IO_URING") ? "by ZS_FORCE_NO_IO_URING=1"
                                                          : nullptr;
#if ZS_HAVE_IO_URING
  if (forced != nullptr) {
    log_once(fmt::format("io_uring disabled {}; using the pread/pwrite thread pool", forced));
  } else {
    int err = 0;
    if (std::unique_ptr<IoEngine> e = IoUringEngine::try_create(cfg, err)) return e;
    log_once(fmt::format("io_uring_queue_init failed: {}; using the pread/pwrite thread pool "
                         "(slower; check seccomp and sysctl kernel.io_uring_disabled)",
                         errno_text(err)));
  }
#else
  static_cast<void>(forced);
  log_once("built without liburing; using the pread/pwrite thread pool for NVMe offload");
#endif
  return std::make_unique<ThreadPoolIoEngine>(cfg);
}

}  // namespace zeroshard
