// Engine: construction (on a mesh too: [Note: engine on a mesh]), model
// declaration (tensor-parallel layouts and ties included), layout and
// allocation, parameter values and introspection. The training-loop calls
// (unshard, reshard, grad, reduce_gradients, step) are in engine_step.cpp.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <cstring>

#include "comm/collective_error.h"
#include "comm/mesh.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "optimizer/muon_params.h"
#include "runtime/engine/save_phases.h"
#include "runtime/engine/engine_state.h"
#include "runtime/engine/engine_options.h"
#include "runtime/engine/model_fingerprint.h"
#include "runtime/engine/storage_phase.h"

namespace zeroshard {

namespace {

// The GradNorm settings of an engine with `config` on data-parallel rank
// `rank` of the data-parallel group at `comms`' mesh position.
GradNormOptions grad_norm_options(const EngineConfig& config, int rank, const EngineComms& comms) {
  return GradNormOptions{.stage = config.zero.stage, .rank = rank, .dtype = config.accumulation_dtype(),
                         .order = config.reduction_order,
                         .optimizer_on_nvme = config.offload.optimizer.device == OffloadDevice::nvme,
                         .dp_group = comms.pp_rank() * comms.tp_size() + comms.tp_rank(),
                         .source = config.source};
}

// The ShardOptimizer settings of an engine with `config` on rank `rank`.
ShardOptimizerOptions shard_optimizer_options(const EngineConfig& config, int rank) {
  return ShardOptimizerOptions{.stage = config.zero.stage, .rank = rank, .dtype = config.compute_dtype,
                               .grad_dtype = config.accumulation_dtype(), .hyper = config.optimizer, .schedule = config.scheduler,
                               .swap = config.offload.optimizer};
}

}  // namespace

EngineState::EngineState(const EngineConfig& c, Communicator& device, Communicator& host,
                         std::unique_ptr<DeviceOps> ops_in, const Mesh* mesh)
    : config(c),
      observer(std::make_unique<StepObserver>(c.observe, c.steps_per_print)),
      comms(device, host, mesh, c.observe, &observer->tracer()),
      ops(std::move(ops_in)),
      pool(ledger, *ops),
      norm(layout, *ops, pool, comms.tp(), comms.norm(), grad_norm_options(c, device.rank(), comms)),
      optimizer(layout, *ops, shard_optimizer_options(c, device.rank())) {}

EngineState::~EngineState() = default;

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
// holds for 8-bit optimizer states (kernels/cpu/adam/adam8bit.h). Muon's
// matrices run on the host at any tier (MuonStep stages device arrays
// through ArrayStore::read / store); its AdamW on the device's kernels.
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
        "made on host communicators); zero_quantized_weights runs there",
        config.source, z.hpz() ? "zero_hpz_partition_size" : "zero_quantized_gradients"));
  }
}

// parameter_server runs on the cpu engine over one communicator only.
void refuse_parameter_server(const EngineConfig& config, const char* where) {
  if (config.parameter_server.enabled()) {
    throw ConfigError(
        fmt::format("{}: \"parameter_server.servers\" = {} with {}: the parameter-server layout runs "
                    "on the cpu engine over one communicator (Engine(config, comm))",
                    config.source, config.parameter_server.servers, where));
  }
}

// The parameter-server roles of `config` over `comm` (null without servers).
std::unique_ptr<ParameterServerRoles> make_roles(const EngineConfig& config, Communicator& comm) {
  if (!config.parameter_server.enabled()) return nullptr;
  config.validate();  // the same problems on every rank, before the split's collectives
  // Every rank reaches the same roles or the same error: agreed, so that a
  // job reports it once.
  std::unique_ptr<ParameterServerRoles> roles;
  run_agreed(comm,
             [&] { roles = std::make_unique<ParameterServerRoles>(comm, config.parameter_server, config.source); });
  return roles;
}

// The configuration a rank's EngineState keeps: a parameter-server worker
// keeps no optimizer state, so nothing of it is offloaded there.
EngineConfig role_config(const EngineConfig& config, const ParameterServerRoles* roles) {
  if (roles == nullptr || roles->is_server()) return config;
  return ps_worker_config(config);
}

