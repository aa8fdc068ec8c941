// Step replay: see runtime/plan/memory_replay.h, [Note: step replay].
#include "runtime/plan/memory_replay.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "comm/node_groups.h"
#include "core/error.h"
#include "offload/host_pool.h"
#include "offload/swap_pipeline.h"
#include "optimizer/optimizer.h"
#include "runtime/engine/engine_options.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/grad_reducer.h"
#include "runtime/sharding/unsharder.h"
#include "runtime/update/deferred_step.h"
#include "runtime/update/muon_matrices.h"

namespace zeroshard {

namespace {

// Hands out disjoint address ranges starting at a fixed non-null address;
// nothing is ever read or written through them. The rank-ordered
// reductions check their buffers for null and overlap, so each array gets
// its own range.
class AddressSpace {
 public:
  void* take(std::size_t bytes) {
    void* p = reinterpret_cast<void*>(next_);  // NOLINT: an address that is never dereferenced
    next_ += (std::max<std::uintptr_t>(bytes, 1) + 63) / 64 * 64;
    return p;
  }

 private:
  std::uintptr_t next_ = std::uintptr_t{1} << 20;
};

// DeviceOps of the cpu device's shape (host addressable) that allocate
// address ranges only and do no work.
class SizeOnlyOps final : public DeviceOps {
 public:
  explicit SizeOnlyOps(AddressSpace& space) : space_(space) {}
  ComputeDevice device() const override { return ComputeDevice::cpu; }
  bool host_addressable() const override { return true; }
  DeviceArray allocate(std::size_t numel, DType dtype) override {
    if (numel == 0) return DeviceArray{};
    return DeviceArray(nullptr, space_.take(numel * dtype_size(dtype)), numel, dtype);
  }
  void zero(void*, std::size_t) override {}
  void copy(void*, const void*, std::size_t, CopyKind) override {}
  void copy_async(void*, const void*, std::size_t, AsyncCopy) override {}
  OpsFence fence() override { return {}; }
  void wait(const OpsFence&) override {}
  void convert(void*, DType, const void*, DType, std::size_t, float, bool) override {}
  void sum_blocks(void*, const void*, std::size_t, std::size_t, DType) override {}
  void quantize(const void*, DType, std::size_t, kernels::SymQuantFormat, float*, void*) override {}
  void dequantize(const void*, std::size_t, kernels::SymQuantFormat, void*, DType, bool) override {}
  kernels::GradStats grad_stats(const void*, DType, std::size_t) override { return {}; }
  void update(const OptimizerHyper&, std::int64_t, float, const RangeUpdate&) override {}

 private:
  AddressSpace& space_;
};

// A communicator of a given world size and rank whose collectives complete
// at once and move nothing.
class SizeOnlyCommunicator final : public Communicator {
 public:
  SizeOnlyCommunicator(int world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "replay"; }
  CommWork iall_reduce(void*, std::size_t, DType, ReduceOp) override { return {}; }
  CommWork ireduce_scatter(const void*, void*, std::size_t, DType, ReduceOp) override { return {}; }
  CommWork iall_gather(const void*, void*, std::size_t, DType) override { return {}; }
  CommWork iall_to_all(const void*, void*, std::size_t, DType) override { return {}; }
  CommWork ibroadcast(void*, std::size_t, DType, int) override { return {}; }
  CommWork ibarrier() override { return {}; }
  CommWork isend(const void*, std::size_t, DType, int) override { return {}; }
  CommWork irecv(void*, std::size_t, DType, int) override { return {}; }
  std::unique_ptr<Communicator> split(int, int) override {
    throw InvariantError("the step replay's communicator cannot split");
  }

