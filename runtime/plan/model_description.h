// Model descriptions: a model's units and parameter shapes without its
// values, what the memory estimator (runtime/plan/memory_estimate.h) and zs_plan
// lay out. Three sources:
//   - a JSON file
//       {"units": [{"name": "embed", "params": [{"name": "embed.weight",
//                   "shape": [50304, 768], "group": 0}]}, ...]}
//     ("group" optional, default 0; "shape" [] is a scalar);
//   - the header of a safetensors file ([Note: safetensors layout] in
//     runtime/checkpoint/safetensors_writer.h; only the header is read, dtypes are
//     ignored): tensors in data_offsets order, each in the unit of its
//     name's module prefix ([Note: safetensors units]);
//   - generated: P parameter elements in U units, one parameter per unit,
//     P / U elements each and one more in the first P mod U units.
//
// [Note: safetensors units]
// A tensor's unit is the prefix of its dot-separated name up to and
// including the first component that is all digits ("layers.3.attn.q.weight"
// -> "layers.3", "model.layers.10.mlp.w1" -> "model.layers.10"); a name
// without such a component belongs to the module that owns it, the name
// without its last component ("model.embed_tokens.weight" ->
// "model.embed_tokens", "lm_head.weight" -> "lm_head"); a name without a
// dot is a unit of its own. Units are listed in the order of their first
// tensor in the file, parameters in file order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// One parameter tensor of a described model. Plain value type.
struct ParamDescription {
  std::string name;
  std::vector<std::int64_t> shape;  ///< elements per dimension (>= 0; [] = scalar)
  GroupId group = 0;                ///< parameter group (>= 0)
};

/// One unit (flat buffer) of a described model. Plain value type.
struct UnitDescription {
  std::string name;
  std::vector<ParamDescription> params;  ///< in flat-buffer order
};

/// A model's units and parameter shapes. Plain value type; the readers
/// are thread safe (no shared state).
struct ModelDescription {
  std::vector<UnitDescription> units;

  /// The FlatLayout of these units finalized for `world_size` ranks (what
  /// an Engine declaring the same units and parameters lays out). Throws
  /// InvariantError as FlatLayout::add_param (negative dimension,
  /// duplicate name).
  FlatLayout layout(int world_size) const;
  /// Parameter elements of all units (Psi). Throws ConfigError when the
  /// count (or a parameter's shape product) exceeds 2^63 - 1.
  std::uint64_t parameter_count() const;
  /// One more than the largest parameter group id (1 for none).
  int group_count() const;

  /// Parses the JSON form; `source` names it in messages. Throws
  /// ConfigError (not JSON, a key given twice, missing or mistyped key,
  /// negative dimension or group, a shape or model of more than 2^63 - 1
  /// elements, a parameter name given twice).
  static ModelDescription from_json(std::string_view text, const std::string& source);
  /// Reads a safetensors file's header ([Note: safetensors units]). Throws
  /// IoError (unreadable, shorter than its header) and ConfigError (a
  /// header that is not safetensors JSON).
  static ModelDescription from_safetensors(const std::string& path);
  /// The units of a safetensors header's JSON text. Throws ConfigError as
  /// from_json (a tensor name given twice included).
  static ModelDescription from_safetensors_header(std::string_view json, const std::string& source);
  /// Reads `path`: a safetensors file when its name ends in
  /// ".safetensors", else the JSON form. Throws IoError and ConfigError.
  static ModelDescription from_file(const std::string& path);
  /// `params` elements in `units` units named "unit<i>", each with one
  /// parameter "unit<i>.weight" of shape [n]. Throws ConfigError when
  /// units < 1.
  static ModelDescription generated(std::uint64_t params, int units);
};

/// The unit of a safetensors tensor name ([Note: safetensors units]).
std::string safetensors_unit_of(std::string_view tensor_name);

}  // namespace zeroshard
