// The Engine on the cuda compute device against the same Engine on the cpu
// device, on one GPU (NCCL world of size 1): stages 0-3, fp32 / bf16 / fp16,
// AdamW and SGD with momentum, gradient accumulation 1 and 2, small and
// large reduction buckets, overlap on and off, parameters of 0, 1, 7, 57 and
// 10001 elements. The same synthetic training loop drives both engines
// (gradients computed on the host from the parameters the engine hands out,
// added into the engine's gradient buffers); after four steps the master
// weights and optimizer states are bitwise equal, and the global gradient
// norms agree to 1e-12 (their double sums run in different orders:
// kernels/cuda/grad_check.h). The kernels are bitwise the CPU's
// ([Note: bitwise GPU kernels]), so any difference is an engine bug.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/nccl/nccl_communicator.h"
#include "comm/self/self_communicator.h"
#include "core/cuda_check.h"
#include "runtime/engine.h"

using namespace zeroshard;

namespace {

float load_float(const std::byte* p, DType t, std::size_t i) {
  if (t == DType::f32) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
}

void store_float(std::byte* p, DType t, std::size_t i, float v) {
  if (t == DType::f32) {
    std::memcpy(p + 4 * i, &v, 4);
    return;
  }
  const std::uint16_t h = t == DType::bf16 ? float_to_bf16(v) : float_to_f16(v);
  std::memcpy(p + 2 * i, &h, 2);
}

const std::vector<std::vector<std::int64_t>> kShapes = {{7}, {0, 8}, {57}, {1}, {10001}, {3, 5}};

struct Model {
  std::vector<UnitId> units;
  std::vector<ParamId> params;  // one per shape, unit = index / 2
};

Model declare(Engine& e) {
  Model m;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    if (i % 2 == 0) m.units.push_back(e.add_unit(fmt::format("unit{}", i / 2)));
    m.params.push_back(e.add_parameter(m.units.back(), fmt::format("p{}", i), kShapes[i]));
  }
  e.finalize();
  for (std::size_t i = 0; i < m.params.size(); ++i) {
    std::vector<float> v(e.layout().param(m.params[i]).numel);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = std::sin(0.37f * static_cast<float>(k + 13 * i)) * 0.5f;
    e.set_parameter(m.params[i], v);
  }
  return m;
}

// Copies between the engine's memory and the host: memcpy for cpu,
// cudaMemcpy for cuda.
void copy_bytes(const Engine& e, void* dst, const void* src, std::size_t bytes, bool to_host) {
  if (bytes == 0) return;
  if (e.device() == ComputeDevice::cpu) {
    std::memcpy(dst, src, bytes);
  } else {
    ZS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
  }
}

// One micro-batch of a synthetic loss: for every parameter element x the
// gradient is (x - target) * loss_scale with a target that depends on the
// micro-step, added into the engine's gradient buffer in the compute dtype.
void micro_batch(Engine& e, const Model& m, int micro) {
  const DType dt = e.compute_dtype();
  const std::size_t es = dtype_size(dt);
  std::vector<std::vector<float>> values(m.params.size());
  for (UnitId u : m.units) {  // forward: read the parameters
    e.unshard(u);
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      const ParamInfo& p = e.layout().param(m.params[i]);
      if (p.unit != u) continue;
      std::vector<std::byte> raw(p.numel * es);
      copy_bytes(e, raw.data(), e.param_data(m.params[i], dt), raw.size(), true);
      values[i].resize(p.numel);
      for (std::size_t k = 0; k < p.numel; ++k) values[i][k] = load_float(raw.data(), dt, k);
    }
    e.reshard(u);
  }
  for (auto it = m.units.rbegin(); it != m.units.rend(); ++it) {  // backward
    e.unshard(*it);
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      const ParamInfo& p = e.layout().param(m.params[i]);
      if (p.unit != *it) continue;
      void* g = e.grad_data(m.params[i], dt);
      std::vector<std::byte> raw(p.numel * es);
      copy_bytes(e, raw.data(), g, raw.size(), true);
      for (std::size_t k = 0; k < p.numel; ++k) {
        const float target = 0.1f * static_cast<float>((k + static_cast<std::size_t>(micro)) % 5);
        const float grad = (values[i][k] - target) * static_cast<float>(e.loss_scale());
        store_float(raw.data(), dt, k, load_float(raw.data(), dt, k) + grad);
      }
      copy_bytes(e, g, raw.data(), raw.size(), false);
    }
    e.reduce_gradients(*it);
    e.reshard(*it);
  }
}

