// Engine: construction, model declaration, layout and allocation, parameter
// values and introspection. The training-loop calls (unshard, reshard,
// grad, reduce_gradients, step) are in engine_step.cpp.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine_state.h"
#include "runtime/engine/engine_options.h"
#include "runtime/engine/model_fingerprint.h"
#include "runtime/engine/storage_phase.h"

namespace zeroshard {

UnitState& EngineState::unit(UnitId u) {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units.size(), "unknown unit id {}", u);
  return units[static_cast<std::size_t>(u)];
}

double EngineState::lr_at(GroupId g, std::int64_t k) const {
  return config.scheduler.lr_at(k, g, static_cast<int>(groups.size()),
                                groups[static_cast<std::size_t>(g)].lr);
}

namespace {

// Checks that the configuration fits the compute device before anything is
// allocated on it.
void check_device_config(const EngineConfig& config, Communicator& nccl, Communicator& host) {
  config.validate_for_world(host.world_size());
  if (nccl.world_size() != host.world_size() || nccl.rank() != host.rank()) {
    throw ConfigError(fmt::format(
        "cuda engine: the device communicator (rank {} of {}) and the host communicator (rank {} of {}) must "
        "span the same ranks in the same order",
        nccl.rank(), nccl.world_size(), host.rank(), host.world_size()));
  }
  if (config.offload.param.device != OffloadDevice::none && config.offload.optimizer.device == OffloadDevice::none) {
    // The optimizer would run on the device with its parameters in host memory.
    throw ConfigError(fmt::format(
        "{}: zero_optimization.offload_param needs offload_optimizer on the cuda compute device (the update runs "
        "where the optimizer state is); set offload_optimizer.device to \"cpu\" or \"nvme\" too",
        config.source));
  }
}

// The CUDA kernels (kernels/cuda) implement Adam, AdamW and SGD; Lion and
// Adagrad have CPU kernels only, so they run on a cuda engine only where the
// update runs on the host: with offload_optimizer cpu or nvme. The same
// holds for 8-bit optimizer states (kernels/cpu/adam8bit.h).
void check_cuda_optimizer(const EngineConfig& config) {
  const OptimizerKind k = config.optimizer.kind;
  if (config.optimizer.states.dtype != StateDtype::fp32 && config.offload.optimizer.device == OffloadDevice::none) {
    throw ConfigError(fmt::format(
        "{}: optimizer.type {}: {} optimizer states have no CUDA kernel in this build: on the cuda compute device "
        "set zero_optimization.offload_optimizer.device to \"cpu\" or \"nvme\" (the update then runs on the "
        "host's CPU kernels), or use fp32 states",
        config.source, optimizer_type_name(config.optimizer), state_dtype_name(config.optimizer.states.dtype)));
  }
  if ((k == OptimizerKind::lion || k == OptimizerKind::adagrad) &&
      config.offload.optimizer.device == OffloadDevice::none) {
    throw ConfigError(fmt::format(
        "{}: optimizer.type {} has no CUDA kernel: on the cuda compute device use Adam, AdamW or SGD, or set "
        "zero_optimization.offload_optimizer.device to \"cpu\" or \"nvme\" (the update then runs on the host's "
        "CPU kernels)",
        config.source, optimizer_name(k)));
  }
}

// ZeRO++ (runtime/config/zeropp_config.h) on the cuda compute device: qwZ
// quantizes on the GPU; hpZ's and qgZ's groups are split from the device
// communicator by host, which needs a host-side exchange the NCCL engine
// does not make.
void check_cuda_zeropp(const EngineConfig& config) {
  const ZeroppConfig& z = config.zero.zeropp;
  if (z.hpz() || z.quantized_gradients) {
    throw ConfigError(fmt::format(
        "{}: zero_optimization.{} on the cuda compute device: not available in this build (ZeRO++'s groups are "
        "made on host communicators); zero_quantized_weights is",
        config.source, z.hpz() ? "zero_hpz_partition_size" : "zero_quantized_gradients"));
  }
}

}  // namespace

