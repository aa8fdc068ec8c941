// AioConfig: the ds_config "aio" section (DeepSpeed's names and meaning),
// which tunes the NVMe offload I/O engine (see offload/io/io_engine.h).
//
// Keys and what each changes in zeroshard's engines:
//   block_size            bytes per I/O piece: every request is split into
//                         pieces of this size (default 1 MiB). Used by both
//                         engines. Must be a multiple of 4096 (O_DIRECT).
//   queue_depth           pieces in flight at once in the io_uring engine
//                         (ring size; default 32, DeepSpeed's default is 8).
//                         No effect on the thread-pool engine.
//   intra_op_parallelism  worker threads of the thread-pool (pread/pwrite)
//                         fallback engine (default 1). No effect on the
//                         io_uring engine, which uses one reaper thread.
//                         "thread_count" (older DeepSpeed name) is accepted
//                         as an alias.
//   single_submit         io_uring only: true submits each piece with its own
//                         io_uring_enter call; false (default) submits all
//                         prepared pieces with one call.
//   overlap_events        io_uring only: true (default) refills the queue as
//                         each completion arrives; false issues a wave of up
//                         to queue_depth pieces and waits for the whole wave
//                         before the next one.
//   use_gds               GPUDirect Storage; only false is supported (a
//                         ConfigError otherwise).
// Any other key inside "aio" is a ConfigError naming it.
//
// force_no_io_uring and force_buffered_io are zeroshard options, not read
// from JSON; the environment variables ZS_FORCE_NO_IO_URING=1 and
// ZS_FORCE_BUFFERED_IO=1 set them too (see make_io_engine and
// SwapDirectory).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace zeroshard {

/// Settings of the offload I/O engine. Plain value type.
struct AioConfig {
  std::uint64_t block_size = std::uint64_t{1} << 20;  ///< bytes per piece, multiple of 4096
  int queue_depth = 32;                               ///< io_uring pieces in flight, 1..4096
  int intra_op_parallelism = 1;                       ///< fallback pool threads, 1..256
  bool single_submit = false;                         ///< io_uring: one submit call per piece
  bool overlap_events = true;                         ///< io_uring: refill on each completion
  bool force_no_io_uring = false;  ///< use the thread-pool engine even if io_uring works
  bool force_buffered_io = false;  ///< never open files with O_DIRECT

  /// Parses the "aio" object `j`. `source` names the file (or "<json>") and
  /// `key_path` the section ("aio") in error messages. Missing keys keep
  /// their defaults. Throws ConfigError naming the key (e.g.
  /// "aio.block_size") for an unknown key, a wrong JSON type or an invalid
  /// value.
  static AioConfig from_json(const nlohmann::json& j, const std::string& source = "<json>",
                             const std::string& key_path = "aio");

  /// Checks the ranges listed above. Throws ConfigError naming the key and
  /// value, prefixed by `source`.
  void validate(const std::string& source = "<config>", const std::string& key_path = "aio") const;
};

}  // namespace zeroshard