 private:
  int world_;
  int rank_;
};

// The ArrayStore's host staging of one step, on capacities
// (ArrayStore::start_param_fetch, release_param_staging, accumulate_nvme_grad,
// finish_grad_writes). Shard source and gradient target of the replay.
class StoreReplay final : public ShardSource, public GradTarget {
 public:
  StoreReplay(const FlatLayout& layout, const ArrayPlan& plan, const ArrayPlanOptions& options,
              HostPoolSizes& host, AddressSpace& space)
      : layout_(layout), plan_(plan), o_(options), host_(host), param_staging_(layout.units().size()) {
    // Resident arrays: an address range each (read by the collectives' callers only).
    for (const UnitInfo& u : layout.units()) {
      full_grads_.push_back(space.take(u.padded * dtype_size(o_.grad_accum_dtype)));
      params_.push_back(space.take(u.padded * dtype_size(o_.dtype)));
    }
  }

  // --- ShardSource (ArrayStore through EngineShardSource) ---
  ShardView shard(UnitId u) override {
    const MemTier tier = tier_of(u, {ArrayKind::params});
    if (tier == MemTier::nvme) fetch(u, true);
    return ShardView{.data = params_[static_cast<std::size_t>(u)], .host = tier != MemTier::device};
  }
  void prefetch(UnitId u) noexcept override {
    try {
      fetch(u, false);
    } catch (...) {
    }
  }
  void release(UnitId u) noexcept override {
    HostLeaseSize& l = param_staging_[static_cast<std::size_t>(u)];
    if (!l.valid()) return;
    host_.release(l);
    --param_staging_count_;
  }

  // Unit u's resident parameter buffer (stages 0-2: the full flat buffer).
  void* params(UnitId u) { return params_[static_cast<std::size_t>(u)]; }

  // --- GradTarget (ArrayStore through EngineGradTarget) ---
  void* full_grad(UnitId u) override { return full_grads_[static_cast<std::size_t>(u)]; }
  void accumulate_shard(UnitId u, std::size_t at, const void*, DType, std::size_t n, float) override {
    if (tier_of(u, {ArrayKind::grad}) != MemTier::nvme) return;  // in memory: no staging on the cpu device
    const std::vector<SubGroup>& groups = plan_.units[static_cast<std::size_t>(u)].subgroups;
    const std::size_t e = dtype_size(o_.grad_accum_dtype);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::size_t lo = std::max(groups[g].begin, at), hi = std::min(groups[g].end, at + n);
      if (lo >= hi) continue;
      if (open_unit_ != u || open_group_ != g || !open_.valid()) {
        finish_grad_writes();
        open_ = host_.acquire((groups[g].end - groups[g].begin) * e, MemCategory::unsharded);
        open_unit_ = u;
        open_group_ = g;
      }
    }
  }
  // The open gradient sub-group is written back and its buffer returned.
  void finish_grad_writes() {
    host_.release(open_);
    open_unit_ = -1;
  }

 private:
  MemTier tier_of(UnitId u, ArrayRef a) const {
    return plan_.units[static_cast<std::size_t>(u)].tier(o_.stage, a);
  }
  // ArrayStore::start_param_fetch.
  void fetch(UnitId u, bool required) {
    HostLeaseSize& l = param_staging_[static_cast<std::size_t>(u)];
    if (o_.stage != 3 || tier_of(u, {ArrayKind::params}) != MemTier::nvme || l.valid()) return;
    if (param_staging_count_ >= o_.offload.param.buffer_count) {
      if (!required) return;
      throw InvariantError(fmt::format(
          "unshard(\"{}\"): all {} parameter swap-in buffers are in use (zero_optimization.offload_param."
          "buffer_count); reshard units earlier or raise buffer_count",
          layout_.unit(u).name, o_.offload.param.buffer_count));
    }
    l = host_.acquire(layout_.unit(u).shard * dtype_size(o_.dtype), MemCategory::unsharded);
    ++param_staging_count_;
  }

