// Checkpoint folders on a mesh; see runtime/checkpoint/mesh_folders.h.
#include "runtime/checkpoint/mesh_folders.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/checkpoint/save_folder.h"

namespace zeroshard {

bool holds_mesh_folders(const std::string& save_dir) {
  namespace fs = std::filesystem;
  return fs::is_directory(save_dir + "/tp-00") || fs::is_directory(save_dir + "/pp-00");
}

std::string mesh_checkpoint_root(const MeshPosition& s, const std::string& save_dir) {
  const std::string pipeline_stage_dir = s.pp > 1 ? fmt::format("{}/pp-{:02d}", save_dir, s.pp_rank) : save_dir;
  return s.tp > 1 ? fmt::format("{}/tp-{:02d}", pipeline_stage_dir, s.tp_rank) : pipeline_stage_dir;
}

namespace {

[[noreturn]] void refuse_tp(const MeshPosition& s, const std::string& dir, const Manifest& m) {
  throw ConfigError(fmt::format(
      "{}: checkpoint saved at tensor-parallel size {} (mesh dp {} x tp {}), this engine runs at tensor-parallel "
      "size {} (mesh dp {} x tp {}); a checkpoint loads at any data-parallel size but only at the tensor-parallel "
      "size it was saved at (re-slicing is not supported)",
      dir, m.mesh.tp, m.mesh.dp, m.mesh.tp, s.tp, s.dp, s.tp));
}

[[noreturn]] void refuse_pp(const MeshPosition& s, const std::string& dir, const Manifest& m) {
  throw ConfigError(fmt::format(
      "{}: checkpoint saved at pipeline-parallel size {} (mesh dp {} x tp {} x pp {}), this engine runs at "
      "pipeline-parallel size {} (mesh dp {} x tp {} x pp {}); a checkpoint loads at any data-parallel size but "
      "only at the pipeline-parallel size it was saved at (re-partitioning the layers is not supported)",
      dir, m.mesh.pp, m.mesh.dp, m.mesh.tp, m.mesh.pp, s.pp, s.dp, s.tp, s.pp));
}

// <root>/<tag or latest>'s manifest.
Manifest read_tagged(const std::string& root, const std::string& tag_in) {
  return Manifest::read(root + "/" + (tag_in.empty() ? read_latest_tag(root) : tag_in));
}

// Whether `dir` holds base/entry as a checkpoint folder's own: not the
// mesh-level `latest` of a save directory with tp-NN or pp-SS folders.
bool folder_holds(const std::string& base, const std::string& entry) {
  namespace fs = std::filesystem;
  if (!fs::exists(base + entry)) return false;
  return entry != "/latest" || !holds_mesh_folders(base);
}

// The checkpoint root under `base` that holds `entry` ("/latest" or
// "/<tag>"): base itself (tp = 1) or its tp-00 folder; "" when neither.
std::string root_with(const std::string& base, const std::string& entry) {
  namespace fs = std::filesystem;
  if (folder_holds(base, entry)) return base;
  if (fs::exists(base + "/tp-00" + entry)) return base + "/tp-00";
  return "";
}

}  // namespace

void check_checkpoint_mesh(const MeshPosition& s, const std::string& save_dir, const std::string& tag) {
  namespace fs = std::filesystem;
  const std::string root = mesh_checkpoint_root(s, save_dir);
  const std::string entry = "/" + (tag.empty() ? std::string("latest") : tag);
  if (folder_holds(root, entry)) return;  // the manifest's own mesh is checked after it is read
  // Saved with another number of pipeline stages: stage 0's folder (pp > 1)
  // or the folder itself (pp = 1) tells it.
  const std::string first_pipeline_stage = root_with(save_dir + "/pp-00", entry);
  const std::string no_pipeline_stages = root_with(save_dir, entry);
  if (s.pp > 1 && first_pipeline_stage.empty() && !no_pipeline_stages.empty()) {
    refuse_pp(s, no_pipeline_stages, read_tagged(no_pipeline_stages, tag));
  }
  if (!first_pipeline_stage.empty() && (s.pp == 1 || no_pipeline_stages.empty())) {
    const Manifest m = read_tagged(first_pipeline_stage, tag);
    if (m.mesh.pp != s.pp) refuse_pp(s, first_pipeline_stage, m);
  }
  const std::string pipeline_stage_dir = s.pp > 1 ? fmt::format("{}/pp-{:02d}", save_dir, s.pp_rank) : save_dir;
  // Saved at a smaller tp > 1: tp rank 0's folder tells the size.
  const std::string tp0 = pipeline_stage_dir + "/tp-00";
  if (s.tp > 1 && fs::exists(tp0 + entry)) {
    const Manifest m = read_tagged(tp0, tag);
    if (m.mesh.tp != s.tp) refuse_tp(s, tp0, m);
    return;
  }
  // Saved in the other layout: at tp = 1 (no folders) or at tp > 1 (tp-NN folders).
  const std::string other = s.tp > 1 ? pipeline_stage_dir : tp0;
  if (!folder_holds(other, entry)) return;  // the read names what is missing
  refuse_tp(s, other, read_tagged(other, tag));
}

std::string mesh_coordinates(int dp, int tp_rank, int tp, int pp_rank, int pp) {
  return fmt::format("(data-parallel size {}, tp rank {} of {}, pipeline stage {} of {})", dp, tp_rank, tp, pp_rank,
                     pp);
}

void check_manifest_mesh(const MeshPosition& s, const std::string& dir, const Manifest& m) {
  if (m.mesh.pp != s.pp) refuse_pp(s, dir, m);
  if (m.mesh.tp != s.tp) refuse_tp(s, dir, m);
  const bool tp_differs = m.mesh.tp_rank != s.tp_rank;
  if (!tp_differs && m.mesh.pp_rank == s.pp_rank) return;
  throw ConfigError(fmt::format(
      "{}: the checkpoint holds mesh coordinates {}, this folder's rank loads {}: {} is {}, expected {}; the "
      "folder holds another tensor-parallel rank's or pipeline stage's shards (folders swapped or copied into the "
      "wrong place)",
      dir, mesh_coordinates(m.mesh.dp, m.mesh.tp_rank, m.mesh.tp, m.mesh.pp_rank, m.mesh.pp),
      mesh_coordinates(s.dp, s.tp_rank, s.tp, s.pp_rank, s.pp), tp_differs ? "mesh.tp_rank" : "mesh.pp_rank",
      tp_differs ? m.mesh.tp_rank : m.mesh.pp_rank, tp_differs ? s.tp_rank : s.pp_rank));
}

}  // namespace zeroshard
