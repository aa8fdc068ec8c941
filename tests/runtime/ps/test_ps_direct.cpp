// parameter_server.push "direct" ([Note: parameter-server layout] in
// runtime/ps/param_server.h): one worker is bitwise the one-rank
// all-reduce engine (stages 1 and 3, servers' state in memory or on nvme,
// 1-3 servers); W workers' pushes are each one update (SGD's result is the
// sum of every push, whatever their order), no worker trains on its own
// update older than s steps and installs replies that arrived before
// they were due; with staleness_aware_lr a push that missed tau updates
// is applied at lr / max(1, tau); checkpoints and a late set_parameters are
// refused by name, workers that start from different parameters named;
// with communication_data_type bf16 the pushed gradients are rounded once
// to bf16, and a server that reads another dtype names the worker; a worker that dies leaves the others training and is
// named by the server (run by "ps_worker_leaves", which tells Open MPI to
// keep the job going).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "offload/io/fault_injection.h"
#include "runtime/engine/engine.h"
#include "tests/runtime/ps/ps_model.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

EngineConfig direct(EngineConfig c, int servers, int staleness) {
  c.parameter_server.servers = servers;
  c.parameter_server.staleness = staleness;
  c.parameter_server.push = PsPushMode::direct;
  return c;
}

}  // namespace