  const FlatLayout& layout_;
  const ArrayPlan& plan_;
  const ArrayPlanOptions& o_;
  HostPoolSizes& host_;
  std::vector<void*> full_grads_;
  std::vector<void*> params_;
  std::vector<HostLeaseSize> param_staging_;
  int param_staging_count_ = 0;
  HostLeaseSize open_;
  UnitId open_unit_ = -1;
  std::size_t open_group_ = 0;
};

// The optimizer's swap pipeline (ShardOptimizer::step in runtime/update/shard_optimizer.cpp):
// every sub-group of every unit, each with the unit's nvme arrays.
void replay_optimizer(const FlatLayout& layout, const EngineConfig& config, const ArrayPlan& plan,
                      const ArrayPlanOptions& o, HostPoolSizes& host) {
  if (!config.offload.uses_nvme()) return;
  std::vector<std::pair<UnitId, std::size_t>> work;
  std::vector<std::vector<ArrayRef>> arrays(layout.units().size());
  for (UnitId u = 0; u < static_cast<UnitId>(layout.units().size()); ++u) {
    const UnitTiers& t = plan.units[static_cast<std::size_t>(u)];
    for (std::size_t g = 0; g < t.subgroups.size(); ++g) work.emplace_back(u, g);
    for (ArrayRef a : unit_arrays(o, t.states)) {
      if (t.tier(o.stage, a) == MemTier::nvme) arrays[static_cast<std::size_t>(u)].push_back(a);
    }
  }
  const OffloadOptimizerConfig& oc = config.offload.optimizer;
  const SwapPipelineOptions options{.buffer_count = oc.buffer_count, .pipeline_read = oc.pipeline_read,
                                    .pipeline_write = oc.pipeline_write};
  // zeroshard.overlap_optimizer_step: beside the pipeline's buffers, the
  // updated parameter shards of DeferredStep (runtime/update/deferred_step.h):
  // at most kDeferredStepHandoffs untaken, one more while the engine waits
  // for its unit, the two adopted by the units in an all-gather (the
  // unshard's and the prefetch's, stage3_prefetch_bucket_size's default of
  // one unit ahead), and a prefetch's swap-in buffer started before its
  // unit's handoff was ready, held until the adoption releases it (without
  // it, and with the count capped at one buffer per unit, test_overlap_step
  // saw 4-8 KiB more than the estimate in 1 run of 4). Counted as that many
  // of the largest shards, each at
  // twice its size (the pool lends a cached buffer of up to twice the
  // request, and the two threads' leases interleave in no fixed order):
  // an estimate of the worst case, not a replay.
  std::vector<HostLeaseSize> handoffs;
  if (config.overlap_optimizer_step && o.stage == 3) {
    std::vector<std::size_t> shards;
    for (UnitId u = 0; u < static_cast<UnitId>(layout.units().size()); ++u) {
      const UnitTiers& t = plan.units[static_cast<std::size_t>(u)];
      const ArrayRef p{ArrayKind::params};
      if (t.tier(o.stage, p) != MemTier::nvme) continue;
      shards.push_back(array_numel(o.stage, o.rank, layout.unit(u), t.states, p) *
                       dtype_size(array_dtype(o.dtypes(), t.states, p)));
    }
    std::sort(shards.rbegin(), shards.rend());
    // With fewer units than buffers, a unit's handoff and its swap-in
    // buffer coexist: the largest shard counts again.
    for (std::size_t k = 0; k < kDeferredStepHandoffs + 4 && !shards.empty(); ++k) {
      handoffs.push_back(host.acquire(2 * shards[k < shards.size() ? k : 0], MemCategory::unsharded));
    }
  }
  replay_swap_pipeline(host, options, MemCategory::unsharded, work.size(), [&](std::size_t i) {
    const auto [u, g] = work[i];
    const UnitTiers& t = plan.units[static_cast<std::size_t>(u)];
    const SubGroup& sg = t.subgroups[g];
    std::vector<std::uint64_t> bytes;
    for (ArrayRef a : arrays[static_cast<std::size_t>(u)]) bytes.push_back(t.subgroup_bytes(o.dtypes(), a, static_cast<std::size_t>(o.rank), sg));
    return bytes;
  });
  for (HostLeaseSize& h : handoffs) host.release(h);
}

// The host staging of ArrayStore::read and ArrayStore::store of unit u's
// array a: a buffer of the array's size from the pool when it is on nvme
// (read: held until the caller releases it; store: released at once).
struct StagedAccess {
  const FlatLayout& layout;
  const ArrayPlan& plan;
  const ArrayPlanOptions& o;
  HostPoolSizes& host;

