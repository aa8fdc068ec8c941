// The parameter-server layout ([Note: parameter-server layout] in
// runtime/ps/param_server.h): with staleness 0 the workers train bitwise as
// the all-reduce engine on the same ranks (stages 1-3, servers' state in
// memory or on nvme, 1 or 2 servers, gradient accumulation and clipping,
// parameters set mid-run); with staleness s the forward of step k reads
// exactly the parameters of step k - s, and a gather installs the newest;
// roles follow the config; bad configs and another model are named.
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/collective_error.h"
#include "comm/node_groups.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "offload/io/fault_injection.h"
#include "runtime/engine/engine.h"
#include "runtime/ps/ps_roles.h"
#include "tests/runtime/ps/ps_model.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

TEST_CASE("parameter_server: synchronous servers train bitwise as the all-reduce engine") {
  const int N = world().world_size();
  for (int servers = 1; servers <= 2 && servers < N; ++servers) {
    const std::unique_ptr<Communicator> workers = workers_of(servers);
    for (int stage = 1; stage <= 3; ++stage) {
      for (const bool nvme : {false, true}) {
        for (const int accumulation : {1, 2}) {
          if (accumulation == 2 && (nvme || stage != 2)) continue;  // one accumulating case
          CAPTURE(servers);
          CAPTURE(stage);
          CAPTURE(nvme);
          CAPTURE(accumulation);
          const EngineConfig ps = config(stage, nvme, accumulation, servers, 0);
          EngineConfig plain = ps;
          plain.parameter_server = ParameterServerConfig{};
          const std::optional<Run> got = train(ps, world(), 4, 2);
          if (workers == nullptr) {
            CHECK(!got.has_value());
            continue;
          }
          const std::optional<Run> want = train(plain, *workers, 4, 2);
          REQUIRE(got.has_value());
          CHECK(got->forward_sums == want->forward_sums);
          CHECK(got->params == want->params);
          // The run trained: the last forward read other values than the first.
          CHECK(got->forward_sums.front() != got->forward_sums.back());
        }
      }
    }
  }
  world().barrier();
}

TEST_CASE("parameter_server: with staleness s the forward of step k reads the parameters of step k - s") {
  const int N = world().world_size();
  const int servers = 1;
  const std::unique_ptr<Communicator> workers = workers_of(servers);
  for (const int stage : {1, 3}) {
    // The gradients do not depend on the parameters, so the servers' updates
    // are the synchronous run's, s steps late on the workers.
    const std::optional<Run> sync = train(config(stage, false, 1, servers, 0), world(), 6);
    for (const int s : {1, 2, 4}) {
      CAPTURE(stage);
      CAPTURE(s);
      ParameterServerStats served;
      const std::optional<Run> stale = train(config(stage, false, 1, servers, s), world(), 6, 0, &served);
      if (workers == nullptr) {
        // Each update records the version it was computed on: step k's
        // gradient saw the update of step max(0, k - 1 - s), so the
        // largest lag over 6 steps is s.
        CHECK(served.pushes == 6 * (N - servers));
        CHECK(served.max_lag == s);
        continue;
      }
      REQUIRE(stale->forward_sums.size() == sync->forward_sums.size());
      for (std::size_t k = 0; k < stale->forward_sums.size(); ++k) {
        const std::size_t version = k >= static_cast<std::size_t>(s) ? k - static_cast<std::size_t>(s) : 0;
        CHECK(stale->forward_sums[k] == sync->forward_sums[version]);
      }
      // The gather installs every pull in flight: the servers' last update.
      CHECK(stale->params == sync->params);
    }
  }
  (void)N;
  world().barrier();
}

TEST_CASE("parameter_server: the step breakdown shows each worker's push, pull wait and staleness") {
  // wall_clock_breakdown on: after step k a worker with staleness s holds
  // the update of step max(0, k - s), so its staleness is min(k, s); the
  // push's sends took time, and the run report has the fields per rank.
  for (const int s : {0, 2}) {
    CAPTURE(s);
    EngineConfig c = config(2, false, 1, 1, s);
    c.observe.wall_clock_breakdown = true;
    c.steps_per_print = 1000;  // gathered, not printed
    Model m(c, world());
    if (m.e.is_parameter_server()) {
      m.e.serve();
      continue;
    }
    for (int k = 1; k <= 4; ++k) {
      m.step(k);
      const StepFigures& f = m.e.last_step_figures();
      CHECK(f.ps_staleness == std::min(k, s));
      CHECK(f.ps_push > 0);
      CHECK(f.ps_push <= f.comm_wait);
      CHECK(f.ps_pull_wait <= f.comm_wait);
    }
    const nlohmann::json report = m.e.observe_report();
    REQUIRE(report["per_rank_mean_ms"].size() == static_cast<std::size_t>(world().world_size() - 1));
    CHECK(report["per_rank_mean_ms"][0]["ps_staleness"].get<double>() == doctest::Approx(s == 0 ? 0.0 : 1.75));
  }
  world().barrier();
}