// The mesh constructor's checks before any state exists.
const EngineConfig& checked_for_mesh(const EngineConfig& config, const Mesh& mesh) {
  refuse_parameter_server(config, "a device mesh");
  if (mesh.tp_size() > 1 && config.offload.optimizer.device == OffloadDevice::nvme) {
    throw ConfigError(fmt::format(
        "{}: zero_optimization.offload_optimizer.device \"nvme\" with tensor-parallel size {} (mesh dp={} x "
        "tp={}): the replicated parameters' gradients are averaged over the tensor-parallel group in memory; "
        "use \"cpu\" or \"none\", or tp = 1",
        config.source, mesh.tp_size(), mesh.dp_size(), mesh.tp_size()));
  }
  return config;
}

}  // namespace

Engine::Engine(const EngineConfig& config, Communicator& comm)
    : roles_(make_roles(config, comm)),
      s_(std::make_unique<EngineState>(role_config(config, roles_.get()), roles_ ? roles_->engine_group() : comm,
                                       roles_ ? roles_->engine_group() : comm, make_cpu_ops(), nullptr)) {
  s_->roles = roles_.get();
  init();
}

Engine::Engine(const EngineConfig& config, const Mesh& mesh)
    : s_(std::make_unique<EngineState>(checked_for_mesh(config, mesh), mesh.dp_group(), mesh.dp_group(),
                                       make_cpu_ops(), &mesh)) {
  init();
}

Engine::Engine(const EngineConfig& config, Communicator& nccl, Communicator& host)
    : Engine(config, nccl, host,
             (check_device_config(config, nccl, host), check_cuda_optimizer(config), check_cuda_zeropp(config),
              make_cuda_ops(nccl))) {}

Engine::Engine(const EngineConfig& config, Communicator& device_comm, Communicator& host_comm,
               std::unique_ptr<DeviceOps> ops) {
  ZS_CHECK(ops != nullptr, "Engine: null DeviceOps");
  refuse_parameter_server(config, "an engine on a given compute device (cuda or simulated)");
  if (!ops->host_addressable()) check_device_config(config, device_comm, host_comm);
  if (ops->device() == ComputeDevice::cuda) {
    check_cuda_optimizer(config);
    check_cuda_zeropp(config);
  }
  s_ = std::make_unique<EngineState>(config, device_comm, host_comm, std::move(ops), nullptr);
  init();
}

void Engine::init() {
  const EngineConfig& config = s_->config;
  // The batch keys count the ranks that train: a parameter-server job's
  // workers ("direct": a worker's Engine trains alone, its keys its own).
  const bool alone = roles_ && roles_->direct() && !roles_->is_server();
  config.validate_for_world(roles_ && !alone ? roles_->workers() : s_->world());
  if (config.compute_dtype == DType::f16) s_->progress.scaler = LossScaler(config.loss_scale);
}

Engine::~Engine() = default;

UnitId Engine::add_unit(std::string name) { return s_->layout.add_unit(std::move(name)); }

GroupId Engine::add_param_group(std::string name, ParamGroupOptions options) {
  ZS_CHECK(!s_->finalized(), "add_param_group(\"{}\") after finalize()", name);
  return s_->optimizer.add_group(std::move(name), options);
}

ParamId Engine::add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape,
                              GroupId group) {
  ZS_CHECK(group >= 0 && static_cast<std::size_t>(group) < s_->optimizer.groups().size(),
           "parameter \"{}\": unknown parameter group id {}", name, group);
  // [Note: Muon on shards]: the muon_params patterns move default-group
  // matrices to Muon's group (others, frozen ones included, keep theirs).
  if (const OptimizerHyper& h = s_->config.optimizer; h.kind == OptimizerKind::muon) {
    if (const std::string why = muon_reason(h.muon.params, name, group); !why.empty()) {
      check_muon_shape(s_->config.source, name, shape, why);
      group = kMuonGroup;
    }
  }
  return s_->layout.add_param(unit, std::move(name), std::move(shape), group);
}

ParamId Engine::add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape, GroupId group,
                              TensorParallel tp) {
  if (tp.split_dim >= static_cast<int>(shape.size())) {
    throw InvariantError(fmt::format("parameter \"{}\": split_dim {} is outside its {}-dimensional shape", name,
                                     tp.split_dim, shape.size()));
  }
  if (tp.split_dim < -1) tp.split_dim = -1;
  const ParamId id = add_parameter(unit, std::move(name), std::move(shape), group);
  s_->norm.declare(id, tp);
  return id;
}