  std::size_t bytes(UnitId u, ArrayRef a) const {
    const UnitTiers& t = plan.units[static_cast<std::size_t>(u)];
    if (t.tier(o.stage, a) != MemTier::nvme) return 0;
    return array_numel(o.stage, o.rank, layout.unit(u), t.states, a) * dtype_size(array_dtype(o.dtypes(), t.states, a));
  }
  HostLeaseSize read(UnitId u, ArrayRef a) const {
    const std::size_t n = bytes(u, a);
    return n == 0 ? HostLeaseSize{} : host.acquire(n, MemCategory::unsharded);
  }
  void store(UnitId u, ArrayRef a) const {
    HostLeaseSize l = read(u, a);
    host.release(l);
  }
};

// Muon's step before the optimizer's (MuonStep::step in
// runtime/update/muon_step.cpp): for each unit with Muon matrices, one
// host-pool buffer held over the unit, and inside it the whole-array reads
// and writes of ArrayStore::read / store, which stage an nvme array through
// the pool: the gradient and the momentum (state 0) read and the momentum
// stored (momentum_part), then the parameters and, in mixed precision, the
// master weights read and both stored (apply_part); holders released in
// reverse order of their reads.
void replay_muon(const FlatLayout& layout, const EngineConfig& config, const ArrayPlan& plan,
                 const ArrayPlanOptions& o, HostPoolSizes& host) {
  const std::vector<MuonParam> matrices = muon_matrices(layout, config.optimizer, config.source);
  const StagedAccess access{layout, plan, o, host};
  for (UnitId u = 0; u < static_cast<UnitId>(layout.units().size()); ++u) {
    if (std::none_of(matrices.begin(), matrices.end(), [&](const MuonParam& p) { return p.unit == u; })) continue;
    const auto read = [&](ArrayRef a) { return access.read(u, a); };
    const auto store = [&](ArrayRef a) { access.store(u, a); };
    const std::size_t n = muon_unit_buffer_elements(layout, matrices, o.stage, o.rank, 0, u);
    HostLeaseSize buffer = n == 0 ? HostLeaseSize{} : host.acquire(n * sizeof(float), MemCategory::unsharded);
    const ArrayRef grad{ArrayKind::grad}, momentum{ArrayKind::state, 0}, params{ArrayKind::params},
        master{ArrayKind::master};
    {
      HostLeaseSize g = read(grad), m = read(momentum);
      store(momentum);
      host.release(m);
      host.release(g);
    }
    const bool mixed = o.dtype != DType::f32;
    HostLeaseSize p = read(params), w = mixed ? read(master) : HostLeaseSize{};
    if (mixed) store(master);
    store(params);
    host.release(w);
    host.release(p);
    host.release(buffer);
  }
}

}  // namespace

void replay_server_push(const FlatLayout& layout, const EngineConfig& config, const ArrayPlan& plan,
                        const ArrayPlanOptions& o, MemoryLedger& ledger) {
  HostPoolSizes host(ledger);
  const StagedAccess access{layout, plan, o, host};
  const UnitId n = static_cast<UnitId>(layout.units().size());
  // ParameterServer::answer_push: the pushed shards stored unit by unit
  // (the first push carries the parameters), the update, then the
  // parameter shards read unit by unit for the pull.
  for (ArrayKind kind : {ArrayKind::params, ArrayKind::grad}) {
    for (UnitId u = 0; u < n; ++u) {
      if (layout.unit(u).shard > 0) access.store(u, {kind});
    }
  }
  replay_optimizer(layout, config, plan, o, host);
  for (UnitId u = 0; u < n; ++u) {
    if (layout.unit(u).shard == 0) continue;
    HostLeaseSize l = access.read(u, {ArrayKind::params});
    host.release(l);
  }
}