TEST_CASE("parameter_server: roles, the workers' world and the refused calls") {
  const int N = world().world_size();
  EngineConfig c = config(2, false, 1, 1, 0);
  {
    Model m(c, world());  // its workers say goodbye when it goes, ending serve()
    CHECK(m.e.is_parameter_server() == (world().rank() == N - 1));
    if (m.e.is_parameter_server()) {
      CHECK_THROWS_AS(m.e.step(), InvariantError);
      m.e.serve();
    } else {
      CHECK(m.e.world_size() == N - 1);
      CHECK(m.e.rank() == world().rank());
      CHECK_THROWS_WITH_AS(m.e.save_checkpoint_async((swap_root() / "ckpt").string(), {}),
                           doctest::Contains("parameter_server.servers"), ConfigError);
      CHECK_THROWS_WITH_AS(m.e.gather_optimizer_state(0, 0), doctest::Contains("the optimizer state is on the servers"),
                           ConfigError);
      CHECK_THROWS_AS(m.e.serve(), InvariantError);
    }
  }
  world().barrier();
}

TEST_CASE("parameter_server: bad configurations name their key") {
  const auto parse = [](const std::string& text) {
    return EngineConfig::from_json(nlohmann::json::parse(text), "ps.json");
  };
  CHECK_THROWS_WITH_AS(
      parse(R"({"zero_optimization": {"stage": 2}, "parameter_server": {"servers": 1, "staleness": -1}})"),
      doctest::Contains("\"parameter_server.staleness\" = -1"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2}, "parameter_server": {"servers": -2}})"),
                       doctest::Contains("\"parameter_server.servers\" = -2"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 0}, "parameter_server": {"servers": 1}})"),
                       doctest::Contains("zero_optimization.stage 1, 2 or 3"), ConfigError);
  CHECK_THROWS_WITH_AS(
      parse(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}, "parameter_server": {"servers": 1}})"),
      doctest::Contains("needs fp32 training"), ConfigError);
  CHECK_THROWS_WITH_AS(
      parse(R"({"zero_optimization": {"stage": 2}, "parameter_server": {"servers": 1, "placement": [3]}})"),
      doctest::Contains("parameter_server.placement"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"communication_data_type": "fp16", "zero_optimization": {"stage": 2},
                                 "parameter_server": {"servers": 1, "push": "direct"}})"),
                       doctest::Contains("\"communication_data_type\" = \"fp16\" cannot carry"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2},
                                 "parameter_server": {"servers": 1, "staleness_aware_lr": true}})"),
                       doctest::Contains("\"parameter_server.staleness_aware_lr\" = true needs"), ConfigError);
  CHECK(parse(R"({"zero_optimization": {"stage": 2},
                  "parameter_server": {"servers": 1, "push": "direct", "staleness_aware_lr": true}})")
            .parameter_server.staleness_aware_lr);
  // bf16 makes a "direct" push's gradients bf16; "reduce" pushes stay fp32.
  const EngineConfig bf16_direct = parse(R"({"communication_data_type": "bf16", "zero_optimization": {"stage": 2},
                                            "parameter_server": {"servers": 1, "push": "direct"}})");
  CHECK(bf16_direct.parameter_server.push_grad_dtype(bf16_direct.communication_data_type) == DType::bf16);
  const EngineConfig bf16_reduce = parse(R"({"communication_data_type": "bf16", "zero_optimization": {"stage": 2},
                                            "parameter_server": {"servers": 1}})");
  CHECK(bf16_reduce.parameter_server.push_grad_dtype(bf16_reduce.communication_data_type) == DType::f32);
  CHECK(bf16_direct.parameter_server.push_grad_dtype(std::nullopt) == DType::f32);
  const EngineConfig idle = parse(R"({"zero_optimization": {"stage": 2}, "parameter_server": {"staleness": 2}})");
  REQUIRE(idle.warnings.size() == 1);
  CHECK(idle.warnings[0] ==
        "ps.json: \"parameter_server.staleness\" = 2 has no effect without "
        "parameter_server.servers");
  const EngineConfig idle_lr = parse(R"({"zero_optimization": {"stage": 2},
                                         "parameter_server": {"push": "direct", "staleness_aware_lr": true}})");
  REQUIRE(idle_lr.warnings.size() == 1);
  CHECK(idle_lr.warnings[0] ==
        "ps.json: \"parameter_server.staleness_aware_lr\" has no effect without parameter_server.servers");
  // World-dependent: no worker left, a host that runs no rank.
  const int N = world().world_size();
  EngineConfig all = config(2, false, 1, N, 0);
  const std::string no_worker = fmt::format("\"parameter_server.servers\" = {}", N);
  CHECK_THROWS_WITH_AS(Engine(all, world()), doctest::Contains(no_worker.c_str()), ConfigError);
  EngineConfig nowhere = config(2, false, 1, 1, 0);
  nowhere.parameter_server.placement = {"no-such-host.invalid"};
  CHECK_THROWS_WITH_AS(Engine(nowhere, world()),
                       doctest::Contains("\"parameter_server.placement\"[0] = \"no-such-host.invalid\""), ConfigError);
  // This host: its lowest rank serves.
  EngineConfig here = config(2, false, 1, 1, 0);
  here.parameter_server.placement = {this_host_id()};
  {
    ParameterServerRoles roles(world(), here.parameter_server, "test");
    CHECK(roles.servers() == 1);
    CHECK(roles.server_rank(0) == 0);
    CHECK(roles.is_server() == (world().rank() == 0));
    CHECK(roles.workers() == N - 1);
    if (N > 1) CHECK(roles.worker_rank(0) == 1);
  }
  world().barrier();
}