TEST_CASE("parameter_server direct: one worker trains bitwise as the one-rank engine") {
  const int N = world().world_size();
  const int servers = N - 1;  // one worker at every world size
  const std::unique_ptr<Communicator> alone = workers_of(servers);
  for (const int stage : {1, 3}) {
    for (const bool nvme : {false, true}) {
      for (const int staleness : {0, 2}) {
        CAPTURE(stage);
        CAPTURE(nvme);
        CAPTURE(staleness);
        const EngineConfig c = config(stage, nvme, 1, 0, 0);
        ParameterServerStats served;
        const std::optional<Run> got = train(direct(c, servers, staleness), world(), 5, 0, &served);
        if (alone == nullptr) {
          CHECK(served.pushes == 5);
          CHECK(served.max_lag <= staleness);
          // One worker: the updates a push missed are its own since the
          // reply its parameters came from.
          CHECK(served.max_update_lag == served.max_lag);
          CHECK(served.left.empty());
          continue;
        }
        const std::optional<Run> want = train(c, *alone, 5);
        REQUIRE(got.has_value());
        // Step k's forward reads the parameters of a step in [k - s, k]
        // (the newest reply that arrived), never older than the last.
        REQUIRE(got->forward_sums.size() == want->forward_sums.size());
        std::size_t last = 0;
        for (std::size_t k = 0; k < got->forward_sums.size(); ++k) {
          CAPTURE(k);
          const std::size_t oldest = std::max(last, k >= static_cast<std::size_t>(staleness) ? k - staleness : 0);
          std::optional<std::size_t> version;
          for (std::size_t v = oldest; v <= k && !version; ++v) {
            if (got->forward_sums[k] == want->forward_sums[v]) version = v;
          }
          REQUIRE(version.has_value());
          last = *version;
        }
        CHECK(got->params == want->params);
        CHECK(got->forward_sums.front() != got->forward_sums.back());
        CHECK(got->client.server_updates == 5);  // the last reply's count
      }
    }
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: a worker trains on a reply that arrived before it was due") {
  // Staleness 3 allows parameters 3 steps old; a worker that pauses 200 ms
  // after each step has every earlier reply in by its next push (a server
  // answers one push of this model in well under a millisecond), so it
  // installs them then: some installed reply is less than 3 steps old.
  const EngineConfig c = direct(sgd_config(1, 0.0), 1, 3);
  {
    Model m(c, world());
    if (m.e.is_parameter_server()) {
      m.e.serve();
      CHECK(m.e.served_stats().max_lag <= 3);
    } else {
      for (int s = 1; s <= 5; ++s) {
        m.step(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      const std::vector<std::int64_t>& lags = m.e.parameter_server_stats().lags;
      REQUIRE(!lags.empty());
      CHECK(*std::max_element(lags.begin(), lags.end()) <= 3);
      CHECK(*std::min_element(lags.begin(), lags.end()) < 3);
    }
  }  // the workers' goodbyes
  world().barrier();
}

TEST_CASE("parameter_server direct: every worker's push is one update of the servers' state") {
  const int N = world().world_size();
  if (N < 3) return;  // two workers at least
  for (const int servers : {1, 2}) {
    if (N - servers < 2) continue;
    const int W = N - servers;
    const std::unique_ptr<Communicator> workers = workers_of(servers);
    for (const int staleness : {0, 2}) {
      for (const int stage : {1, 3}) {
        CAPTURE(servers);
        CAPTURE(staleness);
        CAPTURE(stage);
        // The gradients do not depend on the parameters: SGD's result is
        // the initial values minus lr times the sum of every push, in any
        // order; the all-reduce engine at lr x W subtracts the same sum.
        const EngineConfig sgd = sgd_config(stage, 0.0);
        EngineConfig scaled = sgd;
        scaled.optimizer.lr = sgd.optimizer.lr * static_cast<float>(W);
        ParameterServerStats served;
        const int steps = 6;
        const std::optional<Run> got = train(direct(sgd, servers, staleness), world(), steps, 0, &served);
        if (workers == nullptr) {
          CHECK(served.pushes == steps * W);
          // A push of step k was computed on the worker's own update of
          // step max(0, k - 1 - s) or a later one.
          CHECK(served.max_lag <= staleness);
          CHECK(served.lr_scale_sum == steps * W);  // no staleness_aware_lr: every scale 1
          CHECK(served.left.empty());
          continue;
        }
        const std::optional<Run> want = train(scaled, *workers, steps);
        REQUIRE(got.has_value());
        // Each server's window: the worker whose push it applied last
        // holds every update of it; the others miss the updates applied
        // after their last push. With 2 servers that need not be the same
        // worker for both windows, so every element must be right on
        // some worker.
        std::vector<double> off;  // per element, |got - want|
        REQUIRE(got->params.size() == want->params.size());
        for (std::size_t p = 0; p < got->params.size(); ++p) {
          REQUIRE(got->params[p].size() == want->params[p].size());
          for (std::size_t i = 0; i < got->params[p].size(); ++i) {
            off.push_back(std::fabs(static_cast<double>(got->params[p][i]) - want->params[p][i]));
          }
        }
        workers->all_reduce(off.data(), off.size(), DType::f64, ReduceOp::min);
        CHECK(*std::max_element(off.begin(), off.end()) < 1e-4);
        // Each reply counts the updates applied so far: at least the
        // worker's own, all of them in the reply to the last push applied
        // (one server; with more, a worker's count is its servers'
        // fewest).
        CHECK(got->client.server_updates >= steps);
        double newest = static_cast<double>(got->client.server_updates);
        workers->all_reduce(&newest, 1, DType::f64, ReduceOp::max);
        if (servers == 1) CHECK(newest == steps * W);
        CHECK(newest <= steps * W);
        CHECK(got->forward_sums.front() != got->forward_sums.back());
      }
    }
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: staleness_aware_lr applies a push that missed tau updates at lr / max(1, tau)") {
  const int N = world().world_size();
  if (N < 3) return;  // two workers at least
  const int W = N - 1;
  const std::unique_ptr<Communicator> workers = workers_of(1);
  // Every push carries step 1's gradient g of rank 0 (the model's
  // gradients do not depend on the parameters), so SGD ends at
  // p0 - lr g (the sum of the pushes' lr scales) in any order. Worker 1
  // pauses after each step while the others go on, so its pushes miss
  // their updates.
  EngineConfig c = direct(sgd_config(1, 0.0), 1, 2);
  c.parameter_server.staleness_aware_lr = true;
  const int steps = 6;
  std::vector<double> served(3);  // the server's lr scale sum, largest lag in updates, pushes
  std::vector<std::vector<float>> got;
  {
    Model m(c, world());
    if (m.e.is_parameter_server()) {
      m.e.serve();
      const ParameterServerStats& st = m.e.served_stats();
      served = {st.lr_scale_sum, static_cast<double>(st.max_update_lag), static_cast<double>(st.pushes)};
    } else {
      for (int s = 1; s <= steps; ++s) {
        m.step(1, 0);
        if (world().rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      got = m.gathered();
    }
  }  // the workers' goodbyes
  // The server is the last rank.
  world().broadcast(served.data(), served.size(), DType::f64, N - 1);
  CHECK(served[2] == steps * W);
  // Some push missed two updates or more, so its scale was 1/2 or less.
  CHECK(served[1] >= 2);
  CHECK(served[0] < served[2] - 0.49);
  if (workers != nullptr) {
    // The worker whose push was applied last holds every update.
    const float lr = c.optimizer.lr;
    std::vector<double> off;
    for (std::size_t p = 0; p < got.size(); ++p) {
      for (std::size_t i = 0; i < got[p].size(); ++i) {
        const double want = static_cast<double>(sine_init_value(static_cast<int>(p), i)) -
                            lr * static_cast<double>(cosine_grad_value(1, 0, 0, static_cast<int>(p), i)) * served[0];
        off.push_back(std::fabs(got[p][i] - want));
      }
    }
    workers->all_reduce(off.data(), off.size(), DType::f64, ReduceOp::min);
    CHECK(*std::max_element(off.begin(), off.end()) < 1e-5);
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: checkpoints and a late set_parameters are refused by name") {
  const int N = world().world_size();
  {
    Model m(direct(sgd_config(1, 0.0), N - 1, 1), world());
    if (m.e.is_parameter_server()) {
      m.e.serve();
    } else {
      CHECK_THROWS_WITH_AS(m.e.save_checkpoint((swap_root() / "direct").string(), {}),
                           doctest::Contains("\"parameter_server.push\" = \"direct\""), ConfigError);
      CHECK_THROWS_WITH_AS(m.e.load_checkpoint((swap_root() / "direct").string()),
                           doctest::Contains("load_checkpoint()"), ConfigError);
      m.step(1);
      const std::vector<float> v(m.e.layout().param(1).numel, 0.5f);
      CHECK_THROWS_WITH_AS(m.e.set_parameter(1, v), doctest::Contains("set_parameters() after step 1"), ConfigError);
      m.step(2);  // still usable
      CHECK(m.e.gather_parameter(1).size() == v.size());
    }
  }  // the workers' goodbyes
  world().barrier();
}

TEST_CASE("parameter_server direct: communication_data_type bf16 pushes gradients rounded once to bf16") {
  const int N = world().world_size();
  EngineConfig c = direct(sgd_config(1, 0.0), N - 1, 0);  // one worker
  c.communication_data_type = DType::bf16;
  const int steps = 6;
  const std::optional<Run> got = train(c, world(), steps);
  if (got) {
    // SGD on one worker: p = p - lr * g, step by step, g as the server
    // widened it from bf16 (the gradients do not depend on p).
    const float lr = c.optimizer.lr;
    double from_bf16 = 0, from_f32 = 0;  // largest differences
    for (std::size_t p = 0; p < got->params.size(); ++p) {
      for (std::size_t i = 0; i < got->params[p].size(); ++i) {
        float want = sine_init_value(static_cast<int>(p), i), unrounded = want;
        for (int k = 1; k <= steps; ++k) {
          const float g = cosine_grad_value(k, 0, 0, static_cast<int>(p), i);
          want -= lr * bf16_to_float(float_to_bf16(g));
          unrounded -= lr * g;
        }
        from_bf16 = std::max(from_bf16, static_cast<double>(std::fabs(got->params[p][i] - want)));
        from_f32 = std::max(from_f32, static_cast<double>(std::fabs(got->params[p][i] - unrounded)));
      }
    }
    CHECK(from_bf16 < 1e-6);
    CHECK(from_f32 > 1e-5);  // the rounding is seen
    // The first push's parameters in fp32, then every gradient in bf16.
    std::uint64_t elements = 0;
    for (const auto& p : got->params) elements += p.size();
    CHECK(got->client.bytes_pushed >= elements * 4 + steps * elements * 2);
    CHECK(got->client.bytes_pushed < elements * 4 + steps * elements * 3);
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: a worker and a server that push gradients in different dtypes are named") {
  const int N = world().world_size();
  EngineConfig c = direct(sgd_config(1, 0.0), N - 1, 0);
  if (world().rank() == 0) {
    c.communication_data_type = DType::bf16;
    CHECK_THROWS_WITH(Model(c, world()), doctest::Contains("pushes gradients as bf16, the server reads f32"));
  } else {
    Model m(c, world());
    REQUIRE(m.e.is_parameter_server());
    m.e.serve();
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: workers that start from different parameters are named") {
  const int N = world().world_size();
  if (N < 3) return;  // one worker: nothing to disagree with
  {
    // Worker w's p1 differs from every other's: the first push to arrive
    // sets the servers' parameters, every other worker's first step fails.
    Model m(direct(sgd_config(1, 0.0), 1, 0), world());
    if (m.e.is_parameter_server()) {
      m.e.serve();
    } else {
      const int w = m.e.dp_communicator().rank();
      m.e.set_parameter(1, std::vector<float>(m.e.layout().param(1).numel, 0.5f + static_cast<float>(w)));
      double accepted = 0;
      try {
        m.step(1);
        accepted = 1;
      } catch (const Error& e) {
        const std::string what = e.what();
        CHECK(what.find(fmt::format("worker {}'s step 1: its parameters", w)) != std::string::npos);
        CHECK(what.find("differ from worker") != std::string::npos);
      }
      m.e.dp_communicator().all_reduce(&accepted, 1, DType::f64, ReduceOp::sum);
      CHECK(accepted == 1.0);
    }
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: a server's I/O error reaches every worker, whose pushes share its state") {
  const bool server = world().rank() == world().world_size() - 1;
  // The server's first swap write (the first update's states) fails.
  if (server) inject_io_fault(IoFault{.op = IoOp::write, .nth = 1, .err = EIO});
  {
    Model m(direct(config(2, true, 1, 0, 0), 1, 0), world());
    if (m.e.is_parameter_server()) {
      m.e.serve();  // answers every push (with the error) until the workers go
      clear_io_fault();
    } else {
      // Every worker's first pull carries it, the first to arrive's or not.
      CHECK_THROWS_WITH(m.step(1), doctest::Contains("parameter server 0"));
      CHECK_THROWS_WITH(m.step(2), doctest::Contains("unusable"));
    }
  }
  world().barrier();
}

TEST_CASE("parameter_server direct: a pause of every worker past the timeout is no departure") {
  const int N = world().world_size();
  EngineConfig c = direct(sgd_config(1, 0.0), 1, 1);
  c.observe.collective_timeout_s = 1.5;
  {
    Model m(c, world());
    if (m.e.is_parameter_server()) {
      m.e.serve();
      CHECK(m.e.served_stats().left.empty());
      CHECK(m.e.served_stats().pushes == 4 * (N - 1));
    } else {
      for (int s = 1; s <= 4; ++s) {
        // The workers push step 2 together, then every one pauses (an
        // evaluation, say) for twice the timeout.
        if (s == 2) m.e.dp_communicator().barrier();
        if (s == 3) std::this_thread::sleep_for(std::chrono::milliseconds(3000));
        m.step(s);
      }
    }
  }  // the workers' goodbyes
  world().barrier();
}

// Run by the "ps_worker_leaves" test only (tests/meson.build), under an
// mpirun told to keep the job going when a rank dies: worker 1 kills
// itself before its push of step 3; the other workers train 24 steps, 5 s
// in all, and the server names worker 1 and its last step once it has
// been silent for the collective timeout while they went on.
TEST_CASE("parameter_server direct: a worker that dies leaves the others training") {
  if (std::getenv("ZS_TEST_PS_WORKER_LEAVES") == nullptr) return;
  const int N = world().world_size();
  REQUIRE(N >= 3);
  EngineConfig c = direct(sgd_config(1, 0.0), 1, 2);
  c.observe.collective_timeout_s = 3;
  // Units small enough that every reply is sent eagerly: a reply to the
  // dead worker does not wait for it (see the Note).
  Model m(c, world(), false, {{{7}, {57}}, {{301}}, {{0}, {5}}});
  if (m.e.is_parameter_server()) {
    m.e.serve();
    const ParameterServerStats served = m.e.served_stats();
    REQUIRE(served.left.size() == 1);
    CHECK(served.left[0].worker == 1);
    CHECK(served.left[0].step == 2);     // its last push
    CHECK(served.left[0].version == 0);  // computed on the initial parameters (s = 2)
    CHECK(served.pushes == 24 * (N - 2) + 2);
    CHECK(served.left[0].updates < served.pushes);  // taken as gone while the others trained
    fmt::print("server: {} pushes applied, worker {} left after step {}, at update {}\n", served.pushes,
               served.left[0].worker, served.left[0].step, served.left[0].updates);
    return;
  }
  for (int s = 1; s <= 24; ++s) {
    if (s == 3 && m.e.dp_communicator().rank() == 1) std::raise(SIGKILL);
    if (s > 3) std::this_thread::sleep_for(std::chrono::milliseconds(240));
    m.step(s);
  }
  const ParameterServerClientStats stats = m.e.parameter_server_stats();
  CHECK(stats.pushes == 24);
  for (std::int64_t lag : stats.lags) CHECK(lag <= 2);
  for (const std::vector<float>& p : m.gathered()) {
    for (float x : p) REQUIRE(std::isfinite(x));
  }
  fmt::print("worker {}: trained 24 steps\n", m.e.dp_communicator().rank());
}
