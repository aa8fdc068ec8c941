# Shared by scripts/test and scripts/demo: bootstrap, configure and build.
# Sourced, not run. Builds into $ZS_BUILD_DIR (default: build/ in the repo).

set -euo pipefail
ZS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZS_BUILD_DIR="${ZS_BUILD_DIR:-$ZS_ROOT/build}"

# OpenMPI refuses to run as root unless told, and 4 ranks on 2 cores need
# oversubscription; yielding when idle keeps oversubscribed ranks from
# spinning against each other.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1

# The CUDA toolkit installs nvcc outside PATH; with it on PATH the build
# compiles and links the CUDA backend (its tests skip without a GPU).
if [ -x /usr/local/cuda/bin/nvcc ]; then
  case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) export PATH="/usr/local/cuda/bin:$PATH" ;; esac
fi

zs_build() {
  "$ZS_ROOT/scripts/bootstrap"
  if [ ! -f "$ZS_BUILD_DIR/build.ninja" ]; then
    # -Werror for the project's own code (warning_level=2: -Wall -Wextra);
    # a user's own build (meson setup without it) only warns.
    meson setup "$ZS_BUILD_DIR" "$ZS_ROOT" --buildtype=release -Dwerror=true
  fi
  ninja -C "$ZS_BUILD_DIR"
}
