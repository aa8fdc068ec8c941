#include "runtime/sharding/flat_layout.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/quoted.h"

namespace zeroshard {

namespace {

// Element counts are kept below 2^63 so that any two add without wrapping
// and every count converts to the int64 of shapes and manifests.
constexpr std::size_t kMaxElements = (std::size_t{1} << 63) - 1;

}  // namespace

std::size_t UnitInfo::logical_in_shard(int r) const {
  const std::size_t begin = static_cast<std::size_t>(r) * shard;
  const std::size_t end = begin + shard;
  if (begin >= numel) return 0;
  return std::min(end, numel) - begin;
}

UnitId FlatLayout::add_unit(std::string name) {
  ZS_CHECK(world_size_ == 0, "add_unit(\"{}\") after finalize()", name);
  UnitInfo info;
  info.name = std::move(name);
  units_.push_back(std::move(info));
  return static_cast<UnitId>(units_.size() - 1);
}

ParamId FlatLayout::add_param(UnitId unit, std::string name, std::vector<std::int64_t> shape,
                              GroupId group) {
  ZS_CHECK(world_size_ == 0, "add_parameter(\"{}\") after finalize()", name);
  ZS_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < units_.size(),
           "parameter \"{}\": unknown unit id {}", name, unit);
  ZS_CHECK(find_param(name) < 0, "parameter name \"{}\" declared twice", name);
  std::size_t numel = 1;
  bool overflow = false;
  for (std::int64_t d : shape) {
    ZS_CHECK(d >= 0, "parameter \"{}\": negative dimension {}", name, d);
    std::size_t next = 0;
    overflow = overflow || __builtin_mul_overflow(numel, static_cast<std::size_t>(d), &next) ||
               next > kMaxElements;
    numel = next;
  }
  // A zero dimension makes the product 0 whatever overflowed before it.
  if (overflow && std::find(shape.begin(), shape.end(), 0) == shape.end()) {
    throw ConfigError(fmt::format("parameter \"{}\": shape [{}] has more than 2^63 - 1 elements", brief(name),
                                  fmt::join(shape, ", ")));
  }
  if (overflow) numel = 0;
  const ParamId id = static_cast<ParamId>(params_.size());
  by_name_.emplace(name, id);
  ParamInfo p{.name = std::move(name), .shape = std::move(shape), .numel = numel, .unit = unit,
              .group = group};
  params_.push_back(std::move(p));
  units_[static_cast<std::size_t>(unit)].params.push_back(id);
  return id;
}

void FlatLayout::finalize(int world_size) {
  ZS_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
  ZS_CHECK(world_size_ == 0, "finalize() called twice");
  world_size_ = world_size;
  const std::size_t quantum = static_cast<std::size_t>(world_size) * kShardAlignElements;
  for (auto& u : units_) {
    std::size_t off = 0;
    for (ParamId id : u.params) {
      params_[static_cast<std::size_t>(id)].offset = off;
      off += params_[static_cast<std::size_t>(id)].numel;  // each <= 2^63 - 1: the sum of two cannot wrap
      if (off > kMaxElements - quantum) {
        throw ConfigError(fmt::format("unit \"{}\": its parameters hold more than 2^63 - 1 elements padded for {} "
                                      "ranks", brief(u.name), world_size));
      }
    }
    u.numel = off;
    u.padded = (off + quantum - 1) / quantum * quantum;
    u.shard = u.padded / static_cast<std::size_t>(world_size);
  }
}

const UnitInfo& FlatLayout::unit(UnitId u) const {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units_.size(), "unknown unit id {}", u);
  return units_[static_cast<std::size_t>(u)];
}

const ParamInfo& FlatLayout::param(ParamId p) const {
  ZS_CHECK(p >= 0 && static_cast<std::size_t>(p) < params_.size(), "unknown parameter id {}", p);
  return params_[static_cast<std::size_t>(p)];
}

ParamId FlatLayout::find_param(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

std::size_t FlatLayout::total_numel() const {
  std::size_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

std::size_t FlatLayout::total_padded() const {
  std::size_t n = 0;
  for (const auto& u : units_) n += u.padded;
  return n;
}

std::vector<ShardSegment> FlatLayout::segments(UnitId u, int r) const {
  const UnitInfo& info = unit(u);
  ZS_CHECK(r >= 0 && r < world_size_, "rank {} outside world size {}", r, world_size_);
  const std::size_t begin = static_cast<std::size_t>(r) * info.shard;
  const std::size_t end = begin + info.shard;
  std::vector<ShardSegment> out;
  for (ParamId id : info.params) {
    const ParamInfo& p = params_[static_cast<std::size_t>(id)];
    const std::size_t lo = std::max(begin, p.offset);
    const std::size_t hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    out.push_back(ShardSegment{.shard_offset = lo - begin, .flat_offset = lo, .length = hi - lo,
                               .param = id, .group = p.group});
  }
  return out;
}

}  // namespace zeroshard
