#include "examples/checkpoint/checkpoint_verify.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"

namespace zeroshard::examples {

namespace fs = std::filesystem;

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::is_regular_file(fs::path(path) / "manifest.json")) return path;
  const fs::path latest = fs::path(path) / "latest";
  if (!fs::is_regular_file(latest)) {
    throw IoError(fmt::format(
        "{}: not a checkpoint: expected a checkpoint directory with manifest.json or a save "
        "directory with a `latest` file",
        path));
  }
  std::string tag = read_text_file(latest.string());
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ' || tag.back() == '\r')) tag.pop_back();
  const std::string dir = (fs::path(path) / tag).string();
  if (tag.empty() || !fs::is_regular_file(fs::path(dir) / "manifest.json")) {
    throw IoError(fmt::format("{}: names checkpoint \"{}\", but {}/manifest.json does not exist",
                              latest.string(), tag, dir));
  }
  return dir;
}

namespace {

// Compares the open `file` with the manifest's size and (only when the
// size matches) CRC-32 in c; `what` names the file kind in the problem.
RankFileCheck compare_with_manifest(RankFileCheck c, const CheckpointReader& file, const char* what) {
  c.actual_bytes = file.size();
  if (c.actual_bytes != c.expected_bytes) {
    c.problem = fmt::format("{} bytes, the manifest expects {} (truncated or wrong file)", c.actual_bytes,
                            c.expected_bytes);
    return c;
  }
  c.actual_crc32 = file.crc32();
  if (c.actual_crc32 != c.expected_crc32) {
    c.problem = fmt::format("CRC-32 {:08x} does not match the manifest's {:08x} (corrupted {})", c.actual_crc32,
                            c.expected_crc32, what);
  }
  return c;
}

}  // namespace

RankFileCheck check_rank_file(const Manifest& m, const ManifestFile& f, const CheckpointReader& file) {
  RankFileCheck c;
  c.path = file.path();
  c.rank = f.rank;
  c.expected_bytes = f.bytes;
  c.expected_crc32 = f.crc32;
  if (f.bytes != m.file_bytes()) {
    c.actual_bytes = file.size();
    c.problem = fmt::format("the manifest lists {} bytes but its unit layout implies {} (inconsistent manifest)",
                            f.bytes, m.file_bytes());
    return c;
  }
  return compare_with_manifest(std::move(c), file, "shard");
}

RankFileCheck check_weights_file(const Manifest& m, const std::string& dir) {
  RankFileCheck c;
  c.path = dir + "/" + m.weights.name;
  c.rank = 0;
  c.expected_bytes = m.weights.bytes;
  c.expected_crc32 = m.weights.crc32;
  try {
    const CheckpointReader file(c.path);
    return compare_with_manifest(std::move(c), file, "weights file");
  } catch (const Error& e) {
    c.problem = e.what();
  }
  return c;
}

std::vector<RankFileCheck> check_rank_files(const Manifest& m, const std::string& dir) {
  std::vector<RankFileCheck> out;
  for (const ManifestFile& f : m.files) {
    const std::string path = dir + "/" + f.name;
    try {
      const CheckpointReader file(path);
      out.push_back(check_rank_file(m, f, file));
    } catch (const Error& e) {
      RankFileCheck c;
      c.path = path;
      c.rank = f.rank;
      c.expected_bytes = f.bytes;
      c.expected_crc32 = f.crc32;
      c.problem = e.what();
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace zeroshard::examples