Engine::Engine(const EngineConfig& config, Communicator& comm)
    : s_(std::make_unique<EngineState>(config, comm, comm, make_cpu_ops())) {
  init();
}

Engine::Engine(const EngineConfig& config, Communicator& nccl, Communicator& host)
    : Engine(config, nccl, host,
             (check_device_config(config, nccl, host), check_cuda_optimizer(config), check_cuda_zeropp(config),
              make_cuda_ops(nccl))) {}

Engine::Engine(const EngineConfig& config, Communicator& device_comm, Communicator& host_comm,
               std::unique_ptr<DeviceOps> ops) {
  ZS_CHECK(ops != nullptr, "Engine: null DeviceOps");
  if (!ops->host_addressable()) check_device_config(config, device_comm, host_comm);
  if (ops->device() == ComputeDevice::cuda) {
    check_cuda_optimizer(config);
    check_cuda_zeropp(config);
  }
  s_ = std::make_unique<EngineState>(config, device_comm, host_comm, std::move(ops));
  init();
}

void Engine::init() {
  const EngineConfig& config = s_->config;
  config.validate_for_world(s_->comm.world_size());
  if (config.compute_dtype == DType::f16) s_->scaler = LossScaler(config.loss_scale);
  s_->groups.push_back(
      GroupState{.name = "default", .lr = config.optimizer.lr, .weight_decay = config.optimizer.weight_decay});
}

Engine::~Engine() = default;

UnitId Engine::add_unit(std::string name) { return s_->layout.add_unit(std::move(name)); }

GroupId Engine::add_param_group(std::string name, ParamGroupOptions options) {
  ZS_CHECK(!s_->finalized, "add_param_group(\"{}\") after finalize()", name);
  const double lr = options.lr.value_or(s_->config.optimizer.lr);
  const double wd = options.weight_decay.value_or(s_->config.optimizer.weight_decay);
  if (!(lr >= 0.0) || !(wd >= 0.0)) {
    throw ConfigError(fmt::format("parameter group \"{}\": lr ({}) and weight_decay ({}) must be >= 0",
                                  name, lr, wd));
  }
  s_->groups.push_back(GroupState{.name = std::move(name), .lr = lr, .weight_decay = wd});
  return static_cast<GroupId>(s_->groups.size() - 1);
}

ParamId Engine::add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape,
                              GroupId group) {
  ZS_CHECK(group >= 0 && static_cast<std::size_t>(group) < s_->groups.size(),
           "parameter \"{}\": unknown parameter group id {}", name, group);
  return s_->layout.add_param(unit, std::move(name), std::move(shape), group);
}

