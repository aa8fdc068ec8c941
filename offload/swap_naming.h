// File names for swap files, derived from caller-given keys such as
// "layers.3.attn/shard0/exp_avg".
//
// A key made only of [A-Za-z0-9._-] and at most kMaxVerbatimKeyBytes long
// is used as is; any other key (too long, other characters, empty) keeps a
// readable prefix with the other characters replaced by '_', followed by '~'
// and a 128-bit hash of the whole key in hex. '~' never occurs in verbatim
// names, so the two forms cannot collide, and distinct keys get distinct
// names (up to the hash). Every name ends in ".zs" and, with the temporary
// suffix SwapDirectory adds while writing (".<generation>.tmp"), stays well
// under the 255-byte limit on one path component.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zeroshard {

/// Longest key used verbatim, bytes.
inline constexpr std::size_t kMaxVerbatimKeyBytes = 160;

/// Upper bound on the length of swap_file_name(key), bytes, for any key.
inline constexpr std::size_t kMaxSwapFileNameBytes = kMaxVerbatimKeyBytes + 3;

/// The file name (one path component, no '/') for `key`; see the file
/// comment. Pure function, thread safe.
std::string swap_file_name(std::string_view key);

}  // namespace zeroshard
