// Memory estimate == the Engine's ledger after finalize() and after one
// training step (current and peak, per category and tier), byte for byte,
// over a grid of stages, dtypes, optimizers, offload tiers (max_in_cpu
// included), bucket sizes, sub-group sizes and two models whose unit sizes
// (0, 1, 7, 57, 10001 elements) are not divisible by the world size and
// smaller than it. Run at 1-3 ranks: every rank compares its own ledger
// with the estimate for its rank, which the estimator computes without a
// communicator. The step is the loop runtime/plan/memory_replay.h states.
// Parameter-server jobs too: workers and servers (default placement).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "offload/host_allocator.h"
#include "runtime/engine/engine.h"
#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/model_description.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-memory-estimate"; }

ParamDescription param(std::string name, std::vector<std::int64_t> shape, GroupId group = 0) {
  return ParamDescription{.name = std::move(name), .shape = std::move(shape), .group = group};
}

// Units of 0, 1, 7, 57 and 10001 elements (and a two-group unit).
ModelDescription uneven_model() {
  ModelDescription m;
  m.units.push_back({"empty", {param("empty.w", {0})}});
  m.units.push_back({"one", {param("one.w", {1})}});
  m.units.push_back({"seven", {param("seven.w", {7})}});
  m.units.push_back({"mixed", {param("mixed.w", {3, 19}), param("mixed.b", {}, 1), param("mixed.z", {0, 4})}});
  m.units.push_back({"big", {param("big.w", {10001})}});
  return m;
}

// Units of 57 elements and a large one split across 4096-element sub-groups.
ModelDescription layered_model() {
  ModelDescription m;
  m.units.push_back({"embed", {param("embed.w", {57})}});
  for (int i = 0; i < 3; ++i) {
    m.units.push_back({fmt::format("layers.{}", i),
                       {param(fmt::format("layers.{}.w", i), {64, 130}), param(fmt::format("layers.{}.b", i), {130})}});
  }
  m.units.push_back({"head", {param("head.w", {1})}});
  return m;
}

// Declares `m` on e (groups beyond the default added first).
void declare(Engine& e, const ModelDescription& m) {
  for (int g = 1; g < m.group_count(); ++g) e.add_param_group(fmt::format("g{}", g), {});
  for (const UnitDescription& u : m.units) {
    const UnitId id = e.add_unit(u.name);
    for (const ParamDescription& p : u.params) e.add_parameter(id, p.name, p.shape, p.group);
  }
}

struct OffloadCase {
  OffloadDevice optimizer = OffloadDevice::none;
  OffloadDevice param = OffloadDevice::none;
  std::int64_t max_in_cpu = 1'000'000'000;
};