Communicator& Engine::tp_communicator() {
  Communicator* tp = s_->comms.tp();
  if (tp == nullptr) throw InvariantError("tp_communicator(): only an engine on a mesh (Engine(config, mesh)) has one");
  return *tp;
}

Communicator& Engine::pp_communicator() {
  Communicator* pp = s_->comms.pp();
  if (pp == nullptr) throw InvariantError("pp_communicator(): only an engine on a mesh (Engine(config, mesh)) has one");
  return *pp;
}

void Engine::set_model_config(nlohmann::json config) { s_->model_config = std::move(config); }

void Engine::tie_parameter(ParamId p, Communicator& group) {
  EngineState& s = *s_;
  if (!s.comms.on_mesh()) {
    throw InvariantError("tie_parameter(): only an engine on a mesh (Engine(config, mesh)) ties parameters");
  }
  if (s.finalized()) throw InvariantError("tie_parameter() after finalize()");
  if (p < 0 || static_cast<std::size_t>(p) >= s.layout.params().size()) {
    throw InvariantError(fmt::format("tie_parameter(): unknown parameter id {}", p));
  }
  s.norm.tie(p, group);
}

namespace {

// finalize()'s local work: the layout, the optimizer's parameter runs, the
// arrays and their tiers (runtime/sharding/array_store.h), the reducer and
// the unsharder.
std::unique_ptr<EngineParts> allocate_state(EngineState& s, const SwapSharers& sharers) {
  s.layout.finalize(s.world());
  s.optimizer.finalize();  // a per-group schedule that does not match the groups fails here
  s.optimizer.set_tracer(s.tracer());
  auto parts = std::make_unique<EngineParts>(s, sharers);
  parts->store.set_tracer(s.tracer());
  s.progress.reduced.assign(s.layout.units().size(), false);
  return parts;
}

// optimizer.type Muon: every muon_params pattern names a parameter Muon
// updates (optimizer/muon_params.h); throws ConfigError otherwise.
void check_muon_patterns(const EngineState& s) {
  const OptimizerHyper& h = s.config.optimizer;
  if (h.kind != OptimizerKind::muon) return;
  std::vector<std::string> muon;
  std::vector<std::pair<std::string, std::string>> others;
  for (const ParamInfo& p : s.layout.params()) {
    if (p.group == s.optimizer.muon_group()) {
      muon.push_back(p.name);
    } else if (p.group != 0) {
      others.emplace_back(p.name, s.optimizer.group(p.group).name);
    }
  }
  const std::vector<std::string> lines = unmatched_muon_patterns(h.muon.params, muon, others);
  if (!lines.empty()) {
    throw ConfigError(fmt::format("{}: optimizer.params.muon_params: {}", s.config.source, fmt::join(lines, "; ")));
  }
}

// The tp group's size and each parameter's split dimension, for Muon's
// whole-matrix gather ([Note: Muon on a tensor-parallel mesh]).
MuonTensorParallel muon_tensor_parallel(const EngineState& s) {
  MuonTensorParallel tp{.size = s.comms.tp_size(), .split_dims = {}};
  for (std::size_t p = 0; p < s.layout.params().size(); ++p) {
    tp.split_dims.push_back(s.norm.parallel(static_cast<ParamId>(p)).split_dim);
  }
  return tp;
}

}  // namespace

