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
/// number of pipeline stages or at another tensor-parallel size than `s`.
void check_manifest_mesh(const MeshPosition& s, const std::string& dir, const Manifest& m);

}  // namespace zeroshard