std::vector<OffloadCase> offload_cases(int stage) {
  if (stage == 0) return {{}};
  std::vector<OffloadCase> c = {{}, {OffloadDevice::cpu}, {OffloadDevice::nvme}};
  if (stage == 3) {
    c.push_back({OffloadDevice::cpu, OffloadDevice::cpu});
    for (std::int64_t in_cpu : {std::int64_t{0}, std::int64_t{700}, std::int64_t{1'000'000'000}}) {
      c.push_back({OffloadDevice::nvme, OffloadDevice::nvme, in_cpu});
    }
  }
  return c;
}

// Checks every figure of two ledgers; returns true when equal.
bool same_ledger(const MemoryLedger& got, const MemoryLedger& want) {
  bool same = got.current_total() == want.current_total() && got.peak_total() == want.peak_total();
  for (int c = 0; c < static_cast<int>(MemCategory::count); ++c) {
    const auto cat = static_cast<MemCategory>(c);
    CAPTURE(mem_category_name(cat));
    same = same && got.padding(cat) == want.padding(cat) && got.peak(cat) == want.peak(cat);
    for (int t = 0; t < static_cast<int>(MemTier::count); ++t) {
      const auto tier = static_cast<MemTier>(t);
      CAPTURE(mem_tier_name(tier));
      CHECK(got.current(cat, tier) == want.current(cat, tier));
      same = same && got.current(cat, tier) == want.current(cat, tier);
    }
    CHECK(got.padding(cat) == want.padding(cat));
  }
  CHECK(got.current_total() == want.current_total());
  CHECK(got.peak_total() == want.peak_total());
  for (int t = 0; t < static_cast<int>(MemTier::count); ++t) {
    const auto tier = static_cast<MemTier>(t);
    CAPTURE(mem_tier_name(tier));
    CHECK(got.current_total(tier) == want.current_total(tier));
    CHECK(got.peak_total(tier) == want.peak_total(tier));
    same = same && got.current_total(tier) == want.current_total(tier) && got.peak_total(tier) == want.peak_total(tier);
  }
  return same;
}

// One standard step on e (runtime/plan/memory_replay.h, replay_step): forward
// 0..U-1 unshard/reshard; backward U-1..0 unshard, each parameter's
// gradient accumulated (zeros: no overflow), reduce_gradients, reshard;
// step(), which must apply the update.
void run_step(Engine& e) {
  const FlatLayout& l = e.layout();
  const UnitId n = static_cast<UnitId>(l.units().size());
  for (UnitId u = 0; u < n; ++u) {
    e.unshard(u);
    e.reshard(u);
  }
  const DType dt = e.compute_dtype();
  for (UnitId u = n - 1; u >= 0; --u) {
    e.unshard(u);
    for (ParamId p : l.unit(u).params) {
      void* g = e.grad_data(p, dt);
      if (l.param(p).numel > 0) std::memset(g, 0, l.param(p).numel * dtype_size(dt));
    }
    e.reduce_gradients(u);
    e.reshard(u);
  }
  const StepResult r = e.step();
  CHECK(r.applied);
}

// Whether an Engine of `model` with `c` on `comm` holds the ledger the
// estimate gives its rank, after finalize() and after run_step(); prints
// both ledgers after the step for the first few mismatches (`shown`).
struct Matches {
  bool finalize = false, step = false;
};
Matches compare_with_engine(const ModelDescription& model, const EngineConfig& c, Communicator& comm, int& shown) {
  const MemoryEstimate est = estimate_memory(model, c, comm.world_size(), comm.rank());
  Engine e(c, comm);
  declare(e, model);
  e.finalize();
  Matches m;
  m.finalize = same_ledger(e.ledger(), est.after_finalize);
  // A parameter server answers its workers' steps until they end.
  e.is_parameter_server() ? e.serve() : run_step(e);
  m.step = same_ledger(e.ledger(), est.after_step);
  if (!m.step && ++shown <= 3) {
    MESSAGE((e.ledger().table("engine after a step") + est.after_step.table("estimate after a step")));
  }
  return m;
}

}  // namespace

TEST_CASE("the estimate equals the ledger after finalize(), byte for byte, over the grid") {
  Communicator& comm = world();
  const int n = comm.world_size(), r = comm.rank();
  // The fifth is AdamW8bit (8-bit states; blocks of 64 or 256, every unit
  // 8-bit or those of at least 100 elements).
  const OptimizerKind optimizers[] = {OptimizerKind::adamw, OptimizerKind::sgd, OptimizerKind::lion,
                                      OptimizerKind::adagrad, OptimizerKind::adamw};
  int checked = 0, mismatches = 0, index = 0, step_mismatches = 0, shown = 0;
  for (const ModelDescription& model : {uneven_model(), layered_model()}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        for (const OffloadCase& oc : offload_cases(stage)) {
          for (std::int64_t bucket : {std::int64_t{64}, std::int64_t{500'000'000}}) {
            for (std::int64_t sub_group : {std::int64_t{4096}, std::int64_t{1'000'000'000}}) {
              EngineConfig c = make_config(stage);
              c.compute_dtype = dt;
              c.optimizer.kind = optimizers[index % 5];
              if (index % 5 == 4) {
                c.optimizer.states.dtype = StateDtype::q8;
                c.optimizer.states.block_size = (index / 5) % 2 == 0 ? 256 : 64;
                c.optimizer.states.min_8bit_size = (index / 5) % 3 == 0 ? 0 : 100;
              }
              CAPTURE(optimizer_type_name(c.optimizer));
              c.optimizer.momentum = index % 8 == 1 ? 0.9 : 0.0;  // SGD with and without a momentum state
              ++index;
              c.zero.reduce_bucket_size = bucket;
              c.zero.allgather_bucket_size = bucket;
              c.offload.sub_group_size = sub_group;
              c.offload.optimizer.device = oc.optimizer;
              c.offload.param.device = oc.param;
              c.offload.param.max_in_cpu = oc.max_in_cpu;
              if (oc.optimizer == OffloadDevice::nvme) c.offload.optimizer.nvme_path = swap_root().string();
              if (oc.param == OffloadDevice::nvme) c.offload.param.nvme_path = swap_root().string();
              CAPTURE(stage);
              CAPTURE(dtype_name(dt));
              CAPTURE(offload_device_name(oc.optimizer));
              CAPTURE(offload_device_name(oc.param));
              CAPTURE(oc.max_in_cpu);
              CAPTURE(bucket);
              CAPTURE(sub_group);
              ++checked;
              const Matches m = compare_with_engine(model, c, comm, shown);
              if (!m.finalize) ++mismatches;
              if (!m.step) ++step_mismatches;
            }
          }
        }
      }
    }
  }
  MESSAGE(fmt::format("rank {} of {}: {} configurations checked, {} mismatches after finalize(), {} after a step", r,
                      n, checked, mismatches, step_mismatches));
  CHECK(checked >= 200);
  CHECK(mismatches == 0);
  CHECK(step_mismatches == 0);
}

TEST_CASE("max_in_cpu splits stage 3 parameter shards between host and nvme in unit order") {
  // 10001 elements at world size n: the big unit's shard alone is > 700
  // elements, the small ones fit; so 700 puts the small units on the host.
  const int n = world().world_size();
  EngineConfig c = make_config(3);
  c.offload.optimizer.device = OffloadDevice::nvme;
  c.offload.param.device = OffloadDevice::nvme;
  c.offload.optimizer.nvme_path = c.offload.param.nvme_path = swap_root().string();
  c.offload.param.max_in_cpu = 700;
  const MemoryEstimate est = estimate_memory(uneven_model(), c, n, 0);
  const FlatLayout layout = uneven_model().layout(n);
  std::uint64_t host = 0, nvme = 0;
  for (const UnitInfo& u : layout.units()) (u.name == "big" ? nvme : host) += u.shard * 4;
  CHECK(est.after_finalize.current(MemCategory::parameters, MemTier::host) == host);
  CHECK(est.after_finalize.current(MemCategory::parameters, MemTier::nvme) == nvme);
  CHECK(est.after_finalize.current(MemCategory::parameters, MemTier::device) == 0);
}

TEST_CASE("estimates for world sizes 1-8 shard every unit, larger worlds included") {
  const ModelDescription m = uneven_model();
  for (int n = 1; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      const MemoryEstimate est = estimate_memory(m, make_config(3), n, r);
      const FlatLayout l = m.layout(n);
      std::uint64_t shard = 0, logical = 0;
      for (const UnitInfo& u : l.units()) {
        shard += u.shard;
        logical += u.logical_in_shard(r);
      }
      // fp32 AdamW at stage 3: parameters, gradients and two states, 16 bytes an element.
      CHECK(est.after_finalize.model_state_bytes() == 16 * shard);
      CHECK(est.after_finalize.model_state_padding() == 16 * (shard - logical));
    }
  }
  CHECK_THROWS_AS(estimate_memory(m, make_config(3), 2, 2), InvariantError);
}

