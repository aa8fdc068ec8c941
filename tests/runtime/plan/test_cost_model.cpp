// The step cost model (runtime/plan/cost_model.h) against closed forms on
// synthetic rates, the calibration file's round trip and errors, and
// calibrate() (runtime/plan/calibrate.h) on the ranks this test runs at: every
// rate measured, the same figures on every rank.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "runtime/plan/calibrate.h"
#include "runtime/plan/cost_model.h"
#include "runtime/plan/model_description.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// t(b) = b / 1e9 s for every collective (1 GB/s, no latency), measured at `world` ranks.
MachineRates linear_rates(int world) {
  MachineRates r;
  r.isa = "test";
  r.world_size = world;
  r.optimizer_bandwidth = 28e9;  // AdamW fp32: 1e9 elements/s
  r.disk_read = 2e9;
  r.disk_write = 1e9;
  for (CollectiveRates* c : {&r.all_to_all, &r.all_gather, &r.all_reduce}) {
    c->bytes = {1e3, 1e9};
    c->seconds = {1e-6, 1.0};
  }
  return r;
}

// Two units of 4096 x world elements (no padding at any world size up to 8).
ModelDescription two_units(int world) {
  ModelDescription m;
  for (int u = 0; u < 2; ++u) {
    m.units.push_back({fmt::format("u{}", u), {{fmt::format("u{}.w", u), {4096 * world}, 0}}});
  }
  return m;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

}  // namespace

TEST_CASE("collective times interpolate between measured sizes") {
  CollectiveRates c{{1000, 2000, 4000}, {1.0, 3.0, 4.0}};
  CHECK(c.time(0) == 0);
  CHECK(c.time(500) == 1.0);     // below: the smallest size's time
  CHECK(c.time(1500) == 2.0);    // linear
  CHECK(c.time(3000) == 3.5);
  CHECK(c.time(8000) == 8.0);    // above: the largest size's bandwidth
  CollectiveRates empty;
  CHECK_THROWS_AS(empty.time(1), ConfigError);
}

TEST_CASE("bytes the update moves per element") {
  EngineConfig c = make_config(1);
  CHECK(optimizer_bytes_per_element(c) == 28);  // AdamW fp32: p rw, g r, m rw, v rw
  c.compute_dtype = DType::bf16;
  CHECK(optimizer_bytes_per_element(c) == 28);  // master rw, bf16 g r, m rw, v rw, bf16 copy w
  c.compute_dtype = DType::f32;
  c.optimizer.kind = OptimizerKind::sgd;
  CHECK(optimizer_bytes_per_element(c) == 12);
  c.optimizer.momentum = 0.9;
  CHECK(optimizer_bytes_per_element(c) == 20);
  // AdamW8bit: p rw, g r, codes of m and v rw, absmax 4 / block each way.
  c.optimizer = OptimizerHyper{};
  c.optimizer.states.dtype = StateDtype::q8;
  c.optimizer.states.block_size = 256;
  CHECK(optimizer_bytes_per_element(c) == 16 + 16.0 / 256);
  c.optimizer.states.block_size = 64;
  CHECK(optimizer_bytes_per_element(c) == 16 + 16.0 / 64);
}