EngineParts::EngineParts(EngineState& s, const SwapSharers& sharers)
    // The options the memory estimator uses too (runtime/plan/memory_estimate.h).
    : store(s.layout, *s.ops, s.ledger,
            ArrayStoreOptions::from_plan(engine_array_plan_options(s.config, s.rank()), sharers)),
      link(store, s.comms.host(), s.progress, s.config.gradient_accumulation_steps),
      // The options the memory estimator replays a step with (runtime/plan/memory_estimate.h).
      reducer(s.comms.dp(), s.layout, *s.ops, s.pool, engine_grad_reducer_options(s.config, s.world()), link,
              &s.comms.zeropp_nodes()),
      unsharder(s.comms.dp(), s.layout, *s.ops, s.pool, engine_unsharder_options(s.config), link, s.comms.hpz()),
      muon(s.layout, s.optimizer,
           MuonStepOptions{.stage = s.stage(),
                           .rank = s.rank(),
                           .world_size = s.world(),
                           .tp_rank = s.comms.tp_rank(),
                           .tp = muon_tensor_parallel(s),
                           .dtype = s.dtype(),
                           .hyper = s.config.optimizer,
                           .source = s.config.source}) {
  if (s.config.overlap_optimizer_step) {
    // The update runs on the host with host-addressable arrays only (no
    // device staging: the background thread has no stream of its own).
    if (!s.ops->host_addressable()) {
      throw ConfigError(fmt::format("{}: zeroshard.overlap_optimizer_step needs the cpu engine", s.config.source));
    }
    deferred = std::make_unique<DeferredStep>(store, s.optimizer, s.tracer());
    link.set_deferred(deferred.get());
  }
}

namespace {

// finalize() of an engine (a worker's, with parameter servers): the model
// checked, the state allocated, observability started.
void finalize_engine(EngineState& s) {
  Communicator& host = s.comms.host();
  // Every rank must have built the same model and configuration ([Note: model fingerprint]) and
  // allocated its state (free space, memory): agreed, so that no rank is left in a collective.
  check_same_model(host, s.config, s.layout, s.optimizer.groups().size());
  check_muon_patterns(s);  // the same model on every rank (checked above): the same outcome
  s.norm.check_declarations();  // [Note: engine on a mesh]: declared and equal over the tp group
  start_observer(s);            // clock offsets, when the breakdown or the trace is on
  open_monitor(s);              // csv_monitor's files, when it is on
  const SwapSharers sharers = count_swap_sharers(host, s.config.offload);  // the free-space check counts them all
  // ZeRO++'s groups (collective): before the agreed allocation, whose errors are local.
  const std::string zeropp_line = s.comms.make_zeropp_groups(s.config.zero.zeropp, s.stage(), s.config.source);
  std::unique_ptr<EngineParts> parts;
  run_agreed(host, [&] { parts = allocate_state(s, sharers); });
  // [Note: engine on a mesh]: tied copies laid out alike, agreed over the world.
  if (s.comms.on_mesh()) s.norm.check_ties();
  s.parts = std::move(parts);
  // checkpoint.async: the staging area, so that the ledger counts it from here.
  run_agreed(host, [&] { reserve_checkpoint_staging(s); });
  if (s.rank() == 0) {
    for (const std::string& line : {zeropp_line, s.reducer().note()}) {
      if (!line.empty()) fmt::print("zeroshard: {}\n", line);
    }
  }
}

// finalize() of a parameter server: the model checked among the servers,
// the layout finalized for the W workers ("direct": for the S servers),
// and a ParameterServer holding the optimizer shards of the workers it
// serves (its own window).
void finalize_server(EngineState& s, const ParameterServerRoles& roles) {
  Communicator& host = s.comms.host();  // the servers' group
  check_same_model(host, s.config, s.layout, s.optimizer.groups().size());
  SwapSharers sharers = count_swap_sharers(host, s.config.offload);
  // Each server keeps one store per worker it serves on the same folders.
  const int per_server = roles.direct() ? 1 : (roles.workers() + roles.servers() - 1) / roles.servers();
  sharers.optimizer *= per_server;
  run_agreed(host, [&] {
    // The engine's own ShardOptimizer keeps the groups only: each hosted
    // worker's is finalized for that worker's rank.
    s.layout.finalize(roles.direct() ? roles.servers() : roles.workers());
    // The stores and updates of the workers' ranks as the plain engine
    // would make them (without the worker's parameter_server section).
    EngineConfig plain = s.config;
    plain.parameter_server = ParameterServerConfig{};
    ParameterServerOptions o{
        .optimizer = shard_optimizer_options(plain, 0),
        .store = ArrayStoreOptions::from_plan(ps_server_array_plan_options(s.config, 0), sharers),
        .groups = {s.optimizer.groups().begin() + 1, s.optimizer.groups().end()},
        .left_after_s =
            s.config.observe.collective_timeout_s > 0 ? s.config.observe.collective_timeout_s : kPsLeftAfterDefaultS,
        .push_grad_dtype = s.config.parameter_server.push_grad_dtype(s.config.communication_data_type),
        .staleness_aware_lr = s.config.parameter_server.staleness_aware_lr};
    s.server = std::make_unique<ParameterServer>(roles, s.layout, *s.ops, s.ledger, o, s.tracer());
  });
}

}  // namespace

