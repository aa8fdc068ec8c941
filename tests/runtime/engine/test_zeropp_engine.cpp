// ZeRO++ through the Engine, at world sizes 1-4: a model of units with odd
// and empty parameters ([57], [0], [10001], [7, 3]: empty and uneven
// shards), rank r's loss (r + 1) x 0.5 sum (w - t)^2 so every rank's
// gradient differs.
//  - hpZ: losses and parameters bitwise those of plain stage 3 (fp32 and
//    bf16, one and two micro-batches), the secondary shards in the ledger;
//  - qwZ: what the loop reads is every rank's shard quantized and
//    dequantized, bit for bit; after an SGD step the master weights are
//    within the stated bound of plain stage 3's (the step's gradient used
//    the dequantized weights);
//  - qgZ: after an SGD step the parameters are within the quantization
//    bound of plain's (the fp32 reduction), and two runs give the same bits;
//  - composition: an fp16 overflow on one rank skips the step on every
//    rank, nvme offload gives the bits of no offload, a checkpoint round
//    trip continues bitwise and holds exact master weights, a dp x tp
//    mesh, refused combinations.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/mesh.h"
#include "core/error.h"
#include "kernels/quant/symmetric_quant.h"
#include "runtime/engine/engine.h"
#include "runtime/sharding/unsharder.h"
#include "tests/support/scratch_files.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::vector<std::vector<std::int64_t>> kUnits = {{57}, {0}, {10001}, {7, 3}};

float init_value(ParamId p, std::size_t i) {
  return 0.6f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(p)) * (i % 50 < 25 ? 1.0f : 0.01f);
}
float target(ParamId p, std::size_t i) { return 0.3f * std::cos(0.11f * static_cast<float>(i) + static_cast<float>(p)); }

EngineConfig zpp_config(int stage, DType dtype, bool qwz, int hpz, bool qgz) {
  EngineConfig c = sgd_config(stage, 0.0);
  c.compute_dtype = dtype;
  if (dtype == DType::f16) c.loss_scale = LossScaleConfig{.initial_scale_power = 8};  // gradients x 256 fit fp16
  c.zero.zeropp.quantized_weights = qwz;
  c.zero.zeropp.hpz_partition_size = hpz;
  c.zero.zeropp.quantized_gradients = qgz;
  return c;
}

float read(Engine& e, ParamId p, std::size_t i) {
  switch (e.compute_dtype()) {
    case DType::bf16: return bf16_to_float(e.param_as<bf16>(p)[i].bits);
    case DType::f16: return f16_to_float(e.param_as<f16>(p)[i].bits);
    default: return e.param(p)[i];
  }
}
void add_grad(Engine& e, ParamId p, std::size_t i, float g) {
  switch (e.compute_dtype()) {
    case DType::bf16: {
      bf16& x = e.grad_as<bf16>(p)[i];
      x.bits = float_to_bf16(bf16_to_float(x.bits) + g);
      return;
    }
    case DType::f16: {
      f16& x = e.grad_as<f16>(p)[i];
      x.bits = float_to_f16(f16_to_float(x.bits) + g);
      return;
    }
    default: e.grad(p)[i] += g;
  }
}