namespace {

// finalize()'s local work: the layout, the arrays and their tiers
// (runtime/sharding/array_store.h), the reducer and the unsharder.
void allocate_state(EngineState& s, const SwapSharers& sharers) {
  s.layout.finalize(s.world());
  // A per-group list in the schedule must match the groups: fail now, not at step 1.
  for (GroupId g = 0; g < static_cast<GroupId>(s.groups.size()); ++g) s.lr_at(g, 0);
  const int stage = s.stage();
  const int r = s.rank();
  // The options the memory estimator uses too (runtime/plan/memory_estimate.h).
  const ArrayPlanOptions plan = engine_array_plan_options(s.config, r);
  s.store = std::make_unique<ArrayStore>(
      s.layout, *s.ops, s.ledger,
      ArrayStoreOptions{.stage = plan.stage, .rank = plan.rank, .dtype = plan.dtype,
                        .state_count = plan.state_count, .states = plan.states, .offload = plan.offload,
                        .swap_sharers = sharers, .source = plan.source});
  s.store->set_tracer(s.tracer());
  s.units.resize(s.layout.units().size());
  for (std::size_t i = 0; i < s.units.size(); ++i) {
    const UnitInfo& info = s.layout.units()[i];
    UnitState& us = s.units[i];
    if (stage == 0) {
      for (ParamId id : info.params) {
        const ParamInfo& p = s.layout.param(id);
        if (p.numel == 0) continue;
        us.segments.push_back(ShardSegment{.shard_offset = p.offset, .flat_offset = p.offset,
                                           .length = p.numel, .param = id, .group = p.group});
      }
    } else {
      us.segments = s.layout.segments(static_cast<UnitId>(i), r);
    }
  }
  // The options the memory estimator replays a step with (runtime/plan/memory_estimate.h).
  s.reducer = std::make_unique<GradReducer>(s.comm, s.layout, *s.ops, s.pool,
                                            engine_grad_reducer_options(s.config, s.world()), s.grad_target, &s.nodes);
  s.unsharder = std::make_unique<Unsharder>(s.comm, s.layout, *s.ops, s.pool, engine_unsharder_options(s.config),
                                            s.shard_source, s.hpz_comm.get());
}

// ZeRO++'s groups of the data-parallel communicator (collective): hpZ's k
// consecutive ranks, qgZ's nodes (zeroshard.zeropp.ranks_per_node's
// blocks, else the hosts). Rank 0 prints one line on how they run.
void make_zeropp_groups(EngineState& s) {
  const ZeroppConfig& z = s.config.zero.zeropp;
  const int world = s.world(), rank = s.rank();
  const bool hpz = s.stage() == 3 && z.hpz();
  const bool qgz = s.stage() >= 2 && z.quantized_gradients;
  if (!hpz && !qgz) return;
  for (const auto& [key, size] : {std::pair{"zero_optimization.zero_hpz_partition_size", hpz ? z.hpz_partition_size : 1},
                                  std::pair{"zeroshard.zeropp.ranks_per_node", qgz ? z.ranks_per_node : 0}}) {
    if (size > 0 && (size > world || world % size != 0)) {
      throw ConfigError(fmt::format("{}: \"{}\" = {} does not divide the data-parallel world size {}",
                                    s.config.source, key, size, world));
    }
  }
  const int per_node = static_cast<int>(z.ranks_per_node);
  const std::string host = per_node > 0 ? fmt::format("zeropp-node-{}", rank / per_node) : this_host_id();
  s.nodes = split_by_node(s.comm, host);
  std::string line;
  if (hpz) {
    const int k = static_cast<int>(z.hpz_partition_size);
    s.hpz_comm = s.comm.split(rank / k, rank);
    const std::vector<int>& node = s.nodes.node_of_rank;
    bool inside = true;
    for (int r = 0; r < world; ++r) inside = inside && node[static_cast<std::size_t>(r)] == node[static_cast<std::size_t>(r / k * k)];
    line += fmt::format("hpZ: secondary shards over groups of {} ranks, {}", k,
                        inside ? "each inside a node" : "spanning nodes (their all-gathers cross hosts)");
  }
  if (rank == 0 && !line.empty()) fmt::print("zeroshard: {}\n", line);
}

}  // namespace

void Engine::finalize() {
  EngineState& s = *s_;
  ZS_CHECK(!s.finalized, "finalize() called twice");
  // Every rank must have built the same model and configuration ([Note: model fingerprint]) and
  // allocated its state (free space, memory): agreed, so that no rank is left in a collective.
  check_same_model(s.host_comm, s.config, s.layout, s.groups.size());
  check_mesh_declarations(s);  // [Note: engine on a mesh]: declared and equal over the tp group
  start_observer(s);           // clock offsets, when the breakdown or the trace is on
  const SwapSharers sharers = count_swap_sharers(s.host_comm, s.config.offload);  // the free-space check counts them all
  make_zeropp_groups(s);  // collective: before the agreed allocation, whose errors are local
  run_agreed(s.host_comm, [&] { allocate_state(s, sharers); });
  if (s.rank() == 0 && !s.reducer->note().empty()) fmt::print("zeroshard: {}\n", s.reducer->note());
  check_ties(s);  // [Note: engine on a mesh]: tied copies laid out alike, agreed over the world
  s.finalized = true;
}