void Engine::finalize() {
  EngineState& s = *s_;
  ZS_CHECK(!s.finalized(), "finalize() called twice");
  if (roles_ == nullptr) {
    finalize_engine(s);
    return;
  }
  // [Note: parameter-server layout]: each side agrees within its group,
  // then the job agrees, so that no rank waits for the other side; the
  // workers' hellos come after, and the servers answer them in serve().
  run_agreed(roles_->world(), [&] { roles_->is_server() ? finalize_server(s, *roles_) : finalize_engine(s); });
  if (roles_->is_server()) return;
  s.ps_client = std::make_unique<ParameterServerClient>(
      *roles_, s.layout, s.store(), s.stage(), s.config.parameter_server.staleness,
      s.config.parameter_server.push_grad_dtype(s.config.communication_data_type), s.tracer());
  run_agreed(s.comms.host(), [&] { s.ps_client->connect(); });
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

// One parameter's full values (fp32) to write.
struct ParamValues {
  const ParamInfo* info;
  std::span<const float> values;
};

// Writes the parameters' parts of array a of unit u (all of them u's),
// whose element 0 is flat index `begin` (n elements): window uploads into
// memory, one read-modify-write of the swap files on nvme for all of them.
void set_array_window(EngineState& s, UnitId u, ArrayRef a, std::size_t begin, std::size_t n,
                      std::span<const ParamValues> params) {
  ArrayStore& store = s.store();
  const DType t = store.dtype(u, a);
  if (store.tier(u, a) != MemTier::nvme) {
    for (const ParamValues& p : params)
      copy_window(store.ops(u, a), store.resident(u, a), t, begin, n, *p.info, p.values);
    return;
  }
  HostBuffer holder;
  void* data = store.read(u, a, holder);
  for (const ParamValues& p : params) copy_window(store.host_ops(), data, t, begin, n, *p.info, p.values);
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

// set_parameters' writes into unit u (compute copy, gathered copy, master
// weights), on this rank alone.
void write_parameters(EngineState& s, UnitId unit, std::span<const ParamValues> params) {
  const UnitInfo& u = s.info(unit);
  const std::size_t shard_begin = static_cast<std::size_t>(s.rank()) * u.shard;
  if (s.stage() < 3) {
    set_array_window(s, unit, {ArrayKind::params}, 0, u.padded, params);
  } else {
    void* gathered = s.unsharder().full(unit);  // nullptr when not gathered
    s.store().release_param_staging(unit);      // a swapped-in copy would be stale
    set_array_window(s, unit, {ArrayKind::params}, shard_begin, u.shard, params);
    if (gathered != nullptr) {
      for (const ParamValues& p : params) copy_window(*s.ops, gathered, s.dtype(), 0, u.padded, *p.info, p.values);
    }
  }
  if (s.mixed()) {
    const bool full = s.stage() == 0;
    set_array_window(s, unit, {ArrayKind::master}, full ? 0 : shard_begin, full ? u.padded : u.shard, params);
  }
}

}  // namespace

std::vector<std::byte> gather_host(EngineState& s, UnitId u, const void* shard, DType t) {
  const UnitInfo& info = s.info(u);
  std::vector<std::byte> full(info.padded * dtype_size(t));
  s.comms.host().all_gather(shard, full.data(), info.shard, t);
  return full;
}

void refuse_with_servers(const EngineState& s, const char* call, const char* why) {
  if (s.roles != nullptr) {
    throw ConfigError(
        fmt::format("{}: {} with \"parameter_server.servers\" = {}: not available for the "
                    "parameter-server layout ({})",
                    s.config.source, call, s.config.parameter_server.servers, why));
  }
}

void refuse_direct_push(const EngineState& s, const char* call) {
  if (s.roles != nullptr && s.roles->direct()) {
    throw ConfigError(fmt::format(
        "{}: {} with \"parameter_server.push\" = \"direct\": not available (the servers hold one state that "
        "every worker's pushes update, which no checkpoint rank file describes); use \"reduce\" to checkpoint",
        s.config.source, call));
  }
}

bool Engine::is_parameter_server() const { return roles_ != nullptr && roles_->is_server(); }

ParameterServerClientStats Engine::parameter_server_stats() const {
  return s_->ps_client ? s_->ps_client->stats() : ParameterServerClientStats{};
}

ParameterServerStats Engine::served_stats() const { return s_->server ? s_->server->stats() : ParameterServerStats{}; }

Communicator& Engine::dp_communicator() {
  if (roles_ != nullptr) return roles_->group();
  return s_->comms.raw_dp();
}

void Engine::serve() {
  EngineState& s = *s_;
  ZS_CHECK(is_parameter_server(), "serve() on a rank that is not a parameter server");
  ZS_CHECK(s.server != nullptr, "serve() before finalize()");
  s.server->serve();
}

void Engine::set_parameter(ParamId p, std::span<const float> values) {
  const std::span<const float> one[] = {values};
  set_parameters(std::span<const ParamId>(&p, 1), one);
}

void Engine::set_parameters(std::span<const ParamId> params, std::span<const std::span<const float>> values) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "set_parameters() before finalize()");
  settle_deferred_step(s, "set_parameters()");
  settle_parameter_server(s, "set_parameters()");
  if (s.ps_client && s.ps_client->pushed() > 0 && s.roles->direct()) {
    throw ConfigError(fmt::format(
        "{}: set_parameters() after step {} with \"parameter_server.push\" = \"direct\": the servers take a "
        "worker's parameters only before their first update (every worker's pushes update one copy)",
        s.config.source, s.ps_client->pushed()));
  }
  ZS_CHECK(params.size() == values.size(), "set_parameters(): {} parameters but {} value arrays", params.size(),
           values.size());
  if (params.empty()) return;
  std::vector<ParamValues> list;
  const UnitId unit = s.layout.param(params[0]).unit;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& info = s.layout.param(params[i]);
    ZS_CHECK(values[i].size() == info.numel, "set_parameter(\"{}\"): got {} values, parameter has {}", info.name,
             values[i].size(), info.numel);
    ZS_CHECK(info.unit == unit, "set_parameters(): \"{}\" is in unit \"{}\", \"{}\" in unit \"{}\"",
             s.layout.param(params[0]).name, s.layout.unit(unit).name, info.name, s.layout.unit(info.unit).name);
    list.push_back({&info, values[i]});
  }
  const std::string what = params.size() == 1 ? fmt::format("set_parameter(\"{}\")", list[0].info->name)
                                              : fmt::format("set_parameters(unit \"{}\")", s.layout.unit(unit).name);
  run_storage_phase(s, what, [&] { write_parameters(s, unit, list); });
  // The servers' copy is replaced at the next push.
  if (s.ps_client) s.ps_client->mark_params_dirty();
}

