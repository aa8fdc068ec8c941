#!/usr/bin/env bash
# Predicted vs measured step time (runtime/plan/cost_model.h, [Note: step cost
# model]) after calibrating this machine: zs_plan --calibrate at RANKS ranks,
# then the Fashion-MNIST job at stages 0-3 with offload_optimizer none, cpu
# and nvme (stages 1-3) for STEPS steps, and the offload stress program; each
# prints the measured mean step time, the predicted one and the error
# (examples/report/plan_lines.h). Prints one row per run and the largest
# error. Usage (from the repository root, after a build):
#   bench/plan/plan_accuracy.sh [BUILD_DIR=build] [RANKS=4] [STEPS=150] [NVME_DIR=/tmp]
set -euo pipefail
build="${1:-build}" ranks="${2:-4}" steps="${3:-150}" nvme_root="${4:-/tmp}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d "$nvme_root/zs-plan-accuracy.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/nvme"
mpirun -np "$ranks" "$build/tools/zs_plan" --calibrate "$work/calib.json" --nvme-path "$work/nvme"
rows=() worst=0
run() {  # run NAME OUTPUT_LINE
  local line="$2" measured predicted err
  measured=$(sed -E 's/.*measured ([0-9.]+), predicted.*/\1/' <<<"$line")
  predicted=$(sed -E 's/.*predicted ([0-9.]+) \(.*/\1/' <<<"$line")
  err=$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%+.0f", (p - m) / m * 100 }')
  rows+=("$(printf '%-34s %10s %10s %7s%%' "$1" "$measured" "$predicted" "$err")")
  worst=$(awk -v w="$worst" -v e="$err" 'BEGIN { e = e < 0 ? -e : e; print (e > w ? e : w) }')
}
for stage in 0 1 2 3; do
  for offload in none cpu nvme; do
    [ "$stage" -gt 0 ] || [ "$offload" = none ] || continue
    cat >"$work/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 32, "gradient_clipping": 1.0, "steps_per_print": 1000,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage, "offload_optimizer": {"device": "$offload", "nvme_path": "$work/nvme"}}}
JSON
    line=$(mpirun -np "$ranks" "$build/examples/fashion_mnist" --config "$work/c.json" --epochs 1 --max-steps "$steps" \
      --calibration "$work/calib.json" 2>/dev/null | grep "^step time")
    run "fashion_mnist stage $stage offload $offload" "$line"
  done
done
line=$(mpirun -np "$ranks" "$build/examples/zs_offload_stress" --params 4e7 --units 8 --steps 5 --nvme-path "$work/nvme" \
  --no-verify --calibration "$work/calib.json" 2>/dev/null | grep "^step time")
run "offload_stress 4e7 nvme/nvme" "$line"
printf '%-34s %10s %10s %8s\n' "run ($ranks ranks)" "measured" "predicted" "error"
printf '%s\n' "${rows[@]}"
echo "largest error: ${worst}%"
