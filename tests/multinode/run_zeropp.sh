#!/usr/bin/env bash
# ZeRO++ across test hosts (scripts/testbed, [Note: testbed layout]), the
# way run_multinode.sh runs the other multi-host parts. Usage:
#   run_zeropp.sh SOURCE_ROOT BUILD_ROOT
# On 2 test hosts x 2 ranks (TCP between the hosts) it runs:
#  (a) the ZeRO++ component and engine suites (test_zeropp,
#      test_zeropp_engine): qwZ, hpZ and qgZ against plain stage 3 and their
#      composition, with real hosts under the node groups;
#  (b) fashion_mnist at stage 3 with the comms log on, plain and with each
#      option and all three: the bytes a step sends between hosts, from the
#      comms log, must equal the count computed from the sizes
#      (examples/report/cross_host_meter.h, runtime/plan/cost_model.h), and
#      all three must send at most 1/3.5 of plain's;
#  (c) gpt at dp 4, plain and with all three options (its loop holds the
#      embedding from the forward to the backward: the engine's gather
#      counts carry that): the same equality; and at dp 2
#      x tp 2 (the data-parallel groups span the hosts, so hpZ's groups and
#      qgZ's single hop cross them) that the job runs and reports its bytes
#      (the computed count is one data-parallel group's: not compared).
# Exits 77 (Meson's "skipped") where network namespaces cannot be created,
# as run_multinode.sh.
set -euo pipefail

src="${1:?usage: run_zeropp.sh SOURCE_ROOT BUILD_ROOT}"
build="${2:?usage: run_zeropp.sh SOURCE_ROOT BUILD_ROOT}"
export ZS_TESTBED_PREFIX="${ZS_TESTBED_PREFIX:-zszp}"
export ZS_TESTBED_NET="${ZS_TESTBED_NET:-10.213.4}"
job=zeropp
# shellcheck source=tests/multinode/testbed_job.sh
source "$src/tests/multinode/testbed_job.sh"
hosts=(--host zs-host0:2,zs-host1:2)

step "bringing up 2 test hosts"
"$testbed" up 2

run 300 "test_zeropp, 2 hosts x 2 ranks" "$testbed" mpirun -np 4 "${hosts[@]}" "$build/tests/test_zeropp" --minimal --no-colors
run 300 "test_zeropp_engine, 2 hosts x 2 ranks" "$testbed" mpirun -np 4 "${hosts[@]}" "$build/tests/test_zeropp_engine" \
  --minimal --no-colors

# check_bytes NAME OUTPUT: the measured bytes per step equal the computed;
# prints them and remembers the measured figure in $measured.
check_bytes() {
  local line
  line=$(grep -a "^cross-host bytes per step" "$2" || true)
  [ -n "$line" ] || { echo "zeropp: FAILED ($1): no cross-host line" >&2; tail -20 "$2" >&2; exit 1; }
  measured=$(sed -E 's/.*measured ([0-9]+) .*/\1/' <<<"$line")
  local computed
  computed=$(sed -E 's/.*computed ([0-9]+) .*/\1/' <<<"$line")
  echo "zeropp: $1: $line"
  [ "$measured" = "$computed" ] || { echo "zeropp: FAILED ($1): measured $measured, computed $computed" >&2; exit 1; }
}

zero() {  # zero VARIANT: the zero_optimization section of a variant (bench/zeropp/variants.json)
  python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' \
    "$src/bench/zeropp/variants.json" "$1"
}
declare -A bytes
for variant in plain qwZ hpZ qgZ all; do
  cat >"$work/fm-$variant.json" <<JSON
{"train_micro_batch_size_per_gpu": 32, "steps_per_print": 1000, "comms_logger": {"enabled": true},
 "zero_optimization": $(zero "$variant")}
JSON
  run 150 "fashion_mnist stage 3 $variant, 4 steps, 2 hosts x 2 ranks" \
    sh -c "$testbed mpirun -np 4 --host zs-host0:2,zs-host1:2 $build/examples/fashion_mnist --config $work/fm-$variant.json \
      --epochs 1 --max-steps 4 --hidden 256,256 > $work/fm-$variant.out 2>&1"
  check_bytes "fashion_mnist $variant" "$work/fm-$variant.out"
  bytes[$variant]=$measured
done
step "all three options against plain: at least 3.5x fewer bytes between hosts"
python3 -c "import sys; p, a = int(sys.argv[1]), int(sys.argv[2]); print(f'zeropp: plain {p}, all three {a}: {p / a:.2f}x'); sys.exit(0 if p >= 3.5 * a else 1)" \
  "${bytes[plain]}" "${bytes[all]}" || { echo "zeropp: FAILED: all three options save less than 3.5x" >&2; exit 1; }

gpt=("$build/examples/gpt" --steps 4 --eval-every 100 --eval-batches 2 --layers 2 --dim 64 --heads 4 --seq 64)
for variant in plain all; do
  echo "{\"comms_logger\": {\"enabled\": true}, \"zero_optimization\": $(zero $variant)}" >"$work/gpt-$variant.json"
  run 200 "gpt dp 4, $variant, 2 hosts x 2 ranks" \
    sh -c "$testbed mpirun -np 4 --host zs-host0:2,zs-host1:2 ${gpt[*]} --config $work/gpt-$variant.json > $work/gpt-dp4-$variant.out 2>&1"
  check_bytes "gpt dp 4 $variant" "$work/gpt-dp4-$variant.out"
done
run 200 "gpt dp 2 x tp 2, all three options, 2 hosts x 2 ranks" \
  sh -c "$testbed mpirun -np 4 --host zs-host0:2,zs-host1:2 ${gpt[*]} --tp 2 --config $work/gpt-all.json > $work/gpt-tp2.out 2>&1"
grep -a "^cross-host bytes per step" "$work/gpt-tp2.out" | sed 's/^/zeropp: gpt dp 2 x tp 2: /'
grep -aq "computed n/a" "$work/gpt-tp2.out" || { echo "zeropp: FAILED (gpt dp 2 x tp 2): no bytes reported" >&2; exit 1; }

finish