struct Run {
  std::vector<std::vector<float>> master, states;
  std::vector<double> norms;
};

Run train(Engine& e) {
  const Model m = declare(e);
  Run r;
  const int micro_per_step = static_cast<int>(e.config().gradient_accumulation_steps);
  for (int step = 0; step < 4; ++step) {
    for (int k = 0; k < micro_per_step; ++k) {
      micro_batch(e, m, step * micro_per_step + k);
      const StepResult res = e.step();
      if (res.boundary) r.norms.push_back(res.grad_norm);
    }
  }
  const int nstates = optimizer_state_count(e.config().optimizer);
  for (ParamId p : m.params) {
    r.master.push_back(e.gather_master(p));
    for (int k = 0; k < nstates; ++k) r.states.push_back(e.gather_optimizer_state(p, k));
  }
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("cuda engine: stages 0-3 bitwise equal to the cpu engine") {
  SelfCommunicator host;
  NcclCommunicator nccl(host);
  struct Precision {
    DType dtype;
    OptimizerKind kind;
  };
  for (const Precision prec : {Precision{DType::f32, OptimizerKind::adamw}, Precision{DType::bf16, OptimizerKind::adamw},
                               Precision{DType::f16, OptimizerKind::adam}, Precision{DType::f32, OptimizerKind::sgd}}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (const int accumulation : {1, 2}) {
        for (const std::int64_t bucket : {std::int64_t{1000}, std::int64_t{500000000}}) {
          EngineConfig cfg;
          cfg.zero.stage = stage;
          cfg.zero.reduce_bucket_size = bucket;
          cfg.zero.allgather_bucket_size = bucket;
          cfg.zero.overlap_comm = bucket == 1000;
          cfg.gradient_accumulation_steps = accumulation;
          cfg.compute_dtype = prec.dtype;
          cfg.loss_scale.initial_scale_power = 8;  // no fp16 overflow: every step applies
          cfg.optimizer.kind = prec.kind;
          cfg.optimizer.lr = 0.05f;
          cfg.optimizer.weight_decay = 0.01f;
          cfg.optimizer.momentum = prec.kind == OptimizerKind::sgd ? 0.9f : 0.0f;
          CAPTURE(stage);
          CAPTURE(accumulation);
          CAPTURE(bucket);
          INFO("dtype ", dtype_name(prec.dtype), " optimizer ", optimizer_name(prec.kind));
          Engine cpu(cfg, host);
          Engine gpu(cfg, nccl, host);
          REQUIRE(gpu.device() == ComputeDevice::cuda);
          const Run want = train(cpu), got = train(gpu);
          REQUIRE(got.master.size() == want.master.size());
          for (std::size_t i = 0; i < want.master.size(); ++i) {
            CHECK_MESSAGE(bitwise_equal(got.master[i], want.master[i]), "master weights of p" << i);
          }
          for (std::size_t i = 0; i < want.states.size(); ++i) {
            CHECK_MESSAGE(bitwise_equal(got.states[i], want.states[i]), "optimizer state " << i);
          }
          REQUIRE(got.norms.size() == want.norms.size());
          for (std::size_t i = 0; i < want.norms.size(); ++i) {
            CHECK(got.norms[i] == doctest::Approx(want.norms[i]).epsilon(1e-12));
            CHECK(want.norms[i] > 0.0);
          }
          CHECK(gpu.ledger().current(MemCategory::parameters, MemTier::device) > 0);
        }
      }
    }
  }
}

TEST_CASE("cuda engine: device pointers, stream order and configuration errors") {
  SelfCommunicator host;
  NcclCommunicator nccl(host);
  EngineConfig cfg;
  cfg.zero.stage = 3;
  Engine e(cfg, nccl, host);
  const UnitId u = e.add_unit("u");
  const ParamId p = e.add_parameter(u, "w", {10});
  e.finalize();
  e.set_parameter(p, std::vector<float>(10, 2.0f));
  e.unshard(u);
  cudaPointerAttributes attr{};
  ZS_CUDA_CHECK(cudaPointerGetAttributes(&attr, e.param(p).data()));
  CHECK(attr.type == cudaMemoryTypeDevice);
  e.reshard(u);
  CHECK(e.gather_parameter(p) == std::vector<float>(10, 2.0f));

  // The cuda constructor refuses a host communicator and offload.
  SelfCommunicator other;
  CHECK_THROWS_AS(Engine(cfg, other, host), ConfigError);
  EngineConfig off = cfg;
  off.offload.optimizer.device = OffloadDevice::cpu;
  CHECK_THROWS_AS(Engine(off, nccl, host), ConfigError);
}