std::vector<float> Engine::gather_parameter(ParamId p) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "gather_parameter() before finalize()");
  settle_deferred_step(s, "gather_parameter()");
  settle_parameter_server(s, "gather_parameter()");
  const ParamInfo& info = s.layout.param(p);
  if (s.stage() < 3) return widen(s, s.store().resident(info.unit, {ArrayKind::params}), s.dtype(), info);
  if (const void* full = s.unsharder().full(info.unit)) return widen(s, full, s.dtype(), info);
  HostBuffer holder;
  const std::vector<std::byte> full =
      gather_host(s, info.unit, s.store().read(info.unit, {ArrayKind::params}, holder), s.dtype());
  return widen_host(full.data(), s.dtype(), info);
}

std::vector<float> Engine::gather_master(ParamId p) {
  EngineState& s = *s_;
  settle_deferred_step(s, "gather_master()");
  settle_parameter_server(s, "gather_master()");
  if (!s.mixed()) return gather_parameter(p);
  const ParamInfo& info = s.layout.param(p);
  if (s.stage() == 0) return widen(s, s.store().resident(info.unit, {ArrayKind::master}), DType::f32, info);
  HostBuffer holder;
  const std::vector<std::byte> full =
      gather_host(s, info.unit, s.store().read(info.unit, {ArrayKind::master}, holder), DType::f32);
  return widen_host(full.data(), DType::f32, info);
}

