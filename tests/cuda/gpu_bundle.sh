#!/usr/bin/env bash
# scripts/gpu-bundle on this machine: the bundle holds the programs, the
# marker, env.sh and OpenMPI's tree; under env.sh with the system's OpenMPI
# hidden (a mount namespace, where unshare works) fashion_mnist initialises
# MPI from the bundle and trains a few steps on the CPU; the CUDA test
# program that needs no GPU runs from it; a non-empty folder that is not a
# bundle, and --data without the data set, are refused and left alone.
# Usage: gpu_bundle.sh SOURCE_ROOT BUILD_ROOT
set -u
src="$1"; build="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; [ -f "$work/out" ] && { echo "--- output:"; tail -n 30 "$work/out"; }; exit 1; }
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $data: skipped"; exit 77; }

out="$work/bundle"
timeout 300 "$src/scripts/gpu-bundle" "$out" --build "$build" --data "$data" >"$work/out" 2>&1 || fail "gpu-bundle"
for f in .zeroshard-gpu-bundle env.sh build/libzeroshard.so build/examples/fashion_mnist \
         build/tests/cuda/test_cuda_errors build/bench/cuda_adam/cuda_adam lib/libmpi.so.40 lib/libfmt.so.9 \
         data/fashion-mnist/t10k-labels-idx1-ubyte.gz; do
  [ -e "$out/$f" ] || fail "no $f in the bundle"
done
ls "$out"/openmpi/usr/lib/*/openmpi/lib/openmpi3/mca_pml_ob1.so >/dev/null 2>&1 || fail "no OpenMPI plugins in the bundle"
# Packed again over itself: allowed (the marker), and nothing else is left.
touch "$out/stale"
timeout 300 "$src/scripts/gpu-bundle" "$out" --build "$build" >"$work/out" 2>&1 || fail "gpu-bundle over a bundle"
[ ! -e "$out/stale" ] || fail "the old bundle's files survived"
[ ! -e "$out/data" ] || fail "the data set survived a bundle without --data"

# Refusals, which must delete nothing.
mkdir -p "$work/keep" && touch "$work/keep/mine"
"$src/scripts/gpu-bundle" "$work/keep" --build "$build" >"$work/out" 2>&1 && fail "a non-empty folder was accepted"
grep -q "is not an earlier bundle" "$work/out" || fail "no reason given for refusing a non-empty folder"
[ -f "$work/keep/mine" ] || fail "a refused folder lost its file"
"$src/scripts/gpu-bundle" "$work/b2" --build "$build" --data "$work/keep" >"$work/out" 2>&1 && fail "--data without the data set was accepted"
grep -q "has no train-images-idx3-ubyte.gz" "$work/out" || fail "no reason given for a wrong --data"

# The packed programs under env.sh. With unshare, OpenMPI's system tree is
# hidden, so MPI_Init must find its plugins through OPAL_PREFIX.
timeout 300 "$src/scripts/gpu-bundle" "$out" --build "$build" --data "$data" >"$work/out" 2>&1 || fail "gpu-bundle"
cat >"$work/run.sh" <<EOS
set -e
if [ "\${1:-}" = hide ]; then
  for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/share/openmpi /etc/openmpi; do
    [ -d "\$d" ] && mount -t tmpfs none "\$d"
  done
fi
source "$out/env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$out/build/tests/cuda/test_cuda_errors"
"$out/build/examples/fashion_mnist" --device cpu --epochs 1 --max-steps 5 --hidden 64 --data-dir "\$ZS_FASHION_MNIST_DIR"
EOS
if unshare -m true 2>/dev/null; then
  timeout 240 unshare -m bash "$work/run.sh" hide >"$work/out" 2>&1 || fail "the bundle's programs (system OpenMPI hidden)"
else
  timeout 240 bash "$work/run.sh" >"$work/out" 2>&1 || fail "the bundle's programs"
fi
grep -q "final test accuracy" "$work/out" || fail "fashion_mnist did not finish"
echo "gpu-bundle: ok"
