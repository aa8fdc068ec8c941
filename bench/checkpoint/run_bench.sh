#!/usr/bin/env bash
# bench/checkpoint: async against synchronous checkpoint saves
# (bench/checkpoint/README.md). In ROUNDS interleaved rounds, each job runs
# twice, the same steps and saves, once with checkpoint.async false and once
# with true:
#   gpt at stage 3 on 4 ranks (dp 4; LAYERS layers of width DIM, 4 heads,
#     sequences of 64), GPT_STEPS steps, a save every SAVE_EVERY steps;
#   zs_offload_stress on 1 rank, PARAMS parameters at stage 3 with the
#     optimizer state and the parameters on nvme (the swap files in
#     NVME_DIR), STRESS_STEPS steps, a save every STRESS_SAVE_EVERY steps;
# and prints per job and round: the checkpoint's bytes; the synchronous
# save's stall (the call's seconds, median over the saves) against the
# async save's (its snapshot) and their ratio; the async background write
# (rank 0); the median step while a write ran against the median of the
# other steps of the same run (the first step left out), and how many async
# saves found the previous one still in flight (their stall includes the
# rest of its write: save less often than a write takes to see the
# snapshot alone). Also the load average and the CPU.
# Usage (from the repository root, after a build):
#   bench/checkpoint/run_bench.sh [BUILD_DIR=build] [ROUNDS=3] [DIM=512] [LAYERS=8] [GPT_STEPS=32] [SAVE_EVERY=8]
#                                 [PARAMS=2e8] [STRESS_STEPS=10] [NVME_DIR=/var/tmp] [STRESS_SAVE_EVERY=4]
set -euo pipefail
build="${1:-build}" rounds="${2:-3}" dim="${3:-512}" layers="${4:-8}" gpt_steps="${5:-32}" save_every="${6:-8}"
params="${7:-2e8}" stress_steps="${8:-10}" nvme_dir="${9:-/var/tmp}" stress_save_every="${10:-4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d "$nvme_dir/zs-bench-ckpt.XXXXXX")
trap 'rm -rf "$work"' EXIT
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "bench/checkpoint: $(date -u +%Y-%m-%dT%H:%MZ), load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(df -T "$work" | awk 'NR==2 {print $2}') at $nvme_dir"
printf '%-6s %-5s %12s %10s %10s %7s %10s %10s %10s %6s %6s\n' job round ckpt_bytes sync_stall async_stall ratio \
  bg_write step_write step_other ratio waited
for round in $(seq 1 "$rounds"); do
  declare -A stall=() write=() during=() other=() bytes=() waited=()
  for mode in false true; do
    echo "{\"zero_optimization\": {\"stage\": 3}, \"steps_per_print\": 100000, \"checkpoint\": {\"async\": $mode}}" \
      >"$work/gpt.json"
    rm -rf "$work/gpt-ckpt"
    mpirun -np 4 "$build/examples/gpt" --config "$work/gpt.json" --dim "$dim" --layers "$layers" --heads 4 \
      --steps "$gpt_steps" --eval-every "$gpt_steps" --eval-batches 1 --save-dir "$work/gpt-ckpt" \
      --save-every "$save_every" --keep-last 2 --report "$work/gpt-$mode.json" >"$work/gpt-$mode.out" 2>&1 ||
      { cat "$work/gpt-$mode.out"; exit 1; }
    r="$work/gpt-$mode.json"
    stall[$mode]=$(field "$r" 'r["checkpoints"]["median_stall_s"]')
    write[$mode]=$(field "$r" 'r["checkpoints"]["median_write_s"]')
    during[$mode]=$(field "$r" 'r["checkpoints"]["median_step_s_writing"]')
    other[$mode]=$(field "$r" 'r["checkpoints"]["median_step_s_other"]')
    bytes[$mode]=$(field "$r" 'r["checkpoints"]["checkpoint_bytes"]')
    waited[$mode]=$(field "$r" 'r["checkpoints"]["saves_waiting"]')
  done
  python3 -c 'import sys; a=[float(x) for x in sys.argv[3:]]
print("%-6s %-5s %12d %10.4f %10.4f %7.3f %10.4f %10.4f %10.4f %6.3f %6d" % (sys.argv[1], sys.argv[2], a[0], a[1], a[2], a[2] / a[1], a[3], a[4], a[5], a[4] / a[5] if a[5] > 0 else 0, a[6]))' \
    gpt "$round" "${bytes[true]}" "${stall[false]}" "${stall[true]}" "${write[true]}" "${during[true]}" "${other[true]}" \
    "${waited[true]}"
  for mode in sync async; do
    flag=""; [ "$mode" = async ] && flag="--async-save"
    rm -rf "$work/swap" "$work/stress-ckpt"; mkdir -p "$work/swap"
    "$build/examples/zs_offload_stress" --params "$params" --units 16 --steps "$stress_steps" --nvme-path "$work/swap" \
      --no-verify --save-dir "$work/stress-ckpt" --save-every "$stress_save_every" $flag >"$work/stress-$mode.out" 2>&1 ||
      { cat "$work/stress-$mode.out"; exit 1; }
  done
  # "checkpoints: N ... saves of B bytes, median stall S s ... background write W s ...; steps during writes D s ..., the others' O s"
  python3 - "$round" "$work/stress-sync.out" "$work/stress-async.out" <<'PY'
import re, sys
def line(path):
    for l in open(path):
        if l.startswith("checkpoints:"):
            return l
    raise SystemExit("no checkpoints line in " + path)
s, a = line(sys.argv[2]), line(sys.argv[3])
num = lambda pat, l: float(re.search(pat, l).group(1)) if re.search(pat, l) else 0.0
b = num(r"saves of (\d+) bytes", a)
ss, sa = num(r"median stall ([0-9.]+) s", s), num(r"median stall ([0-9.]+) s", a)
w = num(r"background write ([0-9.]+) s", a)
d, o = num(r"steps during writes ([0-9.]+) s", a), num(r"the others' ([0-9.]+) s", a)
wt = num(r"; (\d+) of the saves waited", a)
print("%-6s %-5s %12d %10.4f %10.4f %7.3f %10.4f %10.4f %10.4f %6.3f %6d" % ("stress", sys.argv[1], b, ss, sa, sa / ss, w, d, o, d / o if o > 0 else 0, wt))
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
