#!/usr/bin/env bash
# The install as a user meets it: installs the build into a temporary
# folder (meson install --destdir, nothing rebuilt), then builds the loop in
# tests/install/consumer/ outside the tree twice, with pkg-config (meson,
# dependency('zeroshard')) and with CMake (find_package(zeroshard CONFIG)),
# and runs each for 20 steps at ZeRO stage 3 under `mpirun -np 2`; the loop
# exits 1 unless its loss fell more than tenfold. Each binary must load the
# installed libzeroshard, not the build tree's.
# Usage: consumer.sh <meson> <build dir> <prefix> <libdir> <consumer dir> <mpirun>
set -euo pipefail
[ $# -eq 6 ] || { echo "usage: consumer.sh <meson> <build dir> <prefix> <libdir> <consumer dir> <mpirun>" >&2; exit 2; }
meson="$1" build="$2" prefix="$3" libdir="$4" consumer="$5" mpirun="$6"
command -v cmake >/dev/null || { echo "consumer.sh: cmake not found (scripts/bootstrap installs it)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$meson" install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage"
stage="$tmp/stage$prefix"
case "$libdir" in /*) stage_lib="$tmp/stage$libdir" ;; *) stage_lib="$stage/$libdir" ;; esac
# zeroshard.pc names the configured prefix; point a copy at the staged one,
# as `pkg-config --define-variable=prefix=...` would for this package alone.
mkdir "$tmp/pkgconfig"
sed "s|^prefix=.*|prefix=$stage|" "$stage_lib/pkgconfig/zeroshard.pc" >"$tmp/pkgconfig/zeroshard.pc"
export LD_LIBRARY_PATH="$stage_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# run <name> <binary>: 2 ranks, checked to use the staged library.
run() {
  local lib
  lib="$(ldd "$2" | awk '$1 == "libzeroshard.so" {print $3}')"
  if [ "$lib" != "$stage_lib/libzeroshard.so" ]; then
    echo "consumer.sh: $1 loads libzeroshard from '${lib:-nowhere}', not the install ($stage_lib)" >&2
    exit 1
  fi
  echo "== $1: mpirun -np 2 $2"
  "$mpirun" -np 2 -x LD_LIBRARY_PATH "$2"
}

echo "== pkg-config: $(PKG_CONFIG_PATH="$tmp/pkgconfig" pkg-config --cflags --libs zeroshard)"
PKG_CONFIG_PATH="$tmp/pkgconfig" "$meson" setup "$tmp/with-pkg-config" "$consumer" >"$tmp/pkg-config.log" 2>&1 ||
  { cat "$tmp/pkg-config.log"; exit 1; }
ninja -C "$tmp/with-pkg-config" >>"$tmp/pkg-config.log" 2>&1 || { cat "$tmp/pkg-config.log"; exit 1; }
run pkg-config "$tmp/with-pkg-config/linear_regression"

cmake -S "$consumer" -B "$tmp/with-cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$stage" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/with-cmake" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
run cmake "$tmp/with-cmake/linear_regression"
echo "consumer.sh: the loop built with pkg-config and with CMake against the install, and its loss fell on 2 ranks"