// The model above on an Engine; run() does forward/backward/step.
struct Model {
  explicit Model(const EngineConfig& c, Communicator& comm = world()) : e(c, comm) { build(false); }
  Model(const EngineConfig& c, const Mesh& mesh) : e(c, mesh) { build(true); }
  void build(bool mesh) {
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      const UnitId id = e.add_unit(fmt::format("u{}", u));
      units.push_back(id);
      std::vector<ParamId> ps;
      for (std::size_t k = 0; k < kUnits[u].size(); ++k) {
        const std::string name = fmt::format("u{}.p{}", u, k);
        ps.push_back(mesh ? e.add_parameter(id, name, {kUnits[u][k]}, 0, TensorParallel::replicated())
                          : e.add_parameter(id, name, {kUnits[u][k]}));
      }
      params.push_back(ps);
    }
    e.finalize();
    set_parameters(e, params, init_value);
  }
  // One micro-batch: forward (the loss), backward (gradients, reduced);
  // `bad` puts an Inf into this rank's first gradient.
  double micro_batch(int rank_weight, bool bad = false) {
    double loss = 0;
    for (UnitId u : units) {
      e.unshard(u);
      for (ParamId p : params[static_cast<std::size_t>(u)]) {
        for (std::size_t i = 0; i < e.layout().param(p).numel; ++i) {
          const double d = read(e, p, i) - target(p, i);
          loss += 0.5 * rank_weight * d * d;
        }
      }
      e.reshard(u);
    }
    for (auto it = units.rbegin(); it != units.rend(); ++it) {
      const UnitId u = *it;
      e.unshard(u);
      for (ParamId p : params[static_cast<std::size_t>(u)]) {
        for (std::size_t i = 0; i < e.layout().param(p).numel; ++i) {
          const float g = bad && i == 0 ? std::numeric_limits<float>::infinity()
                                        : static_cast<float>(rank_weight) * (read(e, p, i) - target(p, i));
          add_grad(e, p, i, g * static_cast<float>(e.loss_scale()));
        }
      }
      e.reduce_gradients(u);
      e.reshard(u);
    }
    return loss;
  }
  StepResult step(int micro = 1, bool bad = false) {
    for (int m = 0; m < micro; ++m) {
      losses.push_back(micro_batch(e.rank() + 1, bad));
      const StepResult r = e.step();
      if (m + 1 == micro) return r;
    }
    return {};
  }
  std::vector<std::vector<float>> parameters() {
    std::vector<std::vector<float>> out;
    for (const auto& ps : params) {
      for (ParamId p : ps) out.push_back(e.gather_parameter(p));
    }
    return out;
  }
  std::vector<std::vector<float>> masters() {
    std::vector<std::vector<float>> out;
    for (const auto& ps : params) {
      for (ParamId p : ps) out.push_back(e.gather_master(p));
    }
    return out;
  }
  Engine e;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;
  std::vector<double> losses;
};

bool bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (a[k].size() != b[k].size()) return false;
    if (!a[k].empty() && std::memcmp(a[k].data(), b[k].data(), a[k].size() * 4) != 0) return false;
  }
  return true;
}

// hpZ sizes at this world size: every divisor above 1.
std::vector<int> hpz_sizes() {
  std::vector<int> out;
  for (int k = 2; k <= world().world_size(); ++k) {
    if (world().world_size() % k == 0) out.push_back(k);
  }
  return out;
}

}  // namespace

TEST_CASE("hpZ: losses and parameters bitwise those of plain stage 3; the secondary shards in the ledger") {
  for (DType t : {DType::f32, DType::bf16}) {
    for (int micro : {1, 2}) {
      Model plain(zpp_config(3, t, false, 1, false));
      for (int s = 0; s < 3; ++s) plain.step(micro);
      const auto want = plain.parameters();
      for (int k : hpz_sizes()) {
        for (int per_node : {0, k}) {
          CAPTURE(dtype_name(t));
          CAPTURE(micro);
          CAPTURE(k);
          CAPTURE(per_node);
          EngineConfig c = zpp_config(3, t, false, k, false);
          c.zero.zeropp.ranks_per_node = per_node;
          Model m(c);
          CHECK(m.e.ledger().current(MemCategory::secondary) ==
                hpz_secondary_bytes(m.e.layout(), UnsharderOptions{.gather = true, .dtype = t, .hpz_partition_size = k}));
          for (int s = 0; s < 3; ++s) m.step(micro);
          CHECK(m.losses == plain.losses);
          CHECK(bitwise(m.parameters(), want));
        }
      }
    }
  }
}