TEST_CASE("predicted steps equal the closed forms") {
  const int n = 2;
  const FlatLayout layout = two_units(n).layout(n);
  const double P = 2 * 4096 * n;  // padded elements, 4 B each in fp32
  const MachineRates rates = linear_rates(n);

  SUBCASE("stage 0 without overlap: one rank-ordered all-reduce, the full update") {
    EngineConfig c = make_config(0);
    c.zero.overlap_comm = false;
    const StepCost s = predict_step(layout, c, 0, rates, 0.01);
    CHECK(near(s.reduction, 2 * P * 4 / 1e9));  // all-to-all + all-gather of the buffer
    CHECK(near(s.comm_exposed, s.reduction));
    CHECK(s.gather == 0);
    CHECK(near(s.optimizer, P / 1e9));
    CHECK(near(s.step(), 0.01 + s.reduction + s.optimizer));
  }
  SUBCASE("stage 2 with 3 micro-batches: a reduce-scatter each, the all-gather after the update, the shard's update") {
    EngineConfig c = make_config(2, {}, 3);
    c.zero.overlap_comm = false;
    const StepCost s = predict_step(layout, c, 1, rates, 0.01);
    CHECK(near(s.loop, 0.03));
    CHECK(near(s.reduction, 3 * P * 4 / 1e9));
    CHECK(near(s.gather, P * 4 / 1e9));
    CHECK(near(s.optimizer, P / n / 1e9));
  }
  SUBCASE("stage 3 with overlap: gathers hidden under the previous unit's compute") {
    EngineConfig c = make_config(3);
    c.zero.overlap_comm = true;
    const double g = 4096.0 * n * 4 / 1e9;  // one unit's all-gather
    // A long loop: every prefetched gather is hidden; the first is not.
    // Each unit's gradient is reduced from its own buffer: u1's under the
    // backward, u0's (the last, half the gradient) after it.
    StepCost s = predict_step(layout, c, 0, rates, 1.0);
    CHECK(near(s.gather, 3 * g));  // forward u0 u1, backward u0 (u1 reused)
    CHECK(near(s.reduction, P * 4 / 1e9));
    CHECK(near(s.comm_exposed, g + P / 2 * 4 / 1e9));
    // No loop: everything is exposed.
    s = predict_step(layout, c, 0, rates, 0.0);
    CHECK(near(s.comm_exposed, 3 * g + P * 4 / 1e9));
    // bf16 gradients reduced in fp32 are packed: one bucket of both units, exposed whole.
    c.compute_dtype = DType::bf16;
    s = predict_step(layout, c, 0, rates, 1.0);
    CHECK(near(s.comm_exposed, g / 2 + P * 4 / 1e9));  // the first bf16 gather, the bucket
  }
  SUBCASE("stage 3 with the parameters on nvme: each fetch reads the unit's shard, waited for with its gather") {
    EngineConfig c = make_config(3);
    c.zero.overlap_comm = false;
    c.offload.param.device = OffloadDevice::nvme;
    c.offload.param.nvme_path = "/nonexistent-is-not-opened";
    c.offload.param.max_in_cpu = 0;
    MachineRates r = rates;
    r.disk_read_file = 0.5e-3;
    const double g = 4096.0 * n * 4 / 1e9;            // one unit's all-gather
    const double read = 4096.0 * 4 / 2e9 + 0.5e-3;    // one unit's shard from disk
    const StepCost s = predict_step(layout, c, 0, r, 0.0);
    CHECK(near(s.gather, 3 * g));                      // forward u0 u1, backward u0
    CHECK(near(s.swap, 3 * read + P / n * 4 / 1e9));   // the reads, and the shards written after the update
    CHECK(near(s.comm_exposed, 3 * (g + read) + P * 4 / 1e9));
  }
  SUBCASE("collectives scale to other world sizes by the bus-bandwidth factor") {
    const FlatLayout l4 = two_units(4).layout(4);
    EngineConfig c = make_config(0);
    c.zero.overlap_comm = false;
    const StepCost s = predict_step(l4, c, 0, rates, 0.0);
    const double P4 = 2 * 4096 * 4;
    CHECK(near(s.reduction, 2 * P4 * 4 / 1e9 * (0.75 / 0.5)));
    CHECK(predict_step(two_units(1).layout(1), c, 0, linear_rates(1), 0.0).reduction == 0);
  }
  SUBCASE("nvme optimizer offload: states read and written, hidden under the update when pipelined") {
    EngineConfig c = make_config(1);
    c.offload.optimizer.device = OffloadDevice::nvme;
    c.offload.optimizer.nvme_path = "/nonexistent-is-not-opened";
    const double bytes = P / n * 4 * 2;  // exp_avg and exp_avg_sq of the shard
    StepCost s = predict_step(layout, c, 0, rates, 0.0);
    CHECK(near(s.swap, bytes / 2e9 + bytes / 1e9));
    CHECK(near(s.swap_exposed, std::max(s.swap, s.optimizer) - s.optimizer));
    c.offload.optimizer.pipeline_read = false;
    s = predict_step(layout, c, 0, rates, 0.0);
    CHECK(near(s.swap_exposed, s.swap));
    // Each swap file's own cost: 2 units x 1 sub-group x 2 states, read and written.
    MachineRates per_file = rates;
    per_file.disk_read_file = 0.5e-3;
    per_file.disk_write_file = 1e-3;
    CHECK(near(predict_step(layout, c, 0, per_file, 0.0).swap, bytes / 2e9 + bytes / 1e9 + 4 * 1.5e-3));
    // Shards of 8192 elements: 4096-element sub-groups double the files.
    const FlatLayout wide = two_units(4).layout(2);
    const double one = predict_step(wide, c, 0, per_file, 0.0).swap;
    c.offload.sub_group_size = 4096;
    CHECK(near(predict_step(wide, c, 0, per_file, 0.0).swap - one, 4 * 1.5e-3));
    MachineRates no_disk = rates;
    no_disk.disk_read = no_disk.disk_write = 0;
    CHECK_THROWS_WITH_AS(predict_step(layout, c, 0, no_disk, 0.0), doctest::Contains("calibrate with --nvme-path"),
                         ConfigError);
  }
  SUBCASE("a calibration at 1 rank cannot predict collectives") {
    CHECK_THROWS_WITH_AS(predict_step(layout, make_config(0), 0, linear_rates(1), 0.0),
                         doctest::Contains("2 or more ranks"), ConfigError);
  }
  SUBCASE("Muon's Newton-Schulz and exchange are not modelled: an error, not a number without them") {
    EngineConfig c = make_config(1);
    c.optimizer.kind = OptimizerKind::muon;
    CHECK_THROWS_WITH_AS(predict_step(layout, c, 0, rates, 0.0), doctest::Contains("does not cover optimizer.type Muon"),
                         ConfigError);
  }
}

