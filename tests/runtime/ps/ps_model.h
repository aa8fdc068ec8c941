// The model and runs the parameter-server tests share (test_parameter_server.cpp,
// test_ps_direct.cpp): odd units whose forward sums every parameter and
// whose gradients do not depend on the parameters (tests/support), so
// runs with different update orders are comparable in closed form.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

namespace zeroshard::testing {

inline std::filesystem::path swap_root() { return std::filesystem::temp_directory_path() / "zs-test-ps"; }

// AdamW with weight decay and clipping (the scale comes from the whole
// step's norm) at `stage`; the optimizer's state in host memory or on nvme.
inline EngineConfig config(int stage, bool nvme, int accumulation, int servers, int staleness) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.01f;
  EngineConfig c = make_config(stage, h, accumulation, 0.05);
  c.offload.optimizer.device = nvme ? OffloadDevice::nvme : OffloadDevice::cpu;
  if (nvme) c.offload.optimizer.nvme_path = swap_root().string();
  c.offload.sub_group_size = 4096;
  c.parameter_server.servers = servers;
  c.parameter_server.staleness = staleness;
  return c;
}

struct Model {
  Engine e;
  std::vector<std::vector<ParamId>> params;  // per unit
  std::vector<double> forward_sums;          // per micro-batch: every parameter the forward read

  /// `units`: the parameters' shapes, unit by unit.
  Model(const EngineConfig& c, Communicator& comm, bool extra_parameter = false,
        const std::vector<std::vector<std::vector<std::int64_t>>>& units = kOddUnits)
      : e(c, comm) {
    int p = 0;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const UnitId unit = e.add_unit(fmt::format("unit{}", u));
      params.emplace_back();
      for (const auto& shape : units[u]) params.back().push_back(e.add_parameter(unit, fmt::format("p{}", p++), shape));
    }
    if (extra_parameter) e.add_parameter(0, "extra", {3});
    e.finalize();
    if (!e.is_parameter_server()) set_parameters(e, params, sine_init_value);
  }

  /// `grad_rank`: the rank the gradients are made for (-1: this worker's
  /// index among the ranks that train).
  void step(int s, int grad_rank = -1) {
    const int data_rank = grad_rank >= 0 ? grad_rank : e.dp_communicator().rank();
    for (int m = 0; m < e.config().gradient_accumulation_steps; ++m) {
      double sum = 0;
      for (UnitId u = 0; u < static_cast<UnitId>(params.size()); ++u) {
        e.unshard(u);
        for (ParamId id : params[static_cast<std::size_t>(u)]) {
          const std::span<const float> v = e.param(id);
          for (float x : v) sum += x;
        }
        e.reshard(u);
      }
      forward_sums.push_back(sum);
      for (UnitId u = static_cast<UnitId>(params.size()) - 1; u >= 0; --u) {
        e.unshard(u);
        for (ParamId id : params[static_cast<std::size_t>(u)]) {
          const std::span<float> g = e.grad(id);
          for (std::size_t i = 0; i < g.size(); ++i) g[i] += cosine_grad_value(s, m, data_rank, id, i);
        }
        e.reduce_gradients(u);
        e.reshard(u);
      }
      e.step();
    }
  }

  std::vector<std::vector<float>> gathered() {
    std::vector<std::vector<float>> out;
    for (const auto& list : params) {
      for (ParamId id : list) out.push_back(e.gather_parameter(id));
    }
    return out;
  }
};

// What the workers saw and ended with.
struct Run {
  std::vector<double> forward_sums;
  std::vector<std::vector<float>> params;
  ParameterServerClientStats client;  ///< after the gather (every pull installed)
};

// `steps` steps; after step `reset_at` (0: never) parameter p1 is set
// again on every worker. On a server: serve() until the workers end, then
// (when given) its stats into `served`.
inline std::optional<Run> train(const EngineConfig& c, Communicator& comm, int steps, int reset_at = 0,
                                ParameterServerStats* served = nullptr) {
  Model m(c, comm);
  if (m.e.is_parameter_server()) {
    m.e.serve();
    if (served != nullptr) *served = m.e.served_stats();
    return std::nullopt;
  }
  for (int s = 1; s <= steps; ++s) {
    m.step(s);
    if (s == reset_at) {
      std::vector<float> v(m.e.layout().param(1).numel);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f - 0.01f * static_cast<float>(i % 13);
      m.e.set_parameter(1, v);
    }
  }
  std::vector<std::vector<float>> params = m.gathered();
  return Run{m.forward_sums, std::move(params), m.e.parameter_server_stats()};
}

// The workers' communicator as the default placement makes it: the first
// world - S ranks (null on a server).
inline std::unique_ptr<Communicator> workers_of(int servers) {
  const bool server = world().rank() >= world().world_size() - servers;
  auto comm = world().split(server ? 1 : 0, world().rank());
  if (server) return nullptr;
  return comm;
}

}  // namespace zeroshard::testing