TEST_CASE("qwZ: the loop reads the dequantized shards bit for bit; master weights within the bound of plain's") {
  const int n = world().world_size();
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(t));
    EngineConfig c = zpp_config(3, t, true, 1, false);
    c.zero.zeropp.weight_block_size = 64;
    const kernels::SymQuantFormat f = c.zero.zeropp.weight_format();
    Model q(c);
    Model plain(zpp_config(3, t, false, 1, false));
    // Each unit's full flat buffer of the compute values, every rank's
    // shard quantized and dequantized by the reference kernels.
    for (UnitId u : q.units) {
      const UnitInfo& info = q.e.layout().unit(u);
      std::vector<float> flat(info.padded, 0.0f);
      for (ParamId p : q.params[static_cast<std::size_t>(u)]) {
        const auto v = q.e.gather_parameter(p);
        std::copy(v.begin(), v.end(), flat.begin() + static_cast<std::ptrdiff_t>(q.e.layout().param(p).offset));
      }
      std::vector<unsigned char> typed(info.padded * dtype_size(t) + 4), want(typed.size());
      for (std::size_t i = 0; i < info.padded; ++i) {
        if (t == DType::f32) std::memcpy(typed.data() + 4 * i, &flat[i], 4);
        if (t == DType::bf16) {
          const std::uint16_t b = float_to_bf16(flat[i]);
          std::memcpy(typed.data() + 2 * i, &b, 2);
        }
      }
      for (int r = 0; r < n; ++r) {
        std::vector<float> chunk(kernels::sym_quant_chunk_bytes(info.shard, f) / 4 + 1);
        const std::size_t at = static_cast<std::size_t>(r) * info.shard * dtype_size(t);
        kernels::quantize_symmetric_reference(typed.data() + at, t, info.shard, f, chunk.data());
        kernels::dequantize_symmetric_reference(chunk.data(), info.shard, f, want.data() + at, t);
      }
      q.e.unshard(u);
      for (ParamId p : q.params[static_cast<std::size_t>(u)]) {
        const ParamInfo& pi = q.e.layout().param(p);
        for (std::size_t i = 0; i < pi.numel; ++i) {
          float w = 0;
          if (t == DType::f32) std::memcpy(&w, want.data() + 4 * (pi.offset + i), 4);
          if (t == DType::bf16) {
            std::uint16_t b;
            std::memcpy(&b, want.data() + 2 * (pi.offset + i), 2);
            w = bf16_to_float(b);
          }
          if (float_bits(read(q.e, p, i)) != float_bits(w)) {
            CAPTURE(i);
            FAIL_CHECK("gathered parameter differs from the dequantized shard");
            break;
          }
        }
      }
      q.e.reshard(u);
    }
    const auto before = q.masters();
    q.step();
    plain.step();
    // SGD: w' = w - lr * (sum over ranks of (r + 1)(w_q - t)) / n; the
    // difference to plain's is lr (n + 1) / 2 |w_q - w| <= lr (n + 1) / 2 x
    // the element's bound, plus the roundings of the gradients (fp32: a few
    // ulp; bf16: each rank's gradient and the stored mean, 2^-8 of the
    // largest gradient each, on both sides).
    const auto got = q.masters(), want = plain.masters();
    for (std::size_t k = 0; k < got.size(); ++k) {
      float amax = 0, gmax = 0;
      for (std::size_t i = 0; i < before[k].size(); ++i) {
        amax = std::max(amax, std::fabs(before[k][i]));
        gmax = std::max(gmax, (n + 1) / 2.0f * std::fabs(before[k][i] - target(static_cast<ParamId>(k), i)));
      }
      const double bound = 0.5 * (n + 1) / 2.0 * (amax / 127.0) * (0.5 + std::ldexp(1.0, -16)) +
                           0.5 * (t == DType::bf16 ? 4 * std::ldexp(1.0, -8) * gmax : 1e-6);
      for (std::size_t i = 0; i < got[k].size(); ++i) {
        CAPTURE(k);
        CAPTURE(i);
        CHECK(std::fabs(got[k][i] - want[k][i]) <= bound);
      }
    }
  }
}

TEST_CASE("qgZ: parameters within the quantization bound of the fp32 reduction's; two runs give the same bits") {
  const int n = world().world_size();
  for (int per_node = 1; per_node <= n; ++per_node) {
    if (n % per_node != 0) continue;
    for (int stage : {2, 3}) {
      CAPTURE(per_node);
      CAPTURE(stage);
      EngineConfig c = zpp_config(stage, DType::f32, false, 1, true);
      c.zero.zeropp.ranks_per_node = per_node;
      c.zero.zeropp.gradient_block_size = 64;
      Model a(c), b(c), plain(zpp_config(stage, DType::f32, false, 1, false));
      const auto before = a.masters();
      a.step();
      b.step();
      plain.step();
      const auto got = a.masters(), want = plain.masters();
      CHECK(bitwise(got, b.masters()));
      // Every quantization's scale is at most (the largest gradient, x L
      // for a node's sum) / 7; at most n of them in step 1 and n / L nodes
      // in step 4; the update divides the sum by n and multiplies by lr.
      for (std::size_t k = 0; k < got.size(); ++k) {
        float gmax = 0;
        for (std::size_t i = 0; i < before[k].size(); ++i) {
          gmax = std::max(gmax, static_cast<float>(n) * std::fabs(before[k][i] - target(static_cast<ParamId>(k), i)));
        }
        const double e = 0.5 + std::ldexp(1.0, -16);
        const double sum_bound = n == 1 ? 0.0 : n * (gmax / 7.0) * e + (n / per_node) * (per_node * gmax / 7.0) * e;
        const double bound = 0.5 * sum_bound / n + 1e-6;
        for (std::size_t i = 0; i < got[k].size(); ++i) CHECK(std::fabs(got[k][i] - want[k][i]) <= bound);
      }
    }
  }
}