namespace {

// One unit of 10001 elements.
ModelDescription one_unit_model() {
  ModelDescription m;
  m.units.push_back({"big", {param("big.w", {10001})}});
  return m;
}

// True when every current figure of a and b is equal.
bool same_current(const MemoryLedger& a, const MemoryLedger& b) {
  for (int c = 0; c < static_cast<int>(MemCategory::count); ++c) {
    const auto cat = static_cast<MemCategory>(c);
    if (a.padding(cat) != b.padding(cat)) return false;
    for (int t = 0; t < static_cast<int>(MemTier::count); ++t) {
      if (a.current(cat, static_cast<MemTier>(t)) != b.current(cat, static_cast<MemTier>(t))) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("after a stage 3 step the peak holds the full unit, its gradient and the reduce-scatter's receive buffer") {
  // fp32 AdamW, overlap off, one bucket: backward holds the gathered unit
  // (P elements), its micro-batch gradient (P, sent in place as the one
  // bucket) and the rank-ordered reduce-scatter's receive buffer (world x
  // shard = P) at once: 12 P bytes on top of 16 S resident bytes. At world
  // size 1 no collective runs, so there is no receive buffer: 8 P.
  EngineConfig c = make_config(3);
  c.zero.overlap_comm = false;
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    const FlatLayout l = one_unit_model().layout(n);
    const std::uint64_t P = l.unit(0).padded, S = l.unit(0).shard;
    const MemoryEstimate est = estimate_memory(one_unit_model(), c, n, n - 1);
    CHECK(same_current(est.after_step, est.after_finalize));
    CHECK(est.after_step.current(MemCategory::unsharded) == 0);
    const std::uint64_t transient = (n == 1 ? 8 : 12) * P;
    CHECK(est.after_step.peak(MemCategory::unsharded) == transient);
    CHECK(est.after_step.peak_total() == 16 * S + transient);
    CHECK(est.after_finalize.peak(MemCategory::unsharded) == 0);
  }
}

TEST_CASE("after a stage 1 step with nvme optimizer state the swap pipeline's staging is on the host tier") {
  // fp32 AdamW, one sub-group: the pipeline stages the two fp32 states of
  // the shard (host_block_bytes(4 S) each, a size class of 4 KiB pages);
  // before it, the one all-reduce bucket is the whole padded gradient,
  // reduced in place with a scratch buffer of 4 P bytes on the device
  // (none at world size 1, where no collective runs).
  EngineConfig c = make_config(1);
  c.offload.optimizer.device = OffloadDevice::nvme;
  c.offload.optimizer.nvme_path = swap_root().string();
  for (int n = 1; n <= 3; ++n) {
    CAPTURE(n);
    const FlatLayout l = one_unit_model().layout(n);
    const std::uint64_t P = l.unit(0).padded, S = l.unit(0).shard;
    const std::uint64_t staging = 2 * host_block_bytes(4 * S);
    const std::uint64_t scratch = n == 1 ? 0 : 4 * P;
    const MemoryEstimate est = estimate_memory(one_unit_model(), c, n, 0);
    CHECK(same_current(est.after_step, est.after_finalize));
    CHECK(est.after_step.peak(MemCategory::unsharded) == std::max(scratch, staging));
    // Resident: fp32 parameters and gradients (P each) on the device, the
    // states' swap files (S each) on nvme.
    CHECK(est.after_step.peak_total() == 8 * P + 8 * S + std::max(scratch, staging));
  }
}

TEST_CASE("with Muon the estimate equals the ledger after a step: its per-unit buffer, owner or not") {
  // layers.*.w (64 x 130) are Muon's: at 2-3 ranks each is whole on its
  // owner and a part (or nothing) elsewhere; every tier (nvme arrays are
  // staged through the host pool by Muon's whole-array reads and writes).
  Communicator& comm = world();
  int checked = 0, shown = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (const OffloadCase& oc : offload_cases(stage)) {
        EngineConfig c = make_config(stage);
        c.compute_dtype = dt;
        c.optimizer.kind = OptimizerKind::muon;
        c.optimizer.muon.params = {"layers.*.w"};
        c.offload.optimizer.device = oc.optimizer;
        c.offload.param.device = oc.param;
        c.offload.param.max_in_cpu = oc.max_in_cpu;
        if (oc.optimizer == OffloadDevice::nvme) c.offload.optimizer.nvme_path = swap_root().string();
        if (oc.param == OffloadDevice::nvme) c.offload.param.nvme_path = swap_root().string();
        CAPTURE(stage);
        CAPTURE(oc.max_in_cpu);
        CAPTURE(dtype_name(dt));
        CAPTURE(offload_device_name(oc.optimizer));
        CAPTURE(offload_device_name(oc.param));
        const Matches m = compare_with_engine(layered_model(), c, comm, shown);
        CHECK(m.finalize);
        CHECK(m.step);
        ++checked;
      }
    }
  }
  CHECK(checked == 2 * (1 + 3 + 3 + 7));
}

TEST_CASE("with checkpoint.async the estimate holds the staging area of async saves, byte for byte") {
  // The rank file (master and states: fp32, or 8-bit codes and absmax), on
  // rank 0 also the consolidated weights; none over staging_memory.
  Communicator& comm = world();
  int checked = 0, shown = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (bool q8 : {false, true}) {
        for (bool weights : {false, true}) {
          EngineConfig c = make_config(stage);
          c.compute_dtype = dt;
          c.checkpoint.async = true;
          c.zero.gather_16bit_weights_on_model_save = weights;
          if (q8) {
            c.optimizer.states.dtype = StateDtype::q8;
            c.optimizer.states.block_size = 64;
            c.optimizer.states.min_8bit_size = 4096;  // the small units stay fp32
          }
          CAPTURE(stage);
          CAPTURE(dtype_name(dt));
          CAPTURE(q8);
          CAPTURE(weights);
          const MemoryEstimate est = estimate_memory(layered_model(), c, comm.world_size(), comm.rank());
          CHECK(est.after_finalize.current(MemCategory::checkpoint_staging, MemTier::host) > 0);
          const Matches m = compare_with_engine(layered_model(), c, comm, shown);
          CHECK(m.finalize);
          CHECK(m.step);
          ++checked;
        }
      }
    }
  }
  CHECK(checked == 32);
  // With nvme state the snapshot hard-links those arrays instead of staging
  // them (ArrayStore::link_range): the estimate leaves them out as the
  // engine does. Stage 3, params and optimizer on nvme, fp32 and bf16
  // (master on nvme), one unit's parameters on the host (max_in_cpu).
  for (DType dt : {DType::f32, DType::bf16}) {
    for (std::int64_t in_cpu : {std::int64_t{0}, std::int64_t{1} << 20}) {
      EngineConfig c = make_config(3);
      c.compute_dtype = dt;
      c.checkpoint.async = true;
      c.offload.optimizer.device = c.offload.param.device = OffloadDevice::nvme;
      c.offload.optimizer.nvme_path = c.offload.param.nvme_path = swap_root().string();
      c.offload.param.max_in_cpu = in_cpu;
      CAPTURE(dtype_name(dt));
      CAPTURE(in_cpu);
      const Matches m = compare_with_engine(layered_model(), c, comm, shown);
      CHECK(m.finalize);
      CHECK(m.step);
    }
  }
  EngineConfig c = make_config(2);
  c.checkpoint.async = true;
  c.checkpoint.staging_memory = 100;
  CHECK(estimate_memory(layered_model(), c, comm.world_size(), comm.rank())
            .after_finalize.current(MemCategory::checkpoint_staging) == 0);
  const Matches m = compare_with_engine(layered_model(), c, comm, shown);
  CHECK(m.finalize);
}