TEST_CASE("cross_host_traffic: a steady step's bytes between hosts, per ZeRO++ option, in closed form") {
  // Units of 1000, 7 and 5000 elements at 4 ranks, hosts of 2: padded to
  // multiples of 64; bf16 parameters, fp32 gradients (packed: one bucket).
  ModelDescription m;
  for (const std::int64_t n : {1000, 7, 5000}) {
    m.units.push_back({fmt::format("u{}", n), {{fmt::format("u{}.w", n), {n}, 0}}});
  }
  const int N = 4, L = 2, R = N - L, H = N / L;
  const FlatLayout l = m.layout(N);
  std::uint64_t all = 0, but_last = 0;  // padded elements of every unit, of all but the last
  for (std::size_t u = 0; u < 3; ++u) {
    all += l.units()[u].padded;
    if (u < 2) but_last += l.units()[u].padded;
  }
  EngineConfig c = make_config(3);
  c.compute_dtype = DType::bf16;
  const CrossHostTraffic plain = cross_host_traffic(l, c, L);
  // 2U - 1 gathers: each rank's shard (2 B) to the R ranks of the other host.
  CHECK(plain.parameter_gathers == R * 2 * (all + but_last));
  CHECK(plain.gradient_reduction == R * 4 * all);  // one all-to-all of fp32 blocks
  CHECK(plain.norm == static_cast<std::uint64_t>(N * R * 48));
  CHECK(cross_host_traffic(l, c, 0).total() == 0);  // one host
  CHECK(cross_host_traffic(l, c, N).total() == 0);
  CHECK_THROWS_AS(cross_host_traffic(l, c, 3), ConfigError);

  // qwZ: int8 chunks (codes, padding to 4 bytes, one scale per 2048).
  EngineConfig q = c;
  q.zero.zeropp.quantized_weights = true;
  q.zero.zeropp.weight_block_size = 2048;
  std::uint64_t chunks = 0, chunks_but_last = 0;
  for (std::size_t u = 0; u < 3; ++u) {
    const std::uint64_t shard = l.units()[u].shard;
    const std::uint64_t bytes = (shard + 3) / 4 * 4 + 4 * ((shard + 2047) / 2048);
    chunks += bytes;
    if (u < 2) chunks_but_last += bytes;
  }
  CHECK(cross_host_traffic(l, q, L).parameter_gathers == N * R * (chunks + chunks_but_last));

  // hpZ over a host: only the forward crosses; over 4 ranks (two hosts per
  // group) the backward's gathers cross too, each rank's quarter to 2 others.
  EngineConfig h = c;
  h.zero.zeropp.hpz_partition_size = 2;
  CHECK(cross_host_traffic(l, h, L).parameter_gathers == R * 2 * all);
  h.zero.zeropp.hpz_partition_size = 4;
  CHECK(cross_host_traffic(l, h, L).parameter_gathers == R * 2 * all + N * 2 * (but_last / 4) * 2);
  // With 2 micro-batches the second forward is the group's as well.
  h.gradient_accumulation_steps = 2;
  CHECK(cross_host_traffic(l, h, L).parameter_gathers == R * 2 * all + N * 2 * ((all + 2 * but_last) / 4) * 2);

  // qgZ: the hop across hosts, H - 1 int4 chunks of each rank's block.
  EngineConfig g = c;
  g.zero.zeropp.quantized_gradients = true;
  g.zero.zeropp.gradient_bits = 4;
  g.zero.zeropp.gradient_block_size = 2048;
  const std::uint64_t block = all / N;
  const std::uint64_t chunk = ((block + 1) / 2 + 3) / 4 * 4 + 4 * ((block + 2047) / 2048);
  CHECK(cross_host_traffic(l, g, L).gradient_reduction == N * (H - 1) * chunk);
  // All three, against plain: at least the 3.5x issue 35 asks for (here
  // about 5x: bf16 parameters cross once as int8 instead of twice, fp32
  // gradients as int4).
  EngineConfig z = q;
  z.zero.zeropp.hpz_partition_size = 2;
  z.zero.zeropp.quantized_gradients = true;
  z.zero.zeropp.gradient_bits = 4;
  z.zero.zeropp.gradient_block_size = 2048;
  const CrossHostTraffic zpp = cross_host_traffic(l, z, L);
  CHECK(zpp.total() == N * R * chunks + N * (H - 1) * chunk + N * R * 48);
  CHECK(static_cast<double>(plain.total()) / static_cast<double>(zpp.total()) > 3.5);
}