TEST_CASE("ZeRO++ composes: fp16 overflow, nvme offload, checkpoints, dp x tp and dp x pp meshes; the rest is refused") {
  const int n = world().world_size();
  auto all_three = [&](DType t) {
    EngineConfig c = zpp_config(3, t, true, n % 2 == 0 ? 2 : 1, true);
    c.zero.zeropp.ranks_per_node = n % 2 == 0 ? 2 : 1;
    return c;
  };
  SUBCASE("an fp16 overflow on the last rank skips the step on every rank") {
    Model m(all_three(DType::f16));
    CHECK(m.step().applied);
    const auto before = m.parameters();
    const double scale = m.e.loss_scale();
    // The last rank's Inf travels as a NaN block scale through qgZ.
    const bool bad = m.e.rank() == n - 1;
    m.losses.push_back(m.micro_batch(m.e.rank() + 1, bad));
    const StepResult r = m.e.step();
    CHECK(r.skipped);
    CHECK(m.e.skipped_steps() == 1);
    CHECK(m.e.loss_scale() <= scale);  // halved once the hysteresis is used up
    CHECK(bitwise(m.parameters(), before));
    CHECK(m.step().applied);
  }
  SUBCASE("nvme offload of parameters and optimizer state: the bits of no offload") {
    const fs::path root = fs::temp_directory_path() / "zs-test-zeropp-nvme";
    make_empty_dir_on_rank0(world(), root);
    EngineConfig c = all_three(DType::bf16);
    Model base(c);
    c.offload.optimizer.device = OffloadDevice::nvme;
    c.offload.optimizer.nvme_path = (root / "opt").string();
    c.offload.param.device = OffloadDevice::nvme;
    c.offload.param.nvme_path = (root / "param").string();
    c.offload.param.max_in_cpu = 0;
    {
      Model off(c);
      for (int s = 0; s < 2; ++s) {
        base.step(2);
        off.step(2);
      }
      CHECK(off.losses == base.losses);
      CHECK(bitwise(off.parameters(), base.parameters()));
    }
    remove_dir_on_rank0(world(), root);
  }
  SUBCASE("a checkpoint holds the exact master weights and continues bitwise") {
    const fs::path dir = fs::temp_directory_path() / "zs-test-zeropp-ckpt";
    make_empty_dir_on_rank0(world(), dir);
    const EngineConfig c = all_three(DType::bf16);
    Model a(c);
    a.step();
    a.step();
    const auto masters = a.masters();
    a.e.save_checkpoint(dir.string(), {}, 0, "t");
    a.step();
    a.step();
    Model b(c);
    b.e.load_checkpoint(dir.string(), "t");
    CHECK(bitwise(b.masters(), masters));  // never the quantized copy
    b.step();
    b.step();
    CHECK(bitwise(b.parameters(), a.parameters()));
    remove_dir_on_rank0(world(), dir);
  }
  SUBCASE("on a dp x tp and a dp x pp mesh the options run over the data-parallel group") {
    if (n != 4) return;
    for (const MeshShape shape : {MeshShape{.dp = 2, .tp = 2}, MeshShape{.dp = 2, .pp = 2}}) {
      CAPTURE(shape.tp);
      Mesh mesh(world(), shape);
      EngineConfig c = zpp_config(3, DType::f32, true, 2, true);
      EngineConfig plain_c = zpp_config(3, DType::f32, false, 1, false);
      Model z(c, mesh), plain(plain_c, mesh);
      for (int s = 0; s < 2; ++s) {
        CHECK(z.step().applied);
        plain.step();
      }
      // Quantized weights and gradients: close to plain's, not equal.
      const auto a = z.parameters(), b = plain.parameters();
      for (std::size_t k = 0; k < a.size(); ++k) {
        for (std::size_t i = 0; i < a[k].size(); ++i) CHECK(std::fabs(a[k][i] - b[k][i]) <= 0.05);
      }
    }
  }
  SUBCASE("refused: hpZ not dividing the world; error feedback under fp16's dynamic loss scale") {
    EngineConfig c = zpp_config(3, DType::f32, false, n + 1, false);
    CHECK_THROWS_WITH_AS(Model{c}, doctest::Contains("does not divide the data-parallel world size"), ConfigError);
    EngineConfig f = zpp_config(3, DType::f16, false, 1, true);
    f.zero.zeropp.error_feedback = true;
    CHECK_THROWS_WITH_AS(f.validate(), doctest::Contains("fp16's dynamic loss scale"), ConfigError);
  }
}