TEST_CASE("the estimate equals the ledger after a step over overlap, reduction and stage 3 knobs") {
  // overlap_comm on and off at stages 1-3, the backend's reductions, a
  // communication dtype other than the compute dtype, and at stage 3
  // persistent units (kept gathered after the step), a live-parameter
  // limit and a longer prefetch.
  Communicator& comm = world();
  const int n = comm.world_size(), r = comm.rank();
  int checked = 0, mismatches = 0;
  for (const ModelDescription& model : {uneven_model(), layered_model()}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (bool overlap : {false, true}) {
        for (int variant = 0; variant < 4; ++variant) {
          EngineConfig c = make_config(stage);
          c.zero.overlap_comm = overlap;
          c.zero.reduce_bucket_size = c.zero.allgather_bucket_size = variant % 2 == 0 ? 64 : 3000;
          if (variant == 1) c.reduction_order = ReductionOrder::native;
          if (variant == 2) {
            c.compute_dtype = DType::bf16;
            c.communication_data_type = DType::f32;
          }
          if (variant == 3) c.communication_data_type = DType::bf16;
          if (stage == 3 && variant >= 2) {
            c.zero.param_persistence_threshold = 100;
            c.zero.max_live_parameters = 9000;
            c.zero.prefetch_bucket_size = 20000;
          }
          CAPTURE(stage);
          CAPTURE(overlap);
          CAPTURE(variant);
          const MemoryEstimate est = estimate_memory(model, c, n, r);
          Engine e(c, comm);
          declare(e, model);
          e.finalize();
          run_step(e);
          ++checked;
          if (!same_ledger(e.ledger(), est.after_step)) ++mismatches;
          if (stage == 3 && variant >= 2) {
            // Persistent units stay gathered after the step.
            CHECK(est.after_step.current(MemCategory::persistent) > 0);
          }
        }
      }
    }
  }
  MESSAGE(fmt::format("rank {} of {}: {} knob configurations checked, {} mismatches after a step", r, n, checked,
                      mismatches));
  CHECK(checked == 48);
  CHECK(mismatches == 0);
}

