// Where each rank of a dp x tp x pp mesh keeps its checkpoints, and the
// checks that a checkpoint was saved on a mesh of the same tensor- and
// pipeline-parallel sizes (docs/checkpoint-format.md, "Checkpoints on a
// mesh"). Local: no collectives; the engine agrees on the outcome.
#pragma once

#include <string>

#include "runtime/checkpoint/checkpoint_manifest.h"

namespace zeroshard {

/// A rank's place on the mesh, as the checkpoint layout needs it: the
/// data-parallel size, and the tensor- and pipeline-parallel sizes and
/// ranks (1 and 0 without a mesh). Plain value type.
struct MeshPosition {
  int dp = 1;
  int tp = 1;
  int tp_rank = 0;
  int pp = 1;
  int pp_rank = 0;
};

/// Whether save_dir holds the folders of a mesh checkpoint (tp-00/ or
/// pp-00/), whose `latest` is then the mesh-level one ([Note: mesh
/// checkpoint commit] in runtime/engine/engine_save.cpp). Reads the file
/// system only.
bool holds_mesh_folders(const std::string& save_dir);
/// "(data-parallel size 2, tp rank 1 of 2, pipeline stage 0 of 1)": a
/// rank's or a manifest's coordinates on the mesh, for messages.
std::string mesh_coordinates(int dp, int tp_rank, int tp, int pp_rank, int pp);
/// Where this rank's data-parallel group keeps its checkpoints under
/// save_dir: save_dir itself at tp = pp = 1, save_dir/tp-NN (NN = tp rank)
/// with tp > 1, inside save_dir/pp-SS (SS = pipeline stage) with pp > 1.
std::string mesh_checkpoint_root(const MeshPosition& s, const std::string& save_dir);
/// Before reading a manifest: when this rank's folder has no checkpoint but
/// save_dir holds one in another layout (pp-SS folders at pp = 1, none or
/// fewer than this stage needs at pp > 1; tp-NN folders at tp = 1, none at
/// tp > 1, or fewer than this tp rank needs), throws the ConfigError of
/// check_manifest_mesh for it, naming the saved and the engine's pipeline
/// or tensor-parallel sizes. Reads files only.
void check_checkpoint_mesh(const MeshPosition& s, const std::string& save_dir, const std::string& tag);
/// Throws ConfigError naming both pipeline sizes, else both tensor-parallel
/// sizes (and meshes) when manifest m (of `dir`) was saved with another
/// number of pipeline stages or at another tensor-parallel size than `s`;
/// else, when it holds another tp rank's or pipeline stage's shards, a
/// ConfigError "<dir>: the checkpoint holds mesh coordinates (...), this
/// folder's rank loads (...): mesh.tp_rank is 1, expected 0; ...". The
/// data-parallel size may differ (a load re-shards).
void check_manifest_mesh(const MeshPosition& s, const std::string& dir, const Manifest& m);

}  // namespace zeroshard
