#include "offload/swap_naming.h"

#include <cstdint>

#include <fmt/format.h>

#include "core/splitmix64.h"

namespace zeroshard {

namespace {

bool verbatim_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Two independent 64-bit FNV-1a style lanes, each finalised: 128 bits.
std::string hash128_hex(std::string_view s) {
  std::uint64_t a = 0xcbf29ce484222325ULL;
  std::uint64_t b = 0x84222325cbf29ce4ULL ^ s.size();
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b ^ c) * 0x00000100000001b3ULL + 0x9e3779b97f4a7c15ULL;
  }
  return fmt::format("{:016x}{:016x}", splitmix64_mix(a ^ (b >> 7)), splitmix64_mix(b + a));
}

}  // namespace

std::string swap_file_name(std::string_view key) {
  bool clean = !key.empty() && key.size() <= kMaxVerbatimKeyBytes;
  for (const char c : key) clean = clean && verbatim_char(c);
  if (clean) return std::string(key) + ".zs";
  // Readable prefix + '~' + 32 hex digits: at most 160 - 33 + 33 bytes.
  constexpr std::size_t kPrefix = kMaxVerbatimKeyBytes - 33;
  std::string name;
  for (std::size_t i = 0; i < key.size() && i < kPrefix; ++i) name += verbatim_char(key[i]) ? key[i] : '_';
  name += '~';
  name += hash128_hex(key);
  name += ".zs";
  return name;
}

}  // namespace zeroshard