TEST_CASE("the estimate equals the ledger with ZeRO++'s options: hpZ's secondary shards, qgZ's buffers and residuals") {
  Communicator& comm = world();
  const int n = comm.world_size();
  int checked = 0, mismatches = 0, shown = 0;
  for (const ModelDescription& model : {uneven_model(), layered_model()}) {
    for (int stage : {2, 3}) {
      for (DType dt : {DType::f32, DType::bf16}) {
        for (int variant = 0; variant < 6; ++variant) {
          for (int per_node : {1, n}) {
            EngineConfig c = make_config(stage);
            c.compute_dtype = dt;
            c.zero.overlap_comm = variant % 2 == 0;
            c.zero.reduce_bucket_size = c.zero.allgather_bucket_size = variant < 3 ? 64 : 500'000'000;
            ZeroppConfig& z = c.zero.zeropp;
            z.ranks_per_node = per_node;
            z.quantized_gradients = variant != 1;
            z.error_feedback = variant == 2 || variant == 5;
            z.gradient_bits = variant == 3 ? 8 : 4;
            z.gradient_block_size = variant == 0 ? 16 : 2048;
            if (stage == 3) {
              z.quantized_weights = variant != 2;
              z.hpz_partition_size = variant % 3 == 0 ? n : 1;
              z.weight_block_size = variant == 4 ? 16 : 256;
            }
            CAPTURE(stage);
            CAPTURE(dtype_name(dt));
            CAPTURE(variant);
            CAPTURE(per_node);
            ++checked;
            const Matches m = compare_with_engine(model, c, comm, shown);
            if (!m.finalize || !m.step) ++mismatches;
          }
        }
      }
    }
  }
  CHECK(checked == 2 * 2 * 2 * 6 * 2);
  CHECK(mismatches == 0);
}

