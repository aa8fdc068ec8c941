// Muon on a dp x tp mesh ([Note: Muon on a tensor-parallel mesh] in
// runtime/update/muon_step.h): at every factorisation of 1-4 ranks and
// stages 0-3, fp32 and bf16 compute, matrices split by rows
// (column-parallel), by columns (row-parallel) and replicated over tp,
// beside AdamW parameters, train bit for bit as one rank holding the whole
// matrices (an engine on a SelfCommunicator given the same gradients):
// Newton-Schulz runs on the whole matrix put together from the tp slices,
// and the scale uses the whole shape. The tp owners are recorded in the
// checkpoint manifest and spread over the tp ranks.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/mesh.h"
#include "comm/self/self_communicator.h"
#include "runtime/engine/engine.h"
#include "tests/support/state_format_model.h"
#include "tests/support/scratch_files.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// A parameter: its whole shape and how the tp group splits it.
struct Spec {
  std::string name;
  std::size_t rows, cols;  // whole shape; cols == 0: 1-D of `rows` elements
  int split;               // TensorParallel::split_dim (-1 replicated)
};

// Units; "h.*.mat.*" are Muon's. Split dimensions are multiples of 12, so
// tp = 1-4 divides them.
const std::vector<std::vector<Spec>> kUnits = {
    {{"embed", 11, 7, -1}, {"h.0.mat.qkv", 36, 7, 0}, {"h.0.bias", 13, 0, -1}, {"h.0.mat.proj", 5, 12, 1}},
    {{"h.1.mat.fc", 24, 13, 0}, {"h.1.mat.rep", 9, 6, -1}, {"h.1.mat.out", 13, 24, 1}, {"h.1.ln", 13, 0, -1}}};

OptimizerHyper muon_hyper() {
  OptimizerHyper h;
  h.kind = OptimizerKind::muon;
  h.lr = 3e-3;
  h.weight_decay = 0.01;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.muon.lr = 0.02;
  h.muon.weight_decay = 0.1;
  h.muon.nesterov = true;
  h.muon.scale = kernels::MuonScale::shape;
  h.muon.params = {"h.*.mat.*"};
  return h;
}

// The whole-matrix flat index of element i of tp rank t's slice of s.
std::size_t whole_index(const Spec& s, int t, int tp, std::size_t i) {
  if (s.split < 0 || tp == 1) return i;
  const auto T = static_cast<std::size_t>(tp), ut = static_cast<std::size_t>(t);
  if (s.split == 0) return ut * (s.rows / T) * s.cols + i;
  const std::size_t c = s.cols / T;
  return (i / c) * s.cols + ut * c + i % c;
}

float init_value(int p, std::size_t i) { return 0.4f * std::sin(0.23f * static_cast<float>(i) + 0.9f * p); }

// The same on every rank: a multiple of 2^-12 below 2^-2 (reduced exactly).
float grad_value(int step, int p, std::size_t i) { return state_grad_value(step, 0, p, i, true); }

struct MeshMuon {
  Engine e;
  int tp = 1, tp_rank = 0;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;
  std::vector<const Spec*> specs;  // by ParamId

  MeshMuon(const EngineConfig& c, const Mesh& mesh) : e(c, mesh), tp(mesh.tp_size()), tp_rank(mesh.tp_rank()) {
    declare();
  }
  explicit MeshMuon(const EngineConfig& c, Communicator& comm) : e(c, comm) { declare(); }

  void declare() {
    const auto T = static_cast<std::int64_t>(tp);
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
      params.emplace_back();
      for (const Spec& s : kUnits[u]) {
        auto r = static_cast<std::int64_t>(s.rows), c = static_cast<std::int64_t>(s.cols);
        if (s.split == 0) r /= T;
        if (s.split == 1) c /= T;
        const std::vector<std::int64_t> shape = s.cols == 0 ? std::vector<std::int64_t>{r} : std::vector{r, c};
        const TensorParallel how = s.split < 0 ? TensorParallel::replicated() : TensorParallel::split(s.split);
        params.back().push_back(e.add_parameter(units.back(), s.name, shape, 0, how));
        specs.push_back(&s);
      }
    }
    e.finalize();
    set_parameters(e, params, [&](ParamId id, std::size_t i) { return init_value(id, global(id, i)); });
  }

  std::size_t global(ParamId id, std::size_t i) const {
    return whole_index(*specs[static_cast<std::size_t>(id)], tp_rank, tp, i);
  }

  void step(int s) {
    step_with_gradients(e, units, params, [&](ParamId id, std::size_t i) { return grad_value(s, id, global(id, i)); });
  }
};

