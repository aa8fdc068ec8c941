// Checkpoint folders on a mesh; see runtime/checkpoint/mesh_folders.h.
#include "runtime/checkpoint/mesh_folders.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/checkpoint/save_folder.h"

namespace zeroshard {

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

// The checkpoint root under `base` that holds `entry` ("/latest" or
// "/<tag>"): base itself (tp = 1) or its tp-00 folder; "" when neither.
std::string root_with(const std::string& base, const std::string& entry) {
  namespace fs = std::filesystem;
  if (fs::exists(base + entry)) return base;
  if (fs::exists(base + "/tp-00" + entry)) return base + "/tp-00";
  return "";
}

}  // namespace

void check_checkpoint_mesh(const MeshPosition& s, const std::string& save_dir, const std::string& tag) {
  namespace fs = std::filesystem;
  const std::string root = mesh_checkpoint_root(s, save_dir);
  const std::string entry = "/" + (tag.empty() ? std::string("latest") : tag);
  if (fs::exists(root + entry)) return;  // the manifest's own mesh is checked after it is read
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
  if (!fs::exists(other + entry)) return;  // the read names what is missing
  refuse_tp(s, other, read_tagged(other, tag));
}

void check_manifest_mesh(const MeshPosition& s, const std::string& dir, const Manifest& m) {
  if (m.mesh.pp != s.pp) refuse_pp(s, dir, m);
  if (m.mesh.tp != s.tp) refuse_tp(s, dir, m);
}

}  // namespace zeroshard