int qgz_ranks_per_node(const EngineConfig& config, int world_size, int ranks_per_node) {
  const std::int64_t configured = config.zero.zeropp.ranks_per_node;
  const std::int64_t per_node = configured > 0 ? configured : (ranks_per_node > 0 ? ranks_per_node : world_size);
  if (per_node > world_size || world_size % per_node != 0) {
    throw ConfigError(fmt::format("{}: {} ranks per node (zeroshard.zeropp.ranks_per_node) do not divide the {} "
                                  "ranks of the data-parallel group",
                                  config.source, per_node, world_size));
  }
  return static_cast<int>(per_node);
}

void replay_step(const FlatLayout& layout, const EngineConfig& config, int rank, const ArrayPlan& plan,
                 MemoryLedger& ledger, int ranks_per_node) {
  const ArrayPlanOptions o = engine_array_plan_options(config, rank);
  const int world = layout.world_size();
  // ZeRO++'s groups, as sizes: hpZ's k consecutive ranks, qgZ's nodes.
  const UnsharderOptions unshard_options = engine_unsharder_options(config);
  const GradReducerOptions reduce_options = engine_grad_reducer_options(config, world);
  std::unique_ptr<SizeOnlyCommunicator> hpz;
  if (unshard_options.gather && unshard_options.hpz_partition_size > 1) {
    const int k = unshard_options.hpz_partition_size;
    hpz = std::make_unique<SizeOnlyCommunicator>(k, rank % k);
  }
  NodeGroups nodes;
  if (reduce_options.quantized && reduce_options.stage >= 2) {
    const int per_node = qgz_ranks_per_node(config, world, ranks_per_node);
    nodes.node = rank / per_node;
    nodes.num_nodes = world / per_node;
    nodes.local_rank = rank % per_node;
    nodes.local_size = per_node;
    for (int r = 0; r < world; ++r) nodes.node_of_rank.push_back(r / per_node);
    nodes.local = std::make_unique<SizeOnlyCommunicator>(per_node, nodes.local_rank);
    nodes.cross = std::make_unique<SizeOnlyCommunicator>(nodes.num_nodes, nodes.node);
  }
  // The components record into `work`; `ledger` takes its state at the end
  // of the step, before their destructors return what is still leased.
  MemoryLedger work = ledger;
  AddressSpace space;
  SizeOnlyOps ops(space);
  SizeOnlyCommunicator comm(layout.world_size(), rank);
  BufferPool pool(work, ops);
  HostPoolSizes host(work);
  StoreReplay store(layout, plan, o, host, space);
  {
    GradReducer reducer(comm, layout, ops, pool, reduce_options, store, &nodes);
    Unsharder unsharder(comm, layout, ops, pool, unshard_options, store, hpz.get());
    const UnitId n = static_cast<UnitId>(layout.units().size());
    for (UnitId u = 0; u < n; ++u) {
      unsharder.unshard(u);
      unsharder.reshard(u);
    }
    for (UnitId u = n - 1; u >= 0; --u) {
      unsharder.unshard(u);
      if (o.stage >= 2 && !layout.unit(u).params.empty()) reducer.micro_batch_grad(u);  // the first grad()
      reducer.reduce(u);  // every micro-batch at stages 2/3; the boundary (the only one) at 0/1
      unsharder.reshard(u);
    }
    // Engine::step_body: the reductions complete, the micro-batch ends,
    // the nvme gradient writes finish, the optimizer runs, then the
    // parameters are gathered (stages 1/2) or refreshed (stage 3).
    reducer.complete();
    unsharder.end_micro_batch();
    store.finish_grad_writes();
    replay_muon(layout, config, plan, o, host);
    replay_optimizer(layout, config, plan, o, host);
    if (o.stage == 1 || o.stage == 2) {
      reducer.all_gather_shards([&](UnitId u) { return store.params(u); });
    } else if (o.stage == 3) {
      unsharder.refresh();
    }
    // What the engine still holds after the step (persistent units' full
    // buffers) stays leased in the result.
    ledger = work;
  }
}

}  // namespace zeroshard
