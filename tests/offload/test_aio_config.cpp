// The "aio" section: DeepSpeed's keys, defaults, and ConfigError naming the
// key for unknown keys, wrong types and invalid values.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "offload/io/aio_config.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using nlohmann::json;

namespace {

std::string config_error_of(const json& j) {
  return testing::required_error_message<ConfigError>([&] { AioConfig::from_json(j, "ds.json"); },
                                                      "expected ConfigError");
}

}  // namespace

TEST_CASE("aio defaults and DeepSpeed keys") {
  const AioConfig d = AioConfig::from_json(json::object());
  CHECK(d.block_size == (1u << 20));
  CHECK(d.queue_depth == 32);
  CHECK(d.intra_op_parallelism == 1);
  CHECK_FALSE(d.single_submit);
  CHECK(d.overlap_events);
  const AioConfig c = AioConfig::from_json(json::parse(R"({
    "block_size": 262144, "queue_depth": 8, "intra_op_parallelism": 4,
    "single_submit": true, "overlap_events": false, "use_gds": false})"));
  CHECK(c.block_size == 262144);
  CHECK(c.queue_depth == 8);
  CHECK(c.intra_op_parallelism == 4);
  CHECK(c.single_submit);
  CHECK_FALSE(c.overlap_events);
  CHECK(AioConfig::from_json(json{{"thread_count", 3}}).intra_op_parallelism == 3);
}

TEST_CASE("aio errors name the key") {
  std::string m = config_error_of(json{{"block_sise", 4096}});
  CHECK(m.find("ds.json") != std::string::npos);
  CHECK(m.find("\"aio.block_sise\"") != std::string::npos);
  m = config_error_of(json{{"block_size", 1000}});
  CHECK(m.find("\"aio.block_size\"") != std::string::npos);
  CHECK(m.find("4096") != std::string::npos);
  CHECK(config_error_of(json{{"block_size", 0}}).find("aio.block_size") != std::string::npos);
  CHECK(config_error_of(json{{"queue_depth", 0}}).find("aio.queue_depth") != std::string::npos);
  CHECK(config_error_of(json{{"queue_depth", "8"}}).find("must be an integer") != std::string::npos);
  CHECK(config_error_of(json{{"intra_op_parallelism", 0}}).find("aio.intra_op_parallelism") !=
        std::string::npos);
  CHECK(config_error_of(json{{"single_submit", 1}}).find("true or false") != std::string::npos);
  CHECK(config_error_of(json{{"use_gds", true}}).find("aio.use_gds") != std::string::npos);
  CHECK(config_error_of(json{{"thread_count", 2}, {"intra_op_parallelism", 2}}).find("thread_count") !=
        std::string::npos);
  CHECK(config_error_of(json::array()).find("\"aio\"") != std::string::npos);
}
