// A synthetic training loop that drives an Engine on any compute device
// through a copy function (the loop's own host <-> device traffic), and the
// configurations the device-engine tests compare with the cpu engine:
// tests/cuda/test_engine_device.cpp (a GPU) and
// tests/runtime/engine/test_simulated_device.cpp (the simulated device of
// runtime/sharding/device_ops.h, every CI run, world sizes 1-4).
//
// The model: parameters of 7, [0, 8], 57, 1, 10001 and [3, 5] elements in
// three units. Each micro-batch reads every parameter x (forward, unit by
// unit) and adds the gradient (x - target) * loss_scale into the engine's
// gradient buffer (backward, in reverse), target depending on the element,
// the micro-step and the rank. Four optimizer steps.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/engine/engine.h"

namespace zeroshard::testing {

/// Copies `bytes` bytes between the engine's memory and the host
/// (to_host: dst is host memory).
using DeviceCopy = std::function<void(void* dst, const void* src, std::size_t bytes, bool to_host)>;

inline float device_run_load(const std::byte* p, DType t, std::size_t i) {
  if (t == DType::f32) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
}

inline void device_run_store(std::byte* p, DType t, std::size_t i, float v) {
  if (t == DType::f32) {
    std::memcpy(p + 4 * i, &v, 4);
    return;
  }
  const std::uint16_t h = t == DType::bf16 ? float_to_bf16(v) : float_to_f16(v);
  std::memcpy(p + 2 * i, &h, 2);
}

/// What a run leaves to compare: gathered master weights and optimizer
/// states (host copies) and the boundary steps' gradient norms.
struct DeviceRun {
  std::vector<std::vector<float>> master, states;
  std::vector<double> norms;
};

/// Declares the model in `e`, trains four steps with `copy`, gathers.
/// Collective (every rank calls it).
inline DeviceRun run_device_model(Engine& e, const DeviceCopy& copy) {
  static const std::vector<std::vector<std::int64_t>> shapes = {{7}, {0, 8}, {57}, {1}, {10001}, {3, 5}};
  std::vector<UnitId> units;
  std::vector<ParamId> params;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (i % 2 == 0) units.push_back(e.add_unit(fmt::format("unit{}", i / 2)));
    params.push_back(e.add_parameter(units.back(), fmt::format("p{}", i), shapes[i]));
  }
  e.finalize();
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::vector<float> v(e.layout().param(params[i]).numel);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = std::sin(0.37f * static_cast<float>(k + 13 * i)) * 0.5f;
    e.set_parameter(params[i], v);
  }
  const DType dt = e.compute_dtype();
  const std::size_t es = dtype_size(dt);
  DeviceRun run;
  const int accumulation = static_cast<int>(e.config().gradient_accumulation_steps);
  for (int micro = 0; micro < 4 * accumulation; ++micro) {
    std::vector<std::vector<float>> values(params.size());
    for (UnitId u : units) {
      e.unshard(u);
      for (std::size_t i = 0; i < params.size(); ++i) {
        const ParamInfo& p = e.layout().param(params[i]);
        if (p.unit != u) continue;
        std::vector<std::byte> raw(p.numel * es);
        copy(raw.data(), e.param_data(params[i], dt), raw.size(), true);
        for (std::size_t k = 0; k < p.numel; ++k) values[i].push_back(device_run_load(raw.data(), dt, k));
      }
      e.reshard(u);
    }
    for (auto it = units.rbegin(); it != units.rend(); ++it) {
      e.unshard(*it);
      for (std::size_t i = 0; i < params.size(); ++i) {
        const ParamInfo& p = e.layout().param(params[i]);
        if (p.unit != *it) continue;
        void* g = e.grad_data(params[i], dt);
        std::vector<std::byte> raw(p.numel * es);
        copy(raw.data(), g, raw.size(), true);
        for (std::size_t k = 0; k < p.numel; ++k) {
          const auto phase = k + static_cast<std::size_t>(micro) + 3 * static_cast<std::size_t>(e.rank());
          const float target = 0.1f * static_cast<float>(phase % 5);
          const float grad = (values[i][k] - target) * static_cast<float>(e.loss_scale());
          device_run_store(raw.data(), dt, k, device_run_load(raw.data(), dt, k) + grad);
        }
        copy(g, raw.data(), raw.size(), false);
      }
      e.reduce_gradients(*it);
      e.reshard(*it);
    }
    const StepResult res = e.step();
    if (res.boundary) run.norms.push_back(res.grad_norm);
  }
  const int nstates = optimizer_state_count(e.config().optimizer);
  for (ParamId p : params) {
    run.master.push_back(e.gather_master(p));
    for (int k = 0; k < nstates; ++k) run.states.push_back(e.gather_optimizer_state(p, k));
  }
  return run;
}

/// One configuration of the comparison, with a name for messages.
struct DeviceCase {
  std::string name;
  EngineConfig config;
};