TEST_CASE("parameter_server: a server that declared another model is named on every worker") {
  EngineConfig c = config(2, false, 1, 1, 0);
  const bool server = world().rank() == world().world_size() - 1;
  if (server) {
    Model m(c, world(), true);
    m.e.serve();  // returns once the workers' engines are gone
  } else {
    CHECK_THROWS_WITH(Model(c, world()), doctest::Contains("declared another model than the server's"));
  }
  world().barrier();
}

TEST_CASE("parameter_server: the optimizer state is on the servers, in their ledger") {
  const int N = world().world_size();
  const EngineConfig c = config(2, false, 1, 1, 0);
  Model m(c, world());
  const MemoryLedger& l = m.e.ledger();
  std::uint64_t padded = 0;
  for (const UnitInfo& u : m.e.layout().units()) padded += u.padded;
  if (m.e.is_parameter_server()) {
    // Every worker's shard: parameters, gradients, exp_avg and exp_avg_sq (fp32).
    CHECK(l.current(MemCategory::optimizer_states) == 2 * padded * sizeof(float));
    CHECK(l.current(MemCategory::parameters) == padded * sizeof(float));
    CHECK(l.current(MemCategory::gradients) == padded * sizeof(float));
    m.e.serve();
  } else {
    CHECK(l.current(MemCategory::optimizer_states) == 0);
    CHECK(l.current(MemCategory::master_weights) == 0);
    CHECK(l.current(MemCategory::parameters) == padded * sizeof(float));  // stage 2: full parameters
    CHECK(l.current(MemCategory::gradients) == padded / static_cast<std::size_t>(N - 1) * sizeof(float));
    m.step(1);
  }
}

TEST_CASE("parameter_server: a server's I/O error is the same error on every worker, s steps later") {
  const int servers = 1;
  const bool server = world().rank() >= world().world_size() - servers;
  for (const int s : {0, 1}) {
    CAPTURE(s);
    // The server's first swap write (a worker's first gradient) fails.
    if (server) inject_io_fault(IoFault{.op = IoOp::write, .nth = 1, .err = EIO});
    Model m(config(2, true, 1, servers, s), world());
    if (m.e.is_parameter_server()) {
      m.e.serve();  // answers every push (with the error) until the workers go
      clear_io_fault();
      continue;
    }
    int failed_at = 0;
    std::string what;
    for (int k = 1; k <= 3 && failed_at == 0; ++k) {
      try {
        m.step(k);
      } catch (const Error& e) {
        CHECK(dynamic_cast<const AgreedError*>(&e) != nullptr);
        failed_at = k;
        what = e.what();
      }
    }
    CHECK(failed_at == 1 + s);
    CHECK(what.find("parameter server 0") != std::string::npos);
    CHECK(what.find("'s step 1: ") != std::string::npos);  // the worker whose push arrived first
    CHECK_THROWS_WITH(m.step(4), doctest::Contains("unusable"));
  }
  world().barrier();
}

