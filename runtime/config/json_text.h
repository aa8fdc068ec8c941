// Reading JSON text from files zeroshard does not trust (ds_config files,
// checkpoint manifests): the checks and error descriptions both readers
// share, so that each names the file and the byte offset the same way.
// See [Note: bounded config JSON] in runtime/config/config_diagnostics.h.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zeroshard {

/// Byte offset in `text` of the first '{' or '[' that opens a level deeper
/// than `max_depth` (the top-level value's bracket is level 1), or nullopt
/// when there is none. A linear scan without parsing, so that neither the
/// parser nor code walking the value recurses without bound: brackets
/// inside strings (escapes included) do not count; malformed text is left
/// to the parser. Pure function, thread-safe.
std::optional<std::size_t> json_too_deep_at(std::string_view text, int max_depth);

/// Why a JSON text did not parse.
struct JsonTextError {
  /// Byte offset (0-based) in the text: where nlohmann-json's lexer stopped
  /// for a syntax error; the first byte of the number for an overflow.
  std::size_t byte = 0;
  /// The library's description without its "[json.exception...] " prefix
  /// (what it expected and the token it found, the token cut by brief()),
  /// or "number <token> is beyond the range of a double" (token cut too).
  std::string reason;
  /// True when a number token is valid JSON but a double cannot hold it
  /// (nlohmann-json's out_of_range 406, e.g. 1e400).
  bool number_overflow = false;
};

/// Describes an exception that nlohmann::json::parse threw while parsing
/// `text`: a parse_error carries its byte; an out_of_range 406 (number
/// overflow) carries none, so `text` is scanned again with a SAX handler
/// that records where the lexer stopped. Any other json::exception is
/// described with byte 0. Never throws nlohmann-json exceptions;
/// thread-safe.
JsonTextError describe_json_error(std::string_view text, const nlohmann::json::exception& e);

}  // namespace zeroshard
