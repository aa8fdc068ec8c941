// The ds_config key table: every key zeroshard reads, accepts without
// effect, or refuses with a reason. The parser (runtime/config/config.cpp) takes
// its known keys, JSON types and did-you-mean candidates from it, and
// docs/config.md is printed from it (config_reference_markdown(); the
// config_doc test fails when the two differ).
//
// [Note: config key status]
// implemented: zeroshard reads the key and does what DeepSpeed does with it
//   (or what the description says where zeroshard differs).
// no_effect: DeepSpeed would honour the key, but it only tunes something
//   zeroshard does not have (logging, profiling, activation checkpointing
//   done by the program's model, kernel choice) and so cannot change the
//   numbers a step computes, or DeepSpeed itself does not read it (the names
//   under which DeepSpeed prints its parsed settings: comms_config,
//   monitor_config). Accepted with one warning line naming all such keys of
//   a file; strict mode makes that warning an error. A key with a `neutral`
//   value is accepted only with that value (a section: only with the values
//   of the keys `neutral` names, e.g. {"enabled": false}); any other value
//   would change the math, or ask for what zeroshard cannot do (log to W&B),
//   and is refused with `refusal` as the reason.
// refused: DeepSpeed honours it, zeroshard does not implement it, and
//   ignoring it would silently change the training; `reason` says why and
//   what to use instead.
// legacy: an older spelling DeepSpeed still maps (`maps_to` says to what);
//   accepted and mapped, with one note line saying what it became.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zeroshard {

/// How zeroshard treats a key; see [Note: config key status].
enum class KeyStatus { implemented, no_effect, refused, legacy };

/// The JSON value a key takes.
enum class KeyType {
  section,   ///< an object whose keys are table rows themselves
  object,    ///< an object read as a whole (or not read: no_effect sections)
  boolean,   ///< true / false
  int32,     ///< a JSON integer in int32 range
  int64,     ///< a JSON integer in int64 range
  count,     ///< elements: a JSON integer or an integral number such as 5e8
  float32,   ///< a number representable as a 32-bit float
  float64,   ///< a finite number
  string,    ///< a JSON string
  betas,     ///< [beta1, beta2], two numbers
  numbers,   ///< a number, or a list of numbers (one per parameter group)
  any,       ///< any JSON value
};

/// One row of the table. Plain constant data; thread-safe to read.
struct ConfigKey {
  const char* path;         ///< dotted key path, e.g. "zero_optimization.stage"
  KeyType type;
  KeyStatus status;
  const char* default_text; ///< default as the document shows it ("" for none)
  const char* description;  ///< what it does in zeroshard (or why it is refused)
  bool auto_ok = false;     ///< may be "auto" (filled through ConfigOptions)
  const char* neutral = ""; ///< no_effect: the one value accepted, as JSON ("" = any)
  const char* only_for = "";///< optimizer/scheduler types the key applies to ("" = all)
  const char* maps_to = ""; ///< legacy: what it becomes
  /// no_effect with a neutral value: why another value is refused ("": it
  /// would change the math, and zeroshard does not implement it).
  const char* refusal = "";
};

/// Every row, sections before their keys, in document order.
const std::vector<ConfigKey>& config_keys();

/// The row for `path` (dotted), or nullptr.
const ConfigKey* find_config_key(std::string_view path);

/// The section names ("" is the top level) whose keys the parser checks.
std::vector<std::string> config_sections();

/// The known key of `section` closest to `key` by Levenshtein distance, if
/// the distance is small (at most 1 + len/4, and always a strict
/// improvement over retyping); "" otherwise. Keys longer than 64 bytes get
/// no suggestion (a cap on the work for a hostile file).
std::string closest_config_key(const std::string& section, const std::string& key);

/// docs/config.md: the document printed from the table (markdown).
std::string config_reference_markdown();

}  // namespace zeroshard