EngineConfig config(int stage, DType dt) {
  EngineConfig c = make_config(stage, muon_hyper());
  c.compute_dtype = dt;
  return c;
}

}  // namespace

TEST_CASE("Muon on a dp x tp mesh: bitwise one rank holding the whole matrices, stages 0-3") {
  const int n = world().world_size();
  SelfCommunicator self;
  for (DType dt : {DType::f32, DType::bf16}) {
    MeshMuon one(config(0, dt), self);
    for (int s = 1; s <= 3; ++s) one.step(s);
    for (int tp = 1; tp <= n; ++tp) {
      if (n % tp != 0) continue;
      for (int stage = 0; stage <= 3; ++stage) {
        INFO("dp " << n / tp << " tp " << tp << " stage " << stage << " dtype " << dtype_name(dt));
        Mesh mesh(world(), MeshShape{n / tp, tp});
        MeshMuon m(config(stage, dt), mesh);
        for (int s = 1; s <= 3; ++s) m.step(s);
        for (std::size_t p = 0; p < m.specs.size(); ++p) {
          INFO("parameter " << m.specs[p]->name);
          const auto id = static_cast<ParamId>(p);
          const std::vector<float> mine = m.e.gather_master(id), whole = one.e.gather_master(id);
          const std::vector<float> momentum = m.e.gather_optimizer_state(id, 0);
          const std::vector<float> whole_momentum = one.e.gather_optimizer_state(id, 0);
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < mine.size(); ++i) {
            const std::size_t g = m.global(id, i);
            wrong += mine[i] != whole[g] || momentum[i] != whole_momentum[g];
          }
          CHECK(wrong == 0);
        }
      }
    }
  }
}

TEST_CASE("Muon on a dp x tp mesh: tp owners in the manifest, spread over the tp ranks") {
  const int n = world().world_size();
  for (int tp = 2; tp <= n; ++tp) {
    if (n % tp != 0) continue;
    INFO("tp " << tp);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / fmt::format("zs-test-muon-mesh-{}-{}", n, tp);
    make_empty_dir_on_rank0(world(), dir);
    Mesh mesh(world(), MeshShape{n / tp, tp});
    MeshMuon m(config(1, DType::f32), mesh);
    m.step(1);
    m.e.save_checkpoint(dir.string(), {}, 0, "t");
    world().barrier();
    // Every (pp, tp) folder's manifest: the same owners.
    nlohmann::json first;
    std::vector<int> load(static_cast<std::size_t>(tp), 0);
    int split = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
      if (entry.path().filename() != "manifest.json") continue;
      const nlohmann::json muon = nlohmann::json::parse(std::ifstream(entry.path()))["optimizer"]["muon"];
      REQUIRE(muon.contains("tp_owners"));
      if (first.is_null()) first = muon["tp_owners"];
      CHECK(muon["tp_owners"] == first);
    }
    REQUIRE(first.is_array());
    // Muon matrices in declaration order: qkv, proj, fc, rep, out; rep is whole on every tp rank.
    REQUIRE(first.size() == 5);
    CHECK(first[3] == -1);
    for (std::size_t k : {0u, 1u, 2u, 4u}) {
      const int t = first[k];
      REQUIRE(t >= 0);
      REQUIRE(t < tp);
      ++load[static_cast<std::size_t>(t)];
      ++split;
    }
    // Four split matrices over the dp owners' tp ranks: more than one tp rank works.
    int used = 0;
    for (int c : load) used += c > 0;
    CHECK(split == 4);
    CHECK(used >= 2);
    remove_dir_on_rank0(world(), dir);
  }
}
