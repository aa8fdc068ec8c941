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
#  (c) the same job saving every 20 steps with its server killed (SIGKILL)
#      after the first checkpoint: the job ends within 120 s, not 0, and
#      resumes from the checkpoint with a server and as an all-reduce run
#      on the two worker hosts;
#  (d) a placement naming a host that runs no rank: the job fails naming
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

fm_base=("$build/examples/fashion_mnist" --epochs 1 --hidden 128)
fm=("${fm_base[@]}" --max-steps 60)
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
grep -aq "^  rank 0: server, [0-9]* updates applied, .* largest lag 0 steps" "$work/ps.out" ||
  { echo "ps: FAILED: rank 0 is not the server, or its line is wrong" >&2; tail -20 "$work/ps.out" >&2; exit 1; }
grep -a "^  rank [0-9]: " "$work/ps.out"

step "the server killed mid-run: the job ends, and resumes from its checkpoint"
rm -rf "$work/ckpt"
"$testbed" mpirun -np 3 --host zs-host0:1,zs-host1:1,zs-host2:1 "$build/examples/fashion_mnist" --epochs 1 \
  --max-steps 100000 --hidden 128 --config "$work/ps.json" --save-dir "$work/ckpt" --save-every 20 \
  >"$work/killed.out" 2>&1 &
job_pid=$!
# The server is world rank 0: find it by its Open MPI rank once a checkpoint exists.
for _ in $(seq 600); do [ -e "$work/ckpt/latest" ] && break; sleep 0.1; done
[ -e "$work/ckpt/latest" ] || { echo "ps: FAILED: no checkpoint was written" >&2; tail -20 "$work/killed.out" >&2; exit 1; }
server=""
for p in $(pgrep -f "$build/examples/fashion_mnist"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && server=$p
done
[ -n "$server" ] || { echo "ps: FAILED: the server process was not found" >&2; exit 1; }
kill -9 "$server"
t_kill=$SECONDS
rc=0
timeout 120 tail --pid="$job_pid" -f /dev/null || { echo "ps: FAILED: the job did not end within 120 s of the kill" >&2; exit 1; }
wait "$job_pid" || rc=$?
[ "$rc" != 0 ] || { echo "ps: FAILED: the job exited 0 after its server was killed" >&2; exit 1; }
echo "ps: the job ended (exit status $rc) $((SECONDS - t_kill)) s after the server was killed:"
grep -a "rank 0\b.*\(signal\|killed\|Killed\)" "$work/killed.out" | head -3 || true
run 150 "resume with the server on zs-host0" \
  sh -c "$testbed mpirun -np 3 --host zs-host0:1,zs-host1:1,zs-host2:1 ${fm_base[*]} --max-steps 100 --config $work/ps.json \
    --save-dir $work/ckpt --resume > $work/resumed.out 2>&1"
grep -a "^resumed from" "$work/resumed.out" || { echo "ps: FAILED: no resume line" >&2; tail -20 "$work/resumed.out" >&2; exit 1; }
grep -a "^final test accuracy" "$work/resumed.out"
run 150 "resume as an all-reduce run on the two worker hosts" \
  sh -c "$testbed mpirun -np 2 --host zs-host1:1,zs-host2:1 ${fm_base[*]} --max-steps 120 --config $work/allreduce.json \
    --save-dir $work/ckpt --resume > $work/resumed-ar.out 2>&1"
grep -a "^resumed from" "$work/resumed-ar.out" || { echo "ps: FAILED: no resume line" >&2; tail -20 "$work/resumed-ar.out" >&2; exit 1; }

echo '{"zero_optimization": {"stage": 2}, "parameter_server": {"servers": 1, "placement": ["zs-host7"]}}' >"$work/nowhere.json"
step "a placement host that runs no rank is named"
rc=0
"$testbed" mpirun -np 3 --host zs-host0:1,zs-host1:1,zs-host2:1 "${fm[@]}" --config "$work/nowhere.json" \
  >"$work/nowhere.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || { echo "ps: FAILED: the job ran with a placement host that runs no rank" >&2; exit 1; }
grep -a 'parameter_server.placement"\[0\] = "zs-host7"' "$work/nowhere.out" ||
  { echo "ps: FAILED: no error naming the placement" >&2; tail -20 "$work/nowhere.out" >&2; exit 1; }

finish