namespace {

// Writes the part of `values` (parameter p's full values, fp32) that falls
// in [begin, begin + n) of its unit's flat buffer into dst (element 0 =
// begin; memory of `ops`), converted to dst_type on the host and uploaded
// alone (a copy for host memory), not the whole buffer.
void copy_window(DeviceOps& ops, void* dst, DType dst_type, std::size_t begin, std::size_t n, const ParamInfo& p,
                 std::span<const float> values) {
  const std::size_t lo = std::max(begin, p.offset);
  const std::size_t hi = std::min(begin + n, p.offset + p.numel);
  if (lo >= hi) return;
  std::vector<std::byte> host((hi - lo) * dtype_size(dst_type));
  kernels::cast(host.data(), dst_type, values.data() + (lo - p.offset), DType::f32, hi - lo);
  ops.upload(static_cast<std::byte*>(dst) + (lo - begin) * dtype_size(dst_type), host.data(), host.size());
}

// Writes parameter p's part of array a of unit u, whose element 0 is flat
// index `begin` (n elements): a window upload into memory, read-modify-write
// of the swap files on nvme.
void set_array_window(EngineState& s, UnitId u, ArrayRef a, std::size_t begin, std::size_t n, const ParamInfo& p,
                      std::span<const float> values) {
  ArrayStore& store = *s.store;
  const DType t = store.dtype(u, a);
  if (store.tier(u, a) != MemTier::nvme) {
    copy_window(store.ops(u, a), store.resident(u, a), t, begin, n, p, values);
    return;
  }
  HostBuffer holder;
  void* data = store.read(u, a, holder);
  copy_window(store.host_ops(), data, t, begin, n, p, values);
  store.store(u, a, data);
}

std::vector<float> widen_host(const void* full, DType t, const ParamInfo& p) {
  std::vector<float> out(p.numel);
  kernels::cast(out.data(), DType::f32, static_cast<const std::byte*>(full) + p.offset * dtype_size(t), t, p.numel);
  return out;
}

// Parameter p's values (in t) out of a full flat buffer in device memory.
std::vector<float> widen(EngineState& s, const void* full, DType t, const ParamInfo& p) {
  std::vector<std::byte> host(p.numel * dtype_size(t));
  s.ops->download(host.data(), static_cast<const std::byte*>(full) + p.offset * dtype_size(t), host.size());
  ParamInfo at0 = p;
  at0.offset = 0;
  return widen_host(host.data(), t, at0);
}

}  // namespace

std::vector<std::byte> gather_host(EngineState& s, UnitId u, const void* shard, DType t) {
  const UnitInfo& info = s.info(u);
  std::vector<std::byte> full(info.padded * dtype_size(t));
  s.host_comm.all_gather(shard, full.data(), info.shard, t);
  return full;
}

namespace {

// set_parameter's writes, on this rank alone.
void write_parameter(EngineState& s, const ParamInfo& info, std::span<const float> values) {
  const UnitInfo& u = s.info(info.unit);
  const std::size_t shard_begin = static_cast<std::size_t>(s.rank()) * u.shard;
  if (s.stage() < 3) {
    set_array_window(s, info.unit, {ArrayKind::params}, 0, u.padded, info, values);
  } else {
    void* gathered = s.unsharder->full(info.unit);  // nullptr when not gathered
    s.store->release_param_staging(info.unit);  // a swapped-in copy would be stale
    set_array_window(s, info.unit, {ArrayKind::params}, shard_begin, u.shard, info, values);
    if (gathered != nullptr) copy_window(*s.ops, gathered, s.dtype(), 0, u.padded, info, values);
  }
  if (s.mixed()) {
    const bool full = s.stage() == 0;
    set_array_window(s, info.unit, {ArrayKind::master}, full ? 0 : shard_begin, full ? u.padded : u.shard, info,
                     values);
  }
}

}  // namespace

void Engine::set_parameter(ParamId p, std::span<const float> values) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "set_parameter() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  ZS_CHECK(values.size() == info.numel, "set_parameter(\"{}\"): got {} values, parameter has {}",
           info.name, values.size(), info.numel);
  run_storage_phase(s, fmt::format("set_parameter(\"{}\")", info.name), [&] { write_parameter(s, info, values); });
}