TEST_CASE("with parameter servers the estimate equals each worker's and each server's ledger") {
  // The last S ranks serve (estimate_memory's rank order); workers keep
  // parameters and gradients only, a server each hosted worker's stage-3
  // store on offload_optimizer's tier, nvme staged through its own pool.
  Communicator& comm = world();
  const int N = comm.world_size();
  if (N < 2) return;  // a server needs a worker
  int checked = 0, shown = 0;
  for (int servers = 1; servers < N && servers <= 2; ++servers) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (OffloadDevice tier : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
        // push "direct": a worker alone, a server its window of the servers' layout.
        const PsPushMode push = stage == 2 ? PsPushMode::direct : PsPushMode::reduce;
        EngineConfig c = make_config(stage);
        c.parameter_server.servers = servers;
        c.parameter_server.push = push;
        CAPTURE(push == PsPushMode::direct);
        c.offload.optimizer.device = tier;
        if (tier == OffloadDevice::nvme) c.offload.optimizer.nvme_path = swap_root().string();
        CAPTURE(servers);
        CAPTURE(stage);
        CAPTURE(offload_device_name(tier));
        const Matches m = compare_with_engine(layered_model(), c, comm, shown);
        CHECK(m.finalize);
        CHECK(m.step);
        ++checked;
      }
    }
  }
  CHECK(checked == (N >= 3 ? 18 : 9));
  // A server's figures: one store per hosted worker, all fp32 and sharded
  // over the W workers (padding aside, 16 B per parameter over W at AdamW).
  EngineConfig c = make_config(3);
  c.parameter_server.servers = 1;
  const MemoryEstimate server = estimate_memory(layered_model(), c, N, N - 1);
  CHECK(server.server == 0);
  CHECK(server.hosted_workers.size() == static_cast<std::size_t>(N - 1));
  CHECK(server.after_finalize.current(MemCategory::optimizer_states) == 2 * server.padded_count * sizeof(float));
  CHECK(server.after_finalize.current(MemCategory::parameters) == server.padded_count * sizeof(float));
  const MemoryEstimate worker = estimate_memory(layered_model(), c, N, 0);
  CHECK(worker.server == -1);
  CHECK(worker.after_finalize.current(MemCategory::optimizer_states) == 0);
  // "direct": server 0 of 1 holds the whole fp32 state once, whatever W.
  c.parameter_server.push = PsPushMode::direct;
  const MemoryEstimate alone = estimate_memory(layered_model(), c, N, N - 1);
  CHECK(alone.hosted_workers.empty());
  CHECK(alone.after_finalize.current(MemCategory::parameters) == alone.padded_count * sizeof(float));
  CHECK(alone.after_finalize.current(MemCategory::optimizer_states) == 2 * alone.padded_count * sizeof(float));
  c.parameter_server.servers = N;
  CHECK_THROWS_WITH_AS(estimate_memory(layered_model(), c, N, 0), doctest::Contains("parameter_server.servers"),
                       ConfigError);
}