/// Stages 0-3 x {fp32 AdamW, bf16 AdamW, fp16 Adam, fp32 SGD with
/// momentum, bf16 Muon (on the 3 x 5 matrix)} x accumulation {1, 2} x {small buckets with overlap, one
/// bucket without}, plus offload at stages 1-3: offload_optimizer cpu and
/// nvme, and at stage 3 with offload_param cpu and nvme (nvme files under
/// `swap_root`); `pin_memory` sets offload_*.pin_memory in those (page-locked
/// staging and host tier: needs CUDA and a device).
inline std::vector<DeviceCase> device_cases(const std::filesystem::path& swap_root, bool pin_memory = false) {
  struct Precision {
    DType dtype;
    OptimizerKind kind;
  };
  std::vector<DeviceCase> out;
  for (const Precision prec : {Precision{DType::f32, OptimizerKind::adamw}, Precision{DType::bf16, OptimizerKind::adamw},
                               Precision{DType::f16, OptimizerKind::adam}, Precision{DType::f32, OptimizerKind::sgd},
                               Precision{DType::bf16, OptimizerKind::muon}}) {
    EngineConfig base;
    base.compute_dtype = prec.dtype;
    base.loss_scale.initial_scale_power = 8;  // no fp16 overflow: every step applies
    base.optimizer.kind = prec.kind;
    base.optimizer.lr = 0.05f;
    base.optimizer.weight_decay = 0.01f;
    base.optimizer.momentum = prec.kind == OptimizerKind::sgd ? 0.9f : 0.0f;
    base.optimizer.muon.params = {"p5"};  // the 3 x 5 matrix; the rest AdamW (Muon's staging through the host)
    const std::string p = fmt::format("{} {}", dtype_name(prec.dtype), optimizer_name(prec.kind));
    for (int stage = 0; stage <= 3; ++stage) {
      for (const int accumulation : {1, 2}) {
        for (const std::int64_t bucket : {std::int64_t{1000}, std::int64_t{500000000}}) {
          EngineConfig c = base;
          c.zero.stage = stage;
          c.zero.reduce_bucket_size = c.zero.allgather_bucket_size = bucket;
          c.zero.overlap_comm = bucket == 1000;
          c.gradient_accumulation_steps = accumulation;
          out.push_back({fmt::format("{} stage {} accumulation {} bucket {}", p, stage, accumulation, bucket), c});
        }
      }
      if (stage == 0) continue;
      struct Offload {
        OffloadDevice optimizer, param;
      };
      for (const Offload o : {Offload{OffloadDevice::cpu, OffloadDevice::none}, Offload{OffloadDevice::nvme, OffloadDevice::none},
                              Offload{OffloadDevice::cpu, OffloadDevice::cpu}, Offload{OffloadDevice::nvme, OffloadDevice::nvme}}) {
        if (o.param != OffloadDevice::none && stage != 3) continue;
        EngineConfig c = base;
        c.zero.stage = stage;
        c.zero.reduce_bucket_size = 1000;
        c.gradient_accumulation_steps = 2;
        c.offload.optimizer.device = o.optimizer;
        c.offload.optimizer.pin_memory = c.offload.param.pin_memory = pin_memory;
        c.offload.optimizer.nvme_path = swap_root.string();
        c.offload.param.device = o.param;
        c.offload.param.nvme_path = (swap_root / "param").string();
        c.offload.param.max_in_cpu = 0;
        c.offload.sub_group_size = 4096;
        out.push_back({fmt::format("{} stage {} offload_optimizer {} offload_param {}", p, stage,
                                   offload_device_name(o.optimizer), offload_device_name(o.param)),
                       c});
      }
    }
  }
  return out;
}

/// The case's configuration without offload: the reference (offload is
/// bitwise equal to no offload on the cpu engine, tests/runtime/engine/test_offload.cpp).
inline EngineConfig without_offload(EngineConfig c) {
  const std::int64_t sub_group = c.offload.sub_group_size;  // also splits the gradient statistics
  c.offload = OffloadConfig{};
  c.offload.sub_group_size = sub_group;
  return c;
}

/// Checks `got` against `want`: master weights and optimizer states bitwise,
/// norms within `norm_rel` (0: exactly).
inline void check_device_run(const DeviceRun& got, const DeviceRun& want, double norm_rel) {
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  REQUIRE(got.master.size() == want.master.size());
  for (std::size_t i = 0; i < want.master.size(); ++i) CHECK_MESSAGE(same(got.master[i], want.master[i]), "master weights of p" << i);
  REQUIRE(got.states.size() == want.states.size());
  for (std::size_t i = 0; i < want.states.size(); ++i) CHECK_MESSAGE(same(got.states[i], want.states[i]), "optimizer state array " << i);
  REQUIRE(got.norms.size() == want.norms.size());
  for (std::size_t i = 0; i < want.norms.size(); ++i) {
    CHECK(want.norms[i] > 0.0);
    if (norm_rel == 0.0) {
      CHECK(got.norms[i] == want.norms[i]);
    } else {
      CHECK(got.norms[i] == doctest::Approx(want.norms[i]).epsilon(norm_rel));
    }
  }
}

}  // namespace zeroshard::testing