std::vector<float> Engine::gather_parameter(ParamId p) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "gather_parameter() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  if (s.stage() < 3) return widen(s, s.store->resident(info.unit, {ArrayKind::params}), s.dtype(), info);
  if (const void* full = s.unsharder->full(info.unit)) return widen(s, full, s.dtype(), info);
  HostBuffer holder;
  const std::vector<std::byte> full =
      gather_host(s, info.unit, s.store->read(info.unit, {ArrayKind::params}, holder), s.dtype());
  return widen_host(full.data(), s.dtype(), info);
}

std::vector<float> Engine::gather_master(ParamId p) {
  EngineState& s = *s_;
  if (!s.mixed()) return gather_parameter(p);
  const ParamInfo& info = s.layout.param(p);
  if (s.stage() == 0) return widen(s, s.store->resident(info.unit, {ArrayKind::master}), DType::f32, info);
  HostBuffer holder;
  const std::vector<std::byte> full =
      gather_host(s, info.unit, s.store->read(info.unit, {ArrayKind::master}, holder), DType::f32);
  return widen_host(full.data(), DType::f32, info);
}

int Engine::stage() const { return s_->stage(); }
ComputeDevice Engine::device() const { return s_->ops->device(); }
int Engine::rank() const { return s_->rank(); }
int Engine::world_size() const { return s_->world(); }
DType Engine::compute_dtype() const { return s_->dtype(); }
double Engine::loss_scale() const { return s_->dtype() == DType::f16 ? s_->scaler.scale() : 1.0; }
const LossScalerState& Engine::loss_scaler_state() const { return s_->scaler.state(); }
std::int64_t Engine::skipped_steps() const { return s_->scaler.state().overflows; }
const EngineConfig& Engine::config() const { return s_->config; }
const FlatLayout& Engine::layout() const { return s_->layout; }
const MemoryLedger& Engine::ledger() const { return s_->ledger; }

OffloadStats Engine::offload_stats() const {
  if (!s_->store || !s_->store->offloaded()) return {};
  const SwapPipelineStats& t = s_->store->io_total();
  return OffloadStats{.bytes_read = t.bytes_read, .bytes_written = t.bytes_written, .read_wait_s = t.read_wait_s,
                      .write_wait_s = t.write_wait_s, .update_s = t.update_s};
}
std::int64_t Engine::micro_steps() const { return s_->micro_steps; }
std::int64_t Engine::optimizer_steps() const { return s_->optimizer_steps; }

float Engine::group_lr(GroupId g) const {
  ZS_CHECK(g >= 0 && static_cast<std::size_t>(g) < s_->groups.size(), "unknown parameter group {}", g);
  return s_->groups[static_cast<std::size_t>(g)].lr;
}

double Engine::current_lr(GroupId g) const {
  ZS_CHECK(g >= 0 && static_cast<std::size_t>(g) < s_->groups.size(), "unknown parameter group {}", g);
  return s_->lr_at(g, s_->optimizer_steps);
}

std::vector<float> Engine::optimizer_state(UnitId u, int index) const {
  EngineState& s = *s_;
  const int states = s.store->options().state_count;
  ZS_CHECK(index >= 0 && index < states, "optimizer state index {} out of range ({} states)", index, states);
  return state_window_f32(s, u, index, s.rank());
}

std::pair<std::int64_t, std::int64_t> Engine::unit_all_gathers(UnitId u) const {
  ZS_CHECK(s_->finalized, "unit_all_gathers() before finalize()");
  return {s_->unsharder->all_gathers(u), s_->unsharder->secondary_gathers(u)};
}

std::vector<float> Engine::param_shard(UnitId u) const {
  EngineState& s = *s_;
  const UnitInfo& info = s.info(u);
  const std::size_t begin = static_cast<std::size_t>(s.rank()) * info.shard;
  HostBuffer holder;
  const float* p = nullptr;
  if (s.mixed()) {
    p = static_cast<const float*>(s.store->read(u, {ArrayKind::master}, holder));
    if (s.stage() == 0) p += begin;
  } else {
    p = static_cast<const float*>(s.store->read(u, {ArrayKind::params}, holder));
    if (s.stage() < 3) p += begin;
  }
  return std::vector<float>(p, p + info.shard);
}

}  // namespace zeroshard