TEST_CASE("parameter_server: a checkpoint holds the servers' state and resumes as an all-reduce run") {
  const int N = world().world_size();
  const int servers = 1;
  const std::unique_ptr<Communicator> workers = workers_of(servers);
  for (const int stage : {1, 3}) {
    for (const int staleness : {0, 2}) {
      CAPTURE(stage);
      CAPTURE(staleness);
      const fs::path dir = swap_root() / fmt::format("ckpt-{}-{}-{}", N, stage, staleness);
      if (world().rank() == 0) fs::remove_all(dir);
      world().barrier();
      const EngineConfig ps = config(stage, true, 1, servers, staleness);
      EngineConfig plain = ps;
      plain.parameter_server = ParameterServerConfig{};
      std::vector<std::vector<float>> saved;
      {
        Model m(ps, world());
        if (m.e.is_parameter_server()) {
          m.e.serve();
        } else {
          for (int s = 1; s <= 3; ++s) m.step(s);
          m.e.save_checkpoint(dir.string(), {{"step", 3}});  // installs the pulls in flight first
          saved = m.gathered();
        }
      }
      world().barrier();
      // Every rank, as an all-reduce run at another world size: the saved parameters.
      {
        Model back(plain, world());
        back.e.load_checkpoint(dir.string());
        const std::vector<std::vector<float>> loaded = back.gathered();
        if (workers != nullptr) CHECK(loaded == saved);
      }
      if (workers != nullptr && staleness == 0) {
        // The workers as the all-reduce engine: resumed, bitwise the uninterrupted run.
        Model resumed(plain, *workers);
        resumed.e.load_checkpoint(dir.string());
        for (int s = 4; s <= 5; ++s) resumed.step(s);
        Model straight(plain, *workers);
        for (int s = 1; s <= 5; ++s) straight.step(s);
        CHECK(resumed.gathered() == straight.gathered());
        CHECK(resumed.e.gather_optimizer_state(2, 1) == straight.e.gather_optimizer_state(2, 1));
      }
      world().barrier();
      if (world().rank() == 0) fs::remove_all(dir);
    }
  }
}

TEST_CASE("parameter_server: servers resume from an all-reduce checkpoint, at another number of servers too") {
  const int N = world().world_size();
  const fs::path dir = swap_root() / fmt::format("ckpt-load-{}", N);
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  const std::unique_ptr<Communicator> workers = workers_of(1);
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    const EngineConfig ps = config(stage, true, 1, 1, 0);
    EngineConfig plain = ps;
    plain.parameter_server = ParameterServerConfig{};
    std::vector<std::vector<float>> at3, at5;
    if (workers != nullptr) {
      Model straight(plain, *workers);
      for (int s = 1; s <= 3; ++s) straight.step(s);
      straight.e.save_checkpoint(dir.string(), {{"step", 3}}, 0, fmt::format("stage{}", stage));
      at3 = straight.gathered();
      for (int s = 4; s <= 5; ++s) straight.step(s);
      at5 = straight.gathered();
    }
    world().barrier();
    {
      // The same workers with a server: the loaded state continues bitwise.
      Model m(ps, world());
      if (m.e.is_parameter_server()) {
        m.e.serve();
      } else {
        m.e.load_checkpoint(dir.string(), fmt::format("stage{}", stage));
        CHECK(m.gathered() == at3);
        for (int s = 4; s <= 5; ++s) m.step(s);
        CHECK(m.gathered() == at5);
      }
    }
    if (N >= 3) {
      // Two servers, one worker fewer: resharded.
      EngineConfig two = ps;
      two.parameter_server.servers = 2;
      Model m(two, world());
      if (m.e.is_parameter_server()) {
        m.e.serve();
      } else {
        m.e.load_checkpoint(dir.string(), fmt::format("stage{}", stage));
        const std::vector<std::vector<float>> loaded = m.gathered();
        // Worker 0 is a worker in both runs: compare there (the others' at3 is theirs too).
        if (workers != nullptr) CHECK(loaded == at3);
        m.step(4);
        CHECK(m.gathered() != loaded);
      }
    }
    world().barrier();
  }
  if (world().rank() == 0) fs::remove_all(dir);
}
