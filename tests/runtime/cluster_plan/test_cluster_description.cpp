// ClusterDescription (runtime/cluster_plan/cluster_description.h): the
// shipped descriptions (tools/plan/clusters) read with their units
// converted (GiB, GB/s, TFLOP/s, microseconds), and every kind of bad
// description refused with the key's path in the message.
#include <filesystem>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/runtime/cluster_plan/cluster_paths.h"
#include "core/error.h"
#include "runtime/cluster_plan/cluster_description.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

ClusterDescription shipped(const std::string& name) {
  return ClusterDescription::from_file((fs::path(ZS_CLUSTER_DIR) / name).string());
}

// The H100 description with `patch` applied (a JSON merge patch).
std::string h100_with(const nlohmann::json& patch) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "name": "n", "source": ["s"], "nodes": 8, "accelerators_per_node": 8,
    "accelerator": {"name": "H100", "memory_GiB": 80, "peak_TFLOPs": {"bf16": 989, "fp16": 989, "fp32": 67},
                    "memory_bandwidth_GBps": 3350},
    "intra_node": {"kind": "NVLink", "bandwidth_GBps": 450, "latency_us": 3},
    "inter_node": {"kind": "IB", "bandwidth_GBps": 50, "latency_us": 5},
    "host": {"memory_GiB": 2048, "device_bandwidth_GBps": 55, "nvme_read_GBps": 28, "nvme_write_GBps": 16}})");
  j.merge_patch(patch);
  return j.dump();
}

std::string error_of(const nlohmann::json& patch) {
  return error_message<ConfigError>([&] { ClusterDescription::from_json(h100_with(patch), "c.json"); });
}

}  // namespace

TEST_CASE("the shipped descriptions read, in SI units") {
  int read = 0;
  for (const auto& entry : fs::directory_iterator(ZS_CLUSTER_DIR)) {
    CAPTURE(entry.path().string());
    const ClusterDescription c = ClusterDescription::from_file(entry.path().string());
    CHECK(!c.sources.empty());
    CHECK(c.accelerators() >= 8);
    ++read;
  }
  CHECK(read == 4);
  const ClusterDescription h = shipped("h100x64.json");
  CHECK(h.accelerators() == 64);
  CHECK(h.memory_bytes == 80.0 * (1ull << 30));
  CHECK(h.peak_flops(DType::bf16) == 989e12);
  CHECK(h.peak_flops(DType::f32) == 67e12);
  CHECK(h.intra_node.bandwidth_bytes_per_s == 450e9);
  CHECK(h.inter_node.bandwidth_bytes_per_s == 50e9);
  CHECK(h.inter_node.latency_s == doctest::Approx(5e-6));
  CHECK(h.nvme_write_bandwidth == 16e9);
  CHECK(!h.price_per_accelerator_hour.has_value());
  CHECK(h.compute_efficiency == 0.565);
  const ClusterDescription v = shipped("v100x400.json");
  CHECK(v.accelerators() == 400);
  CHECK(v.peak_flops(DType::f16) == 125e12);
  CHECK(error_message<ConfigError>([&] { v.checked_peak_flops(DType::bf16, "v100x400.json"); })
            .find("V100-SXM3-32GB has no bf16 peak") != std::string::npos);
  CHECK(shipped("a100-pcie-x16.json").inter_node.bandwidth_bytes_per_s == 1.5625e9);
}

TEST_CASE("a price and a compute efficiency are optional") {
  CHECK(!ClusterDescription::from_json(h100_with(nlohmann::json::object()), "c.json").compute_efficiency.has_value());
  CHECK(*ClusterDescription::from_json(h100_with({{"compute_efficiency", 0.5}}), "c.json").compute_efficiency == 0.5);
  CHECK(error_of({{"compute_efficiency", 1.5}}).find("\"compute_efficiency\" must be in (0, 1]") != std::string::npos);
  CHECK(error_of({{"compute_efficiency", 0}}).find("\"compute_efficiency\" must be a number > 0") != std::string::npos);
  const ClusterDescription c =
      ClusterDescription::from_json(h100_with({{"price_per_accelerator_hour", 2.5}}), "c.json");
  REQUIRE(c.price_per_accelerator_hour.has_value());
  CHECK(*c.price_per_accelerator_hour == 2.5);
}

TEST_CASE("bad descriptions name the key") {
  CHECK(error_of({{"acelerator", 1}}).find("unknown key \"acelerator\"") != std::string::npos);
  CHECK(error_of({{"nodes", nullptr}}).find("\"nodes\" is missing") != std::string::npos);
  CHECK(error_of({{"nodes", 0}}).find("\"nodes\" must be an integer from 1") != std::string::npos);
  CHECK(error_of({{"nodes", 2.5}}).find("\"nodes\" must be an integer") != std::string::npos);
  CHECK(error_of({{"accelerator", {{"memory_GiB", "80"}}}}).find("\"accelerator.memory_GiB\" must be a number > 0") !=
        std::string::npos);
  CHECK(error_of({{"accelerator", {{"peak_TFLOPs", {{"fp32", 0}}}}}})
            .find("\"accelerator.peak_TFLOPs.fp32\" must be a number > 0") != std::string::npos);
  CHECK(error_of({{"accelerator", {{"peak_TFLOPs", {{"fp8", 1}}}}}}).find("unknown key \"accelerator.peak_TFLOPs.fp8\"") !=
        std::string::npos);
  CHECK(error_of({{"inter_node", {{"bandwidth_GBps", -1}}}}).find("\"inter_node.bandwidth_GBps\" must be a number > 0") !=
        std::string::npos);
  CHECK(error_of({{"intra_node", {{"latency_us", -1}}}}).find("\"intra_node.latency_us\" must be a number >= 0") !=
        std::string::npos);
  CHECK(error_of({{"intra_node", {{"kind", ""}}}}).find("\"intra_node.kind\" must be a nonempty string") !=
        std::string::npos);
  CHECK(error_of({{"host", {{"nvme_write_GBps", 0}}}}).find("host.nvme_read_GBps") != std::string::npos);
  CHECK(error_of({{"source", nlohmann::json::array()}}).find("\"source\" must be a nonempty array") != std::string::npos);
  CHECK(error_of({{"price_per_accelerator_hour", -2}}).find("\"price_per_accelerator_hour\" must be a number >= 0") !=
        std::string::npos);
  CHECK(error_of({{"host", 3}}).find("\"host\" must be an object") != std::string::npos);
  CHECK(error_message<ConfigError>([] { ClusterDescription::from_json(R"({"nodes": 1, "nodes": 2})", "c.json"); })
            .find("c.json") != std::string::npos);
  CHECK(error_message<ConfigError>([] { ClusterDescription::from_json("{\"nodes\": ", "c.json"); }).find("c.json") !=
        std::string::npos);
  CHECK_THROWS_AS(ClusterDescription::from_file("/nonexistent/c.json"), IoError);
}
