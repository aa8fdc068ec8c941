#include "runtime/checkpoint/save_folder.h"

#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/checkpoint/background_writer.h"

namespace zeroshard {

namespace fs = std::filesystem;

namespace {

// Where the fallback of a re-save keeps the committed checkpoint between its two renames.
constexpr std::string_view kOld = ".old-";
// Where mark_pruned puts a checkpoint that keep_last removes in the background.
constexpr std::string_view kPruned = ".pruned-";

}  // namespace

std::string read_latest_tag(const std::string& save_dir) {
  const std::string path = save_dir + "/latest";
  std::string tag = read_text_file(path);
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  if (tag.empty()) {
    throw IoError(fmt::format("{}: empty; it must name the checkpoint folder in {} to load (save_checkpoint writes it)",
                              path, save_dir));
  }
  for (std::size_t i = 0; i < tag.size(); ++i) {
    const auto c = static_cast<unsigned char>(tag[i]);
    if (c < 0x20 || c == 0x7f) {
      // The tag is not quoted: a NUL in it would end the message there.
      throw IoError(fmt::format("{}: byte {} is {} (0x{:02x}); latest must hold one line, the name of a checkpoint "
                                "folder in {}: the file is damaged; pass the tag to load explicitly or rewrite latest",
                                path, i, c == 0 ? "a NUL byte" : "a control character", c, save_dir));
    }
  }
  return tag;
}

bool restore_interrupted_save(const std::string& save_dir, const std::string& tag) {
  const fs::path final_dir = fs::path(save_dir) / tag, old = fs::path(save_dir) / (std::string(kOld) + tag);
  if (fs::exists(final_dir) || !fs::exists(old)) return false;
  rename_durable(old.string(), final_dir.string(), save_dir);
  return true;
}

void sweep_leftovers(const std::string& save_dir) {
  for (const auto& entry : fs::directory_iterator(save_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".tmp-") || name.starts_with(kPruned)) {
      fs::remove_all(entry.path());
    } else if (name.starts_with(kOld) && !restore_interrupted_save(save_dir, name.substr(kOld.size()))) {
      fs::remove_all(entry.path());
    }
  }
}

std::string mark_pruned(const std::string& save_dir, const std::string& tag) {
  const fs::path to = fs::path(save_dir) / (std::string(kPruned) + tag);
  fs::remove_all(to);
  fs::rename(fs::path(save_dir) / tag, to);
  return to.string();
}

FolderRemover::~FolderRemover() { join(); }

void FolderRemover::start(std::vector<std::string> dirs) {
  join();
  if (dirs.empty()) return;
  thread_ = std::thread([dirs = std::move(dirs)] {
    run_below_training();
    for (const std::string& d : dirs) {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  });
}

void FolderRemover::join() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace zeroshard
