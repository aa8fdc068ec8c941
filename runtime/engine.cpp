// Engine: construction, model declaration, layout and allocation, parameter
// values and introspection. The training-loop calls (unshard, reshard,
// grad, reduce_gradients, step) are in engine_step.cpp.
#include "runtime/engine.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "runtime/engine_state.h"

namespace zeroshard {

UnitState& EngineState::unit(UnitId u) {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units.size(), "unknown unit id {}", u);
  return units[static_cast<std::size_t>(u)];
}

Engine::Engine(const EngineConfig& config, Communicator& comm)
    : s_(std::make_unique<EngineState>(config, comm)) {
  config.validate_for_world(comm.world_size());
  s_->groups.push_back(
      GroupState{.name = "default", .lr = config.optimizer.lr, .weight_decay = config.optimizer.weight_decay});
}

Engine::~Engine() = default;

UnitId Engine::add_unit(std::string name) { return s_->layout.add_unit(std::move(name)); }

GroupId Engine::add_param_group(std::string name, ParamGroupOptions options) {
  ZS_CHECK(!s_->finalized, "add_param_group(\"{}\") after finalize()", name);
  const float lr = options.lr.value_or(s_->config.optimizer.lr);
  const float wd = options.weight_decay.value_or(s_->config.optimizer.weight_decay);
  if (!(lr >= 0.0f) || !(wd >= 0.0f)) {
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

void Engine::finalize() {
  EngineState& s = *s_;
  ZS_CHECK(!s.finalized, "finalize() called twice");
  s.layout.finalize(s.world());
  const int stage = s.stage();
  const int r = s.rank();
  const int nstates = optimizer_state_count(s.config.optimizer);
  constexpr std::uint64_t f = sizeof(float);
  s.units.resize(s.layout.units().size());
  for (std::size_t i = 0; i < s.units.size(); ++i) {
    const UnitInfo& info = s.layout.units()[i];
    UnitState& us = s.units[i];
    const std::uint64_t full = info.padded, full_pad = info.padded - info.numel;
    const std::uint64_t shard = info.shard, shard_pad = info.shard - info.logical_in_shard(r);

    if (stage < 3) {
      us.params = AlignedBuffer<float>(full);
      s.ledger.add(MemCategory::parameters, MemTier::device, full * f, full_pad * f);
    } else {
      us.params = AlignedBuffer<float>(shard);
      s.ledger.add(MemCategory::parameters, MemTier::device, shard * f, shard_pad * f);
    }
    if (stage < 2) {
      us.grad_full = AlignedBuffer<float>(full);
      s.ledger.add(MemCategory::gradients, MemTier::device, full * f, full_pad * f);
    } else {
      us.grad_shard = AlignedBuffer<float>(shard);
      s.ledger.add(MemCategory::gradients, MemTier::device, shard * f, shard_pad * f);
    }
    const std::uint64_t state_n = stage == 0 ? full : shard;
    const std::uint64_t state_pad = stage == 0 ? full_pad : shard_pad;
    for (int k = 0; k < nstates; ++k) {
      us.states.emplace_back(state_n);
      s.ledger.add(MemCategory::optimizer_states, MemTier::device, state_n * f, state_pad * f);
    }
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
  s.finalized = true;
}

void Engine::set_parameter(ParamId p, std::span<const float> values) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "set_parameter() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  ZS_CHECK(values.size() == info.numel, "set_parameter(\"{}\"): got {} values, parameter has {}",
           info.name, values.size(), info.numel);
  UnitState& us = s.unit(info.unit);
  if (s.stage() < 3) {
    std::copy(values.begin(), values.end(), us.params.data() + info.offset);
    return;
  }
  const UnitInfo& u = s.info(info.unit);
  const std::size_t begin = static_cast<std::size_t>(s.rank()) * u.shard;
  const std::size_t lo = std::max(begin, info.offset);
  const std::size_t hi = std::min(begin + u.shard, info.offset + info.numel);
  for (std::size_t i = lo; i < hi; ++i) us.params[i - begin] = values[i - info.offset];
  if (us.gathered.valid()) {
    us.gather_work.wait();
    std::copy(values.begin(), values.end(), us.gathered.data() + info.offset);
  }
}

std::vector<float> Engine::gather_parameter(ParamId p) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "gather_parameter() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  UnitState& us = s.unit(info.unit);
  const float* full = nullptr;
  PoolLease temp;
  if (s.stage() < 3) {
    full = us.params.data();
  } else if (us.gathered.valid()) {
    us.gather_work.wait();
    full = us.gathered.data();
  } else {
    const UnitInfo& u = s.info(info.unit);
    temp = s.pool.acquire(u.padded, false);
    s.comm.all_gather(us.params.data(), temp.data(), u.shard, DType::f32);
    full = temp.data();
  }
  if (info.numel == 0) return {};
  return std::vector<float>(full + info.offset, full + info.offset + info.numel);
}

int Engine::stage() const { return s_->stage(); }
int Engine::rank() const { return s_->rank(); }
int Engine::world_size() const { return s_->world(); }
const EngineConfig& Engine::config() const { return s_->config; }
const FlatLayout& Engine::layout() const { return s_->layout; }
const MemoryLedger& Engine::ledger() const { return s_->ledger; }
std::int64_t Engine::micro_steps() const { return s_->micro_steps; }
std::int64_t Engine::optimizer_steps() const { return s_->optimizer_steps; }

float Engine::group_lr(GroupId g) const {
  ZS_CHECK(g >= 0 && static_cast<std::size_t>(g) < s_->groups.size(), "unknown parameter group {}", g);
  return s_->groups[static_cast<std::size_t>(g)].lr;
}

std::span<const float> Engine::optimizer_state(UnitId u, int index) const {
  UnitState& us = s_->unit(u);
  ZS_CHECK(index >= 0 && static_cast<std::size_t>(index) < us.states.size(),
           "optimizer state index {} out of range ({} states)", index, us.states.size());
  const auto& st = us.states[static_cast<std::size_t>(index)];
  if (s_->stage() != 0) return st.span();
  const UnitInfo& info = s_->info(u);
  return {st.data() + static_cast<std::size_t>(s_->rank()) * info.shard, info.shard};
}

std::span<const float> Engine::param_shard(UnitId u) const {
  UnitState& us = s_->unit(u);
  if (s_->stage() == 3) return us.params.span();
  const UnitInfo& info = s_->info(u);
  return {us.params.data() + static_cast<std::size_t>(s_->rank()) * info.shard, info.shard};
}

}  // namespace zeroshard
