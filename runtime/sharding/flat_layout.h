// Flat buffers and shards: how a unit's parameters are laid end to end and
// split into one contiguous shard per rank.
//
// [Note: flat buffer layout]
// A unit's parameters are laid end to end in declaration order, with no gap
// between them; the buffer is padded with zeros at the end to a multiple of
// world_size x kShardAlignElements elements, so every shard has the same
// size (padded / world_size, a multiple of 16 elements = 64 bytes for fp32)
// and starts cache-line aligned. Rank r owns elements [r*S, (r+1)*S). Ranks
// whose shard lies wholly in the padding still own (and update) it, and join
// every collective. Padding elements always hold zero parameters, zero
// gradients and zero optimizer state; the optimizer skips them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace zeroshard {

using ParamId = int;
using UnitId = int;
using GroupId = int;

/// Elements every shard size is a multiple of.
inline constexpr std::size_t kShardAlignElements = 16;

/// One parameter tensor.
struct ParamInfo {
  std::string name;
  std::vector<std::int64_t> shape;  ///< may contain zeros: numel 0 is legal
  std::size_t numel = 0;            ///< product of shape (1 for shape [])
  UnitId unit = -1;                 ///< unit whose flat buffer stores it
  GroupId group = 0;                ///< parameter group (lr, weight_decay)
  std::size_t offset = 0;           ///< first element in the unit's flat buffer
};

/// A contiguous run of one parameter's elements inside a rank's shard.
struct ShardSegment {
  std::size_t shard_offset = 0;  ///< element offset inside the shard
  std::size_t flat_offset = 0;   ///< element offset inside the unit's flat buffer
  std::size_t length = 0;        ///< elements
  ParamId param = -1;
  GroupId group = 0;
};

/// One unit's flat buffer.
struct UnitInfo {
  std::string name;
  std::vector<ParamId> params;  ///< in flat-buffer order
  std::size_t numel = 0;        ///< sum of its parameters' elements
  std::size_t padded = 0;       ///< numel rounded up to world_size * kShardAlignElements
  std::size_t shard = 0;        ///< padded / world_size: elements per rank

  /// Elements of rank r's shard that belong to parameters (not padding).
  std::size_t logical_in_shard(int r) const;
};

/// Parameters grouped into units, laid out for a world size.
/// Thread safety: immutable after finalize().
class FlatLayout {
 public:
  UnitId add_unit(std::string name);
  /// Adds a parameter to a unit. Throws InvariantError on a negative
  /// dimension or an unknown unit, and on a duplicate name; ConfigError
  /// naming the parameter and its shape when the element count (the
  /// product of the shape) does not fit 63 bits. Amortised O(1): names are
  /// looked up in a hash map.
  ParamId add_param(UnitId unit, std::string name, std::vector<std::int64_t> shape, GroupId group);
  /// Computes offsets, padding and shard sizes for world_size ranks.
  /// Throws ConfigError naming the unit when its padded element count does
  /// not fit 63 bits.
  void finalize(int world_size);

  int world_size() const { return world_size_; }
  const std::vector<UnitInfo>& units() const { return units_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const UnitInfo& unit(UnitId u) const;
  const ParamInfo& param(ParamId p) const;
  /// Parameter by name; -1 if absent. O(1) expected.
  ParamId find_param(const std::string& name) const;
  /// Total parameter elements (Psi) and total padded elements.
  std::size_t total_numel() const;
  std::size_t total_padded() const;
  /// Segments of rank r's shard of unit u, in shard order (padding omitted).
  std::vector<ShardSegment> segments(UnitId u, int r) const;

 private:
  int world_size_ = 0;
  std::vector<UnitInfo> units_;
  std::vector<ParamInfo> params_;
  std::unordered_map<std::string, ParamId> by_name_;  ///< params_ index by name
};

}  // namespace zeroshard