TEST_CASE("across hosts the link carries each collective's cross-host bytes; ZeRO++ shortens the step") {
  const int n = 4;
  const FlatLayout layout = two_units(n).layout(n);
  MachineRates rates = linear_rates(n);
  // Collectives of no cost but the link: 100 Mbit/s, hosts of 2 ranks.
  for (CollectiveRates* c : {&rates.all_to_all, &rates.all_gather, &rates.all_reduce}) c->seconds = {0.0, 0.0};
  rates.ranks_per_node = 2;
  rates.link_bandwidth = 12.5e6;
  EngineConfig c = make_config(3);
  c.zero.overlap_comm = false;
  const StepCost plain = predict_step(layout, c, 0, rates, 0.0);
  const CrossHostTraffic t = cross_host_traffic(layout, c, 2);
  CHECK(plain.cross_host_bytes == static_cast<double>(t.total()));
  // Every rank's bytes through its host's link (2 ranks), summed: the
  // step's bytes (the norm aside, which the model does not time) / hosts / rate.
  CHECK(near(plain.comm_exposed, static_cast<double>(t.total() - t.norm) / 2 / rates.link_bandwidth));
  EngineConfig z = c;
  z.zero.zeropp.quantized_weights = true;
  z.zero.zeropp.hpz_partition_size = 2;
  z.zero.zeropp.quantized_gradients = true;
  const StepCost zpp = predict_step(layout, z, 0, rates, 0.0);
  CHECK(zpp.comm_exposed < plain.comm_exposed / 4);
  // Without the link term (one host) the options cost only their kernels.
  rates.ranks_per_node = 0;
  rates.quantize_rate = 1e9;
  CHECK(predict_step(layout, z, 0, rates, 0.0).cross_host_bytes == 0);
}

TEST_CASE("calibration files round-trip and name what is wrong") {
  const MachineRates r = linear_rates(3);
  const MachineRates back = MachineRates::from_json(r.to_json(), "calib.json");
  CHECK(back.world_size == 3);
  CHECK(back.optimizer_bandwidth == r.optimizer_bandwidth);
  CHECK(back.all_gather.seconds == r.all_gather.seconds);
  nlohmann::json j = r.to_json();
  j.erase("disk_read");
  CHECK_THROWS_WITH_AS(MachineRates::from_json(j, "calib.json"), "calib.json: missing key 'disk_read'", ConfigError);
  j = r.to_json();
  j["all_to_all"]["bytes"] = {2000.0, 1000.0};
  CHECK_THROWS_WITH_AS(MachineRates::from_json(j, "calib.json"), doctest::Contains("calib.json: all_to_all: entry 1"),
                       ConfigError);
  j = r.to_json();
  j["world_size"] = "four";
  CHECK_THROWS_WITH_AS(MachineRates::from_json(j, "calib.json"), doctest::Contains("key 'world_size' has the wrong type"),
                       ConfigError);
  CHECK_THROWS_AS(MachineRates::from_file("/nonexistent/calib.json"), IoError);
}

TEST_CASE("calibrate() measures every rate, the same on every rank") {
  Communicator& comm = world();
  const int n = comm.world_size();
  const fs::path dir = fs::temp_directory_path() / "zs-test-calibrate";
  fs::create_directories(dir);
  CalibrateOptions o;
  o.nvme_path = dir.string();
  o.optimizer_elements = 1 << 20;
  o.disk_bytes = 4 << 20;
  o.max_collective_bytes = 1 << 20;
  const MachineRates r = calibrate(comm, o);
  CHECK(r.world_size == n);
  CHECK(r.optimizer_bandwidth > 1e8);
  CHECK(r.disk_read > 0);
  CHECK(r.disk_write > 0);
  if (n == 1) {
    CHECK(r.all_gather.bytes.empty());
  } else {
    CHECK(r.all_gather.bytes.size() == 5);  // 4 KiB ... 1 MiB by 4x
    CHECK(r.all_to_all.seconds.size() == 5);
    CHECK(r.all_reduce.seconds.back() > 0);
  }
  // Rank 0's figures, broadcast, equal this rank's.
  std::vector<float> mine = {static_cast<float>(r.optimizer_bandwidth), static_cast<float>(r.disk_read),
                             static_cast<float>(r.disk_write)};
  std::vector<float> root = mine;
  comm.broadcast(root.data(), root.size(), DType::f32, 0);
  CHECK(mine == root);
  comm.barrier();
  CHECK(fs::is_empty(dir));  // every rank's probe file is removed
  comm.barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
  o.disk_bytes = 1000;
  CHECK_THROWS_AS(calibrate(comm, o), ConfigError);
}
