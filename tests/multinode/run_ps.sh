#!/usr/bin/env bash
# The parameter-server layout across test hosts (scripts/testbed, [Note:
# testbed layout]; [Note: parameter-server layout] in
# runtime/ps/param_server.h). Usage:
#   run_ps.sh SOURCE_ROOT BUILD_ROOT
# On 3 test hosts x 1 rank (TCP between the hosts) it runs:
#  (a) test_parameter_server: synchronous servers bitwise the all-reduce
#      engine, staleness, errors, with the messages between hosts;
#  (b) fashion_mnist with its server placed on zs-host0 by
#      parameter_server.placement (it is world rank 0) and the workers on
#      zs-host1 and zs-host2: the run's losses and final accuracy must equal
#      those of the all-reduce engine on the two worker hosts alone, and
#      the servers' line must name rank 0 as the server;
#  (c) a placement naming a host that runs no rank: the job fails naming
#      parameter_server.placement.
# Exits 77 (Meson's "skipped") where network namespaces cannot be created,
# as run_multinode.sh.
set -euo pipefail

src="${1:?usage: run_ps.sh SOURCE_ROOT BUILD_ROOT}"
build="${2:?usage: run_ps.sh SOURCE_ROOT BUILD_ROOT}"
export ZS_TESTBED_PREFIX="${ZS_TESTBED_PREFIX:-zsps}"
export ZS_TESTBED_NET="${ZS_TESTBED_NET:-10.213.5}"
job=ps
# shellcheck source=tests/multinode/testbed_job.sh
source "$src/tests/multinode/testbed_job.sh"

step "bringing up 3 test hosts"
"$testbed" up 3

run 300 "test_parameter_server, 3 hosts x 1 rank" "$testbed" mpirun -np 3 --host zs-host0:1,zs-host1:1,zs-host2:1 \
  "$build/tests/test_parameter_server" --minimal --no-colors

fm=("$build/examples/fashion_mnist" --epochs 1 --max-steps 60 --hidden 128)
echo '{"train_micro_batch_size_per_gpu": 32, "steps_per_print": 20, "zero_optimization": {"stage": 2}}' >"$work/allreduce.json"
echo '{"train_micro_batch_size_per_gpu": 32, "steps_per_print": 20, "zero_optimization": {"stage": 2},
  "parameter_server": {"servers": 1, "placement": ["zs-host0"]}}' >"$work/ps.json"
run 150 "fashion_mnist all-reduce, 2 worker hosts" \
  sh -c "$testbed mpirun -np 2 --host zs-host1:1,zs-host2:1 ${fm[*]} --config $work/allreduce.json > $work/allreduce.out 2>&1"
run 150 "fashion_mnist, a server on zs-host0 and 2 worker hosts" \
  sh -c "$testbed mpirun -np 3 --host zs-host0:1,zs-host1:1,zs-host2:1 ${fm[*]} --config $work/ps.json > $work/ps.out 2>&1"
step "the same losses and accuracy as the all-reduce engine"
for f in allreduce ps; do grep -aE "^  step +[0-9]+ \| loss|^final test accuracy" "$work/$f.out" | sed -E 's/, [0-9.]+ s$//' >"$work/$f.lines"; done
cat "$work/ps.lines"
[ -s "$work/ps.lines" ] || { echo "ps: FAILED: no loss lines" >&2; tail -20 "$work/ps.out" >&2; exit 1; }
diff "$work/allreduce.lines" "$work/ps.lines" || { echo "ps: FAILED: the servers' run differs from all-reduce" >&2; exit 1; }
grep -aq "^  rank 0: server" "$work/ps.out" || { echo "ps: FAILED: rank 0 is not the server" >&2; tail -20 "$work/ps.out" >&2; exit 1; }
grep -a "^  rank [0-9]: " "$work/ps.out"

echo '{"zero_optimization": {"stage": 2}, "parameter_server": {"servers": 1, "placement": ["zs-host7"]}}' >"$work/nowhere.json"
step "a placement host that runs no rank is named"
rc=0
"$testbed" mpirun -np 3 --host zs-host0:1,zs-host1:1,zs-host2:1 "${fm[@]}" --config "$work/nowhere.json" \
  >"$work/nowhere.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || { echo "ps: FAILED: the job ran with a placement host that runs no rank" >&2; exit 1; }
grep -a 'parameter_server.placement"\[0\] = "zs-host7"' "$work/nowhere.out" ||
  { echo "ps: FAILED: no error naming the placement" >&2; tail -20 "$work/nowhere.out" >&2; exit 1; }

finish
