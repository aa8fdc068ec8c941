#!/usr/bin/env bash
# bench/zeropp: ZeRO++ across test hosts (bench/zeropp/README.md). On 2
# test hosts x 2 ranks (scripts/testbed; MPI's shared memory inside a host,
# TCP between the hosts) with each host's link limited to each RATE, runs
# the two training jobs at stage 3 plain, +qwZ, +hpZ, +qgZ and with all
# three, the same steps each:
#   fashion_mnist (MLP 784-256-256-10, fp32, micro-batch 32 per rank,
#     FM_STEPS steps): test accuracy after them;
#   gpt (dp 4, 2 layers, width 128, 4 heads, sequences of 64, GPT_STEPS
#     steps): validation loss after them (8 batches);
# and prints one row per rate, job and variant: the bytes a step sends
# between hosts (the comms log, summed over the ranks, steps 2 on) with the
# count computed from the sizes beside it (cross_host_traffic,
# runtime/plan/cost_model.h), both against plain's; the median step time
# (steps 2 on) against plain's; the accuracy or loss. Also the load average
# before and after and the CPU's SIMD target. Usage (from the repository
# root, after a build, as root: the testbed needs network namespaces):
#   bench/zeropp/run_bench.sh [BUILD_DIR=build] [FM_STEPS=300] [GPT_STEPS=150] [RATES="1gbit 100mbit"]
set -euo pipefail
build="${1:-build}" fm_steps="${2:-300}" gpt_steps="${3:-150}" rates="${4:-1gbit 100mbit}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
testbed="$root/scripts/testbed"
export ZS_TESTBED_PREFIX="${ZS_TESTBED_PREFIX:-zsbz}" ZS_TESTBED_NET="${ZS_TESTBED_NET:-10.213.5}"
export ZS_TESTBED_BTL="${ZS_TESTBED_BTL:-vader,tcp,self}"  # shared memory inside a host, TCP between them
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/zs-bench-zeropp.XXXXXX)
trap '"$testbed" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
data="${ZS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"

zero() {  # zero VARIANT: the zero_optimization section of a variant (bench/zeropp/variants.json)
  python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' \
    "$root/bench/zeropp/variants.json" "$1"
}
# field REPORT PYTHON-EXPRESSION (on the report as r)
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "bench/zeropp: $(date -u +%Y-%m-%dT%H:%MZ), load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
rows=()
for rate in $rates; do
  "$testbed" up 2 --rate "$rate" >/dev/null
  for variant in plain qwZ hpZ qgZ all; do
    echo "{\"train_micro_batch_size_per_gpu\": 32, \"steps_per_print\": 100000, \"comms_logger\": {\"enabled\": true}," \
         "\"zero_optimization\": $(zero "$variant")}" >"$work/fm.json"
    "$testbed" mpirun -np 4 --host zs-host0:2,zs-host1:2 "$build/examples/fashion_mnist" --config "$work/fm.json" \
      --epochs 1 --max-steps "$fm_steps" --hidden 256,256 --data-dir "$data" --report "$work/fm-$rate-$variant.json" \
      >"$work/fm-$rate-$variant.out" 2>&1
    echo "{\"comms_logger\": {\"enabled\": true}, \"zero_optimization\": $(zero "$variant")}" >"$work/gpt.json"
    "$testbed" mpirun -np 4 --host zs-host0:2,zs-host1:2 "$build/examples/gpt" --config "$work/gpt.json" \
      --steps "$gpt_steps" --eval-every "$gpt_steps" --eval-batches 8 --layers 2 --dim 128 --heads 4 --seq 64 \
      --report "$work/gpt-$rate-$variant.json" >"$work/gpt-$rate-$variant.out" 2>&1
    fm="$work/fm-$rate-$variant.json" gpt="$work/gpt-$rate-$variant.json"
    rows+=("$rate fashion_mnist $variant $(field "$fm" 'r["run"]["cross_host_bytes"]["measured_per_step"]') \
$(field "$fm" 'r["run"]["cross_host_bytes"]["computed_per_step"]') $(field "$fm" 'r["run"]["median_step_seconds"]') \
$(field "$fm" 'r["final_accuracy"]')")
    rows+=("$rate gpt $variant $(field "$gpt" 'r["cross_host_bytes"]["measured_per_step"]') \
$(field "$gpt" 'r["cross_host_bytes"]["computed_per_step"]') $(field "$gpt" 'r["median_step_seconds"]') \
$(field "$gpt" 'r["history"][-1]["validation_loss"]')")
    echo "  done: $rate $variant (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
  "$testbed" down >/dev/null
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); CPU SIMD: $(grep -o -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
printf '%s\n' "${rows[@]}" | python3 -c '
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
plain = {(r[0], r[1]): r for r in rows if r[2] == "plain"}
print("| link | job | stage 3 | cross-host bytes/step (comms log) | computed from sizes | vs plain | step time (s) | vs plain | result |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
for r in rows:
    rate, job, variant, measured, computed, step, result = r
    p = plain[(rate, job)]
    what = "test accuracy" if job == "fashion_mnist" else "validation loss"
    print(f"| {rate} | {job} | {variant} | {float(measured):.0f} | {float(computed):.0f} | "
          f"{float(p[3]) / float(measured):.2f}x fewer | {float(step):.4f} | {float(p[5]) / float(step):.2f}x faster | "
          f"{what} {float(result):.4f} |")
'
