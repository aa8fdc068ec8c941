#!/usr/bin/env bash
# The cluster planner's ranking on this machine (issue 37, item 5): describes
# this machine's ranks as a cluster (bench_mesh_ranking --describe at 1 and at
# RANKS ranks: the GPT's matrix-product rate, the all-gather's latency and
# bandwidth), runs the GPT example (examples/gpt, its default shape, a global
# batch of 32 sequences of 64 bytes) on every dp x tp x pp factorization of
# RANKS ranks at ZeRO stages 0-3 for STEPS steps, ROUNDS rounds interleaved,
# and on one rank (the compute efficiency), then has bench_mesh_ranking
# --rank predict each run's tokens a second and compare the planner's top
# choice with the fastest measured. Usage (from the repository root, after a
# build):
#   bench/plan/mesh_ranking.sh [BUILD_DIR=build] [RANKS=4] [STEPS=30] [ROUNDS=2]
set -euo pipefail
build="${1:-build}" ranks="${2:-4}" steps="${3:-30}" rounds="${4:-2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
bench="$build/bench/plan/bench_mesh_ranking" gpt="$build/examples/gpt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
batch=32
mpirun -np 1 "$bench" --describe "$work/one.json" --global-batch "$batch"
mpirun -np "$ranks" "$bench" --describe "$work/cluster.json" --global-batch "$batch"
common=(--steps "$steps" --eval-every "$steps" --eval-batches 1 --seq 64)
refs=() runs=()
for round in $(seq "$rounds"); do
  mpirun -np 1 "$gpt" "${common[@]}" --micro-batch "$batch" --report "$work/ref-$round.json" > /dev/null
  refs+=("$work/ref-$round.json")
  for tp in $(seq "$ranks"); do
    for pp in $(seq "$ranks"); do
      (( ranks % (tp * pp) == 0 )) || continue
      dp=$(( ranks / (tp * pp) )) m=$(( pp > 1 ? 2 * pp : 1 ))
      (( batch % (dp * m) == 0 )) || continue
      for stage in 0 1 2 3; do
        out="$work/dp$dp-tp$tp-pp$pp-s$stage-$round.json"
        mpirun -np "$ranks" "$gpt" "${common[@]}" --dp "$dp" --tp "$tp" --pp "$pp" --stage "$stage" \
          --micro-batch $(( batch / (dp * m) )) --gradient-accumulation-steps "$m" --report "$out" > /dev/null
        runs+=("$out")
      done
    done
  done
done
"$bench" --rank --cluster "$work/cluster.json" --one "$work/one.json" "${runs[@]}" --reference "${refs[@]}"