int Engine::stage() const { return s_->stage(); }
ComputeDevice Engine::device() const { return s_->ops->device(); }
int Engine::rank() const { return s_->rank(); }
int Engine::world_size() const { return s_->world(); }
DType Engine::compute_dtype() const { return s_->dtype(); }
double Engine::loss_scale() const { return s_->dtype() == DType::f16 ? s_->progress.scaler.scale() : 1.0; }
const LossScalerState& Engine::loss_scaler_state() const { return s_->progress.scaler.state(); }
std::int64_t Engine::skipped_steps() const { return s_->progress.scaler.state().overflows; }
const EngineConfig& Engine::config() const { return s_->config; }
const FlatLayout& Engine::layout() const { return s_->layout; }
const MemoryLedger& Engine::ledger() const { return s_->ledger; }

ActivationStore& Engine::activations() {
  if (s_->activations == nullptr) {
    s_->activations = std::make_unique<ActivationStore>(s_->config.activation_checkpointing, s_->comms.tp(), s_->ledger);
  }
  return *s_->activations;
}

OffloadStats Engine::offload_stats() const {
  if (!s_->finalized() || !s_->store().offloaded()) return {};
  join_deferred_step(*s_);
  const SwapPipelineStats& t = s_->store().io_total();
  return OffloadStats{.bytes_read = t.bytes_read, .bytes_written = t.bytes_written, .read_wait_s = t.read_wait_s,
                      .write_wait_s = t.write_wait_s, .update_s = t.update_s};
}
std::uint64_t Engine::host_pool_bytes() const { return s_->finalized() ? s_->store().host_pool().reserved_bytes() : 0; }
std::int64_t Engine::micro_steps() const { return s_->progress.micro_steps; }
std::int64_t Engine::optimizer_steps() const { return s_->progress.optimizer_steps; }

std::vector<int> Engine::muon_owners() const { return s_->muon().owners(); }

GroupId Engine::muon_group() const { return s_->optimizer.muon_group(); }

float Engine::group_lr(GroupId g) const { return static_cast<float>(s_->optimizer.group(g).lr); }

double Engine::current_lr(GroupId g) const {
  s_->optimizer.group(g);  // checks g
  return s_->optimizer.lr_at(g, s_->progress.optimizer_steps);
}

int Engine::tp_size() const { return s_->comms.tp_size(); }
int Engine::tp_rank() const { return s_->comms.tp_rank(); }
TensorParallel Engine::param_parallel(ParamId p) const { return s_->norm.parallel(p); }
int Engine::pp_size() const { return s_->comms.pp_size(); }
int Engine::pp_rank() const { return s_->comms.pp_rank(); }

std::vector<float> Engine::optimizer_state(UnitId u, int index) const {
  EngineState& s = *s_;
  refuse_with_servers(s, "optimizer_state()", "the optimizer state is on the servers; a checkpoint holds it");
  const int states = s.store().options().state_count;
  ZS_CHECK(index >= 0 && index < states, "optimizer state index {} out of range ({} states)", index, states);
  join_deferred_step(s);
  return s.optimizer.state_window_f32(s.store(), u, index, s.rank());
}

std::pair<std::int64_t, std::int64_t> Engine::unit_all_gathers(UnitId u) const {
  ZS_CHECK(s_->finalized(), "unit_all_gathers() before finalize()");
  return {s_->unsharder().all_gathers(u), s_->unsharder().secondary_gathers(u)};
}

std::vector<float> Engine::param_shard(UnitId u) const {
  EngineState& s = *s_;
  join_deferred_step(s);
  const UnitInfo& info = s.info(u);
  const std::size_t begin = static_cast<std::size_t>(s.rank()) * info.shard;
  HostBuffer holder;
  const float* p = nullptr;
  if (s.mixed()) {
    p = static_cast<const float*>(s.store().read(u, {ArrayKind::master}, holder));
    if (s.stage() == 0) p += begin;
  } else {
    p = static_cast<const float*>(s.store().read(u, {ArrayKind::params}, holder));
    if (s.stage() < 3) p += begin;
  }
  return std::vector<float>(p, p + info.shard);
}

}  // namespace zeroshard
