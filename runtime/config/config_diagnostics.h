// What the ds_config reader collects while it reads a file: every problem
// (reported together in one ConfigError) and every warning (returned in
// EngineConfig::warnings). Also the bounded JSON reader of a file's text.
//
// [Note: bounded config JSON]
// A ds_config is a few levels deep (zero_optimization.offload_param.device),
// but the reader takes any file. Nesting deeper than kMaxConfigDepth levels
// is refused before nlohmann-json builds the value (a 100,000-deep array
// would overflow the stack wherever the value is later copied or dumped),
// naming the file and the byte offset of the bracket that goes too deep.
// Key paths are built only when a message names one, and a value or key
// quoted in a message is cut to a short prefix (brief()), so a huge value
// costs no more memory than the parse itself.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/quoted.h"

namespace zeroshard {

/// Levels of objects and arrays a ds_config may nest (the top object is 1).
inline constexpr int kMaxConfigDepth = 32;
/// A JSON value as written (dump()), cut by brief() (core/quoted.h, which
/// also cuts strings: keys, paths). Call only on values within the depth cap.
std::string brief(const nlohmann::json& v);

/// Problems and warnings of one file. Not thread-safe; one per parse.
class ConfigDiagnostics {
 public:
  explicit ConfigDiagnostics(std::string source) : source_(std::move(source)) {}

  /// Records a problem with the key at `path`: `"path" = <value> <what>`.
  void bad_value(const std::string& path, const nlohmann::json& value, const std::string& what);
  /// Records a problem worded in full (it names its key itself).
  void problem(std::string text) { problems_.push_back(std::move(text)); }
  /// Records a warning line (without the source prefix).
  void warn(std::string text) { warnings_.push_back(std::move(text)); }

  bool ok() const { return problems_.empty(); }
  const std::string& source() const { return source_; }
  /// Each warning prefixed with the source ("ds.json: ...").
  std::vector<std::string> warnings() const;
  /// Throws one ConfigError listing every problem (one per line after a
  /// header when there are several); does nothing when there is none.
  void throw_if_any() const;

 private:
  std::string source_;
  std::vector<std::string> problems_;
  std::vector<std::string> warnings_;
};

/// Throws ConfigError when objects and arrays in `j` nest deeper than
/// kMaxConfigDepth, naming the top-level key under which they do.
/// Iterative, so a deep value cannot overflow the call stack here.
void check_config_depth(const nlohmann::json& j, const std::string& source);

/// Parses a ds_config file's text. Throws ConfigError naming `source` for
/// invalid JSON (with the byte offset), nesting deeper than
/// kMaxConfigDepth (with the byte offset of the bracket), a key given twice
/// in one object (with its path, array elements as [i]), and a number a
/// double cannot hold such as 1e400 (with the key it belongs to and its
/// byte offset). The depth scan and the error descriptions are shared with
/// the checkpoint manifest reader (runtime/config/json_text.h).
nlohmann::json parse_config_text(const std::string& text, const std::string& source);

}  // namespace zeroshard
