// The checkpoints every folder of a mesh holds; see runtime/checkpoint/mesh_commit.h.
#include "runtime/checkpoint/mesh_commit.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <system_error>
#include <tuple>

#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint_manifest.h"

namespace zeroshard {

namespace fs = std::filesystem;

namespace {

bool file_has_size(const fs::path& p, std::uint64_t bytes) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(p, ec);
  return !ec && size == bytes;
}

// A checkpoint directory is complete when its manifest reads and every file
// it lists is there with its size.
bool complete(const fs::path& dir, const Manifest& m) {
  for (const ManifestFile& f : m.files) {
    if (!file_has_size(dir / f.name, f.bytes)) return false;
  }
  return !m.weights.recorded || file_has_size(dir / m.weights.name, m.weights.bytes);
}

std::uint32_t tag_crc(const std::string& tag) { return crc32_update(0, tag.data(), tag.size()); }

// Lexicographic order of (step, tag CRC): the order common_checkpoints walks.
using Key = std::tuple<double, double>;
Key key_of(const FolderCheckpoint& c) { return {static_cast<double>(c.step), static_cast<double>(tag_crc(c.tag))}; }

}  // namespace

std::vector<FolderCheckpoint> list_folder_checkpoints(const std::string& folder) {
  std::vector<FolderCheckpoint> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || !entry.is_directory(ec)) continue;
    try {
      const Manifest m = Manifest::read(entry.path().string());
      if (complete(entry.path(), m)) out.push_back(FolderCheckpoint{.step = m.optimizer_steps, .tag = name});
    } catch (const Error&) {
      // Not a complete checkpoint (a directory of something else, a torn copy): left out.
    }
  }
  std::sort(out.begin(), out.end(), [](const FolderCheckpoint& a, const FolderCheckpoint& b) {
    return std::tie(a.step, a.tag) > std::tie(b.step, b.tag);
  });
  return out;
}

std::vector<FolderCheckpoint> common_checkpoints(const std::vector<FolderCheckpoint>& mine, std::size_t count,
                                                 const MinOverRanks& min) {
  std::vector<FolderCheckpoint> common;
  // Candidates are the keys strictly below `bound`; each round agrees on the
  // smallest of the ranks' largest candidates: every rank holds nothing
  // above it, so it is common exactly when every rank holds it.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Key bound{kInf, kInf};
  while (common.size() < count) {
    double best_step = -1;
    for (const FolderCheckpoint& c : mine) {
      if (key_of(c) < bound) best_step = std::max(best_step, static_cast<double>(c.step));
    }
    const double step = min(best_step);
    if (step < 0) break;  // some rank has nothing left
    // Within that step, the smallest of the ranks' largest tag CRCs (-1: a rank
    // lacks the step, then no key of it is common).
    double best_crc = -1;
    for (const FolderCheckpoint& c : mine) {
      const Key k = key_of(c);
      if (std::get<0>(k) == step && k < bound) best_crc = std::max(best_crc, std::get<1>(k));
    }
    const double crc = min(best_crc);
    if (crc < 0) {
      bound = Key{step, -kInf};
      continue;
    }
    const FolderCheckpoint* held = nullptr;
    for (const FolderCheckpoint& c : mine) {
      if (key_of(c) == Key{step, crc}) held = &c;
    }
    if (min(held != nullptr ? 1.0 : 0.0) == 1.0) common.push_back(*held);
    bound = Key{step, crc};
  }
  return common;
}

}  // namespace zeroshard
