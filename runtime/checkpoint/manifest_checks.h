// Checks of a checkpoint manifest beyond its JSON types: every reader
// (load_checkpoint, zs_ckpt_export, zs_ckpt_inspect) runs them through
// Manifest::read / Manifest::from_json, so a manifest that one accepts the
// others accept too. See docs/checkpoint-format.md, "Validation".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zeroshard {

struct Manifest;

/// Deepest nesting of objects and arrays a manifest may have (its own
/// structure needs 5; client_state gets the rest).
inline constexpr int kManifestMaxDepth = 64;

/// Scans JSON text (without parsing it) and throws IoError "<path>: JSON
/// nested deeper than <max_depth> levels at byte <offset>" at the first
/// '{' or '[' beyond max_depth, so that neither the parser nor the code
/// that walks the value recurses without bound. Strings (with escapes) are
/// skipped; malformed text is left to the parser.
void check_json_depth(std::string_view text, const std::string& path, int max_depth = kManifestMaxDepth);

/// Throws IoError "<path>: <field>: <what is wrong>" for the first field of
/// `m` that no saved checkpoint can have: world_size outside [1, 2^24],
/// stage outside 0-3, an unknown compute_dtype, tensors not "master"
/// followed by distinct optimizer states, a unit whose padded/shard do not
/// follow from numel and world_size, a parameter whose numel is not the
/// product of its shape, parameter offsets that do not tile their unit in
/// declaration order (checked without wrap-around: no overlap, no gap,
/// ending at the unit's numel), duplicate or empty unit or parameter names,
/// a group outside param_groups, files not named and ordered by rank or
/// with a size other than file_bytes(), negative optimizer_steps or
/// micro_steps (or fewer micro-steps than steps), a loss scale that is not
/// positive and finite, negative scaler counters, a rank file size that
/// overflows 64 bits.
void validate_manifest(const Manifest& m, const std::string& path);

/// a * b, or throws IoError "<path>: <field>: <a> x <b> overflows 64 bits".
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& path, const std::string& field);

}  // namespace zeroshard
