#include "offload/io/aio_config.h"

#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quoted.h"

namespace zeroshard {

namespace {

constexpr std::uint64_t kMaxBlockSize = std::uint64_t{1} << 30;  // io_uring lengths are 32-bit

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& msg) {
  throw ConfigError(fmt::format("{}: \"{}\" {}", source, key, msg));
}

std::int64_t get_int(const nlohmann::json& v, const std::string& source, const std::string& key) {
  if (!v.is_number_integer()) fail(source, key, fmt::format("must be an integer, got {}", brief(v.dump())));
  // Above INT64_MAX get<int64_t> would wrap (18446744073709551615 -> -1).
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    fail(source, key, fmt::format("= {} is out of range (at most {})", brief(v.dump()), INT64_MAX));
  }
  return v.get<std::int64_t>();
}

bool get_bool(const nlohmann::json& v, const std::string& source, const std::string& key) {
  if (!v.is_boolean()) fail(source, key, fmt::format("must be true or false, got {}", brief(v.dump())));
  return v.get<bool>();
}

}  // namespace

AioConfig AioConfig::from_json(const nlohmann::json& j, const std::string& source,
                               const std::string& key_path) {
  if (!j.is_object()) fail(source, key_path, "must be an object");
  AioConfig c;
  bool saw_parallelism = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const std::string key = key_path + "." + k;
    const nlohmann::json& v = it.value();
    if (k == "block_size") {
      const std::int64_t b = get_int(v, source, key);
      if (b <= 0) fail(source, key, fmt::format("= {} is invalid: must be positive", b));
      c.block_size = static_cast<std::uint64_t>(b);
    } else if (k == "queue_depth") {
      const std::int64_t q = get_int(v, source, key);
      if (q < 1 || q > 4096) fail(source, key, fmt::format("= {} is invalid: must be in 1..4096", q));
      c.queue_depth = static_cast<int>(q);
    } else if (k == "intra_op_parallelism" || k == "thread_count") {
      if (saw_parallelism) {
        fail(source, key, "repeats intra_op_parallelism (thread_count is its older name); give one");
      }
      saw_parallelism = true;
      const std::int64_t t = get_int(v, source, key);
      if (t < 1 || t > 256) fail(source, key, fmt::format("= {} is invalid: must be in 1..256", t));
      c.intra_op_parallelism = static_cast<int>(t);
    } else if (k == "single_submit") {
      c.single_submit = get_bool(v, source, key);
    } else if (k == "overlap_events") {
      c.overlap_events = get_bool(v, source, key);
    } else if (k == "use_gds") {
      if (get_bool(v, source, key)) {
        fail(source, key, "= true is not supported: zeroshard has no GPUDirect Storage path; remove it or set false");
      }
    } else {
      fail(source, key,
           "is an unknown or unsupported configuration key (supported in \"aio\": block_size, "
           "queue_depth, intra_op_parallelism, single_submit, overlap_events, use_gds=false)");
    }
  }
  c.validate(source, key_path);
  return c;
}

void AioConfig::validate(const std::string& source, const std::string& key_path) const {
  if (block_size == 0 || block_size % 4096 != 0 || block_size > kMaxBlockSize) {
    fail(source, key_path + ".block_size",
         fmt::format("= {} is invalid: must be a positive multiple of 4096 (O_DIRECT) up to {}",
                     block_size, kMaxBlockSize));
  }
  if (queue_depth < 1 || queue_depth > 4096) {
    fail(source, key_path + ".queue_depth", fmt::format("= {} is invalid: must be in 1..4096", queue_depth));
  }
  if (intra_op_parallelism < 1 || intra_op_parallelism > 256) {
    fail(source, key_path + ".intra_op_parallelism",
         fmt::format("= {} is invalid: must be in 1..256", intra_op_parallelism));
  }
}

}  // namespace zeroshard
