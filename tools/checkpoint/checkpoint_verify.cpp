#include "tools/checkpoint/checkpoint_verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <system_error>

#include "core/error.h"

namespace zeroshard::tools {

namespace fs = std::filesystem;

namespace {

// Entries of dir named <prefix>NN (two or more digits), directories or
// not, in name order.
std::vector<fs::path> numbered_entries(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() < prefix.size() + 2 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
    out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> strings_of(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  for (const fs::path& p : paths) out.push_back(p.string());
  return out;
}

}  // namespace

std::vector<std::string> mesh_top_dirs(const std::string& path) {
  const auto pps = numbered_entries(path, "pp-");
  return strings_of(pps.empty() ? numbered_entries(path, "tp-") : pps);
}

std::vector<std::string> mesh_save_dirs(const std::string& path) {
  if (numbered_entries(path, "pp-").empty()) return mesh_top_dirs(path);
  std::vector<std::string> out;
  for (const std::string& top : mesh_top_dirs(path)) {
    const auto tps = numbered_entries(top, "tp-");
    if (tps.empty()) {
      out.push_back(top);
    } else {
      for (const fs::path& t : tps) out.push_back(t.string());
    }
  }
  return out;
}

std::vector<std::string> mesh_checkpoint_problems(
    const std::vector<std::pair<std::string, Manifest>>& checkpoints) {
  std::vector<std::string> problems;
  if (checkpoints.empty()) return problems;
  const ManifestMesh& first = checkpoints.front().second.mesh;
  std::map<std::pair<int, int>, std::string> seen;  // (stage, tp rank) -> its folder
  std::string steps;
  bool same_step = true;
  for (const auto& [dir, m] : checkpoints) {
    steps += fmt::format("{}{}: step {}", steps.empty() ? "" : ", ", dir, m.optimizer_steps);
    same_step = same_step && m.optimizer_steps == checkpoints.front().second.optimizer_steps;
    if (m.mesh.pp != first.pp || m.mesh.tp != first.tp) {
      problems.push_back(fmt::format("{} was saved on a mesh of pp {} x tp {}, {} on pp {} x tp {}", dir, m.mesh.pp,
                                     m.mesh.tp, checkpoints.front().first, first.pp, first.tp));
      continue;
    }
    std::string& slot = seen[{m.mesh.pp_rank, m.mesh.tp_rank}];
    if (!slot.empty()) {
      problems.push_back(fmt::format("{} and {} both hold pipeline stage {}, tp rank {}", slot, dir, m.mesh.pp_rank,
                                     m.mesh.tp_rank));
    }
    slot = dir;
  }
  // The manifests allow meshes of up to 2^24 x 2^24: name each missing
  // checkpoint only when there are few.
  const std::int64_t expected = static_cast<std::int64_t>(first.pp) * first.tp;
  if (expected - static_cast<std::int64_t>(seen.size()) > 64) {
    problems.push_back(fmt::format("the mesh is pp {} x tp {} ({} checkpoints), {} of them are readable here",
                                   first.pp, first.tp, expected, seen.size()));
  } else {
    for (int s = 0; s < first.pp; ++s) {
      for (int t = 0; t < first.tp; ++t) {
        if (seen.count({s, t}) == 0) {
          problems.push_back(fmt::format("no readable checkpoint of pipeline stage {}, tp rank {} (the mesh is pp {} "
                                         "x tp {})",
                                         s, t, first.pp, first.tp));
        }
      }
    }
  }
  if (!same_step) {
    problems.push_back(fmt::format("the checkpoints hold different optimizer steps ({}); a load needs one step in "
                                   "every folder",
                                   steps));
  }
  return problems;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::is_regular_file(fs::path(path) / "manifest.json")) return path;
  const fs::path latest = fs::path(path) / "latest";
  const std::vector<std::string> mesh = mesh_top_dirs(path);
  if (!fs::is_regular_file(latest) || !mesh.empty()) {  // a mesh's `latest` is the mesh-level commit
    if (!mesh.empty()) {
      throw IoError(fmt::format(
          "{}: the save directory of a run on a mesh, one save directory per pipeline stage or "
          "tensor-parallel rank ({} of them: {}); give one of those directories",
          path, mesh.size(), fmt::join(mesh, ", ")));
    }
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
RankFileCheck compare_with_manifest(RankFileCheck c, const FileReader& file, const char* what) {
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

RankFileCheck check_rank_file(const Manifest& m, const ManifestFile& f, const FileReader& file) {
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
    const FileReader file(c.path);
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
      const FileReader file(path);
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

}  // namespace zeroshard::tools
