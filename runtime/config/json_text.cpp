#include "runtime/config/json_text.h"

#include <fmt/format.h>

#include "core/quoted.h"

namespace zeroshard {

using nlohmann::json;

std::optional<std::size_t> json_too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return std::nullopt;
}

namespace {

// Accepts every value and records where the parser gave up: used only to
// locate an error the DOM parser reported without a position.
struct ErrorLocator final : json::json_sax_t {
  std::size_t position = 0;
  std::string token;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t pos, const std::string& last_token, const json::exception&) override {
    position = pos;
    token = last_token;
    return false;
  }
};

// "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
std::string without_prefix(const std::string& what) {
  const auto end = what.find("] ");
  if (what.rfind("[json.exception", 0) == 0 && end != std::string::npos) return what.substr(end + 2);
  return what;
}

}  // namespace

JsonTextError describe_json_error(std::string_view text, const json::exception& e) {
  if (const auto* pe = dynamic_cast<const json::parse_error*>(&e)) {
    // nlohmann-json quotes the whole token it stopped in ("...; last read:
    // '<token>'; expected ..."), which may be megabytes (an unterminated
    // string): cut the token alone, so the message still says what the
    // parser found and what it expected.
    std::string reason = without_prefix(pe->what());
    ErrorLocator locator;
    json::sax_parse(text, &locator);
    const std::string quoted = "last read: '" + locator.token + "'";
    const std::size_t at = reason.find(quoted);
    if (locator.token.size() > kMaxQuoted && at != std::string::npos) {
      reason.replace(at, quoted.size(), "last read: '" + brief(locator.token) + "'");
    }
    return JsonTextError{.byte = pe->byte, .reason = std::move(reason), .number_overflow = false};
  }
  if (dynamic_cast<const json::out_of_range*>(&e) != nullptr && e.id == 406) {
    ErrorLocator locator;
    json::sax_parse(text, &locator);
    // position is one past the number's last byte.
    const std::size_t start = locator.position >= locator.token.size() ? locator.position - locator.token.size() : 0;
    return JsonTextError{.byte = start,
                         .reason = fmt::format("number {} is beyond the range of a double", brief(locator.token)),
                         .number_overflow = true};
  }
  return JsonTextError{.byte = 0, .reason = without_prefix(e.what()), .number_overflow = false};
}

}  // namespace zeroshard
