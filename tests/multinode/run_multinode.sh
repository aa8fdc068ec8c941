#!/usr/bin/env bash
# The multi-node driver: zeroshard's MPI jobs across test hosts that talk
# real TCP (scripts/testbed, [Note: testbed layout]). Usage:
#   run_multinode.sh SOURCE_ROOT BUILD_ROOT
# It brings up 3 test hosts and runs, each under a time limit:
#  (a) the comm suites (test_comm: test_comm.cpp, test_comm_blocking.cpp,
#      test_self.cpp, test_mpi.cpp) on 2 hosts x 1 rank, 2 hosts x 2 ranks
#      and 3 hosts x 1 rank, and test_node_groups on the same layouts with
#      ZS_EXPECT_NODES set (leaders must be ranks 0 and 2 on 2 x 2);
#  (b) test_stage_equivalence at world size 4, once on this machine alone
#      (plain mpirun, shared memory) and once on 2 hosts x 2 ranks, each
#      writing a digest (ZS_STAGE_EQUIVALENCE_DIGEST) of every run's losses
#      and final parameters; the two digests must be identical, bit for bit
#      ([Note: reduction order across hosts]);
#  (c) the main jobs across hosts against the same world size on this
#      machine: fashion_mnist at stage 3 on 2 hosts x 1 rank (final
#      accuracy and last loss equal in its report), gpt at dp 2 x tp 2 on 2
#      hosts x 2 ranks (every printed loss equal), and the stress program
#      with nvme offload on 2 hosts x 1 rank;
#  (d) tools/zs-launch running the main job on 3 hosts with checkpoints,
#      zs-host2's processes killed mid-run: it must resume on 2 hosts from
#      the 3-rank checkpoint and finish;
# and brings the testbed down at the end, also on failure or interruption.
# Exits 77 (Meson's "skipped") with one line saying why when network
# namespaces cannot be created here (not root, or no CAP_NET_ADMIN).
#
# [Note: reduction order across hosts]
# Open MPI picks its reduction algorithms (coll/tuned for the blocking
# collectives, coll/libnbc for the non-blocking ones, with the ring that
# comm/mpi/mpi_nbc_tuning.h selects) from the communicator size and the
# message size only, not from the transport (shared memory or TCP) or from
# which ranks share a host; so at the same world size the order of every
# sum, and with it every bit of the result, is the same on one host and
# across hosts, which (b) checks. Measured at world size 4 against one
# host: 2 hosts x 2 ranks by slot and round-robin (--map-by node), 4 hosts
# x 1, 4 ranks on one test host over TCP, all bitwise equal, and 3 hosts
# x 1 equal to 3 ranks on one host. What changes it is a topology-aware
# component: coll/han (Open MPI 4.1: priority 0, off unless asked for)
# reduces inside each node first. Forced on (--mca coll_han_priority 100)
# with the round-robin placement, the loss means (a blocking f64
# all-reduce, han's) differed in the last bit while the parameters stayed
# equal (the Engine's gradient collectives are non-blocking or
# reduce-scatters, which han does not implement); with the block
# placement han pairs ranks as tuned's recursive doubling does and nothing
# differed. Another world size changes the algorithms' partitions.
set -euo pipefail

src="${1:?usage: run_multinode.sh SOURCE_ROOT BUILD_ROOT}"
build="${2:?usage: run_multinode.sh SOURCE_ROOT BUILD_ROOT}"
export ZS_TESTBED_PREFIX="${ZS_TESTBED_PREFIX:-zsmt}"
job=multinode
# shellcheck source=tests/multinode/testbed_job.sh
source "$src/tests/multinode/testbed_job.sh"
tb_mpirun=("$testbed" mpirun)

step "bringing up 3 test hosts"
"$testbed" up 3

# doctest's --minimal keeps the output of passing runs to one line per rank.
comm="$build/tests/test_comm"
groups="$build/tests/test_node_groups"
run 120 "comm suites, 2 hosts x 1 rank" "${tb_mpirun[@]}" -np 2 --host zs-host0,zs-host1 "$comm" --minimal --no-colors
run 120 "comm suites, 2 hosts x 2 ranks" "${tb_mpirun[@]}" -np 4 --host zs-host0:2,zs-host1:2 "$comm" --minimal --no-colors
run 120 "comm suites, 3 hosts x 1 rank" "${tb_mpirun[@]}" -np 3 --host zs-host0,zs-host1,zs-host2 "$comm" --minimal --no-colors
run 60 "node groups, 2 hosts x 2 ranks" "${tb_mpirun[@]}" -np 4 --host zs-host0:2,zs-host1:2 -x ZS_EXPECT_NODES=2 "$groups" --minimal --no-colors
run 60 "node groups, 3 hosts x 1 rank" "${tb_mpirun[@]}" -np 3 --host zs-host0,zs-host1,zs-host2 -x ZS_EXPECT_NODES=3 "$groups" --minimal --no-colors

stage="$build/tests/test_stage_equivalence"
run 120 "stage equivalence, 4 ranks on this machine (shared memory)" \
  env ZS_STAGE_EQUIVALENCE_DIGEST="$work/one-host.txt" mpirun -np 4 "$stage" --minimal --no-colors
run 120 "stage equivalence, 2 hosts x 2 ranks (TCP)" \
  "${tb_mpirun[@]}" -np 4 --host zs-host0:2,zs-host1:2 -x ZS_STAGE_EQUIVALENCE_DIGEST="$work/two-hosts.txt" "$stage" --minimal --no-colors
step "stage equivalence: one host against two hosts, bit for bit"
lines=$(wc -l <"$work/one-host.txt")
[ "$lines" = 32 ] || { echo "multinode: FAILED: expected 32 digest lines (4 optimizers: SGD, AdamW, Lion, Adagrad x 2 sizes x 4 stages), got $lines" >&2; exit 1; }
if ! diff "$work/one-host.txt" "$work/two-hosts.txt"; then
  echo "multinode: FAILED: the runs across 2 hosts differ from the run on one host (lines above)" >&2
  exit 1
fi
echo "multinode: ok: all $lines runs (losses and final parameters) bitwise equal"

# (c) The main jobs across hosts against the same world size on one
# machine: every printed loss and the final accuracy identical.
fm=("$build/examples/fashion_mnist" --stage 3 --epochs 1 --max-steps 20)
run 150 "fashion_mnist stage 3, 20 steps, 2 ranks on this machine" mpirun -np 2 "${fm[@]}" --report "$work/fm-one.json"
run 150 "fashion_mnist stage 3, 20 steps, 2 hosts x 1 rank" \
  "${tb_mpirun[@]}" -np 2 --host zs-host0,zs-host1 "${fm[@]}" --report "$work/fm-two.json"
gpt=("$build/examples/gpt" --tp 2 --stage 3 --steps 6 --eval-every 3 --eval-batches 2 --layers 2 --dim 64 --heads 4 --seq 64)
run 200 "gpt dp 2 x tp 2, 6 steps, 4 ranks on this machine" sh -c "mpirun -np 4 ${gpt[*]} > $work/gpt-one.out"
run 200 "gpt dp 2 x tp 2, 6 steps, 2 hosts x 2 ranks (tp groups inside a host)" \
  sh -c "$testbed mpirun -np 4 --host zs-host0:2,zs-host1:2 ${gpt[*]} > $work/gpt-two.out"
step "main jobs: one machine against two hosts"
python3 - "$work/fm-one.json" "$work/fm-two.json" <<'PY' || { echo "multinode: FAILED: fashion_mnist across hosts differs" >&2; exit 1; }
import json, sys
def find(j, k):
    if isinstance(j, dict):
        if k in j:
            return j[k]
        for v in j.values():
            r = find(v, k)
            if r is not None:
                return r
    return None
a, b = ({k: find(json.load(open(p)), k) for k in ("final_accuracy", "last_step_loss")} for p in sys.argv[1:])
keys = ("final_accuracy", "last_step_loss")
diff = [k for k in keys if a[k] != b[k]]
print("multinode: fashion_mnist", {k: a.get(k) for k in keys}, "on both" if not diff else f"differs in {diff}: {[b.get(k) for k in diff]}")
sys.exit(1 if diff or any(a.get(k) is None for k in keys) else 0)
PY
# The loss lines without their throughput figures.
losses() { grep -E "^step|validation loss" "$1" | sed -E 's/[0-9]+ tokens\/s//'; }
if ! diff <(losses "$work/gpt-one.out") <(losses "$work/gpt-two.out"); then
  echo "multinode: FAILED: the gpt losses across hosts differ from one machine (lines above)" >&2
  exit 1
fi
echo "multinode: ok: gpt's $(grep -cE "^step|validation loss" "$work/gpt-one.out") loss lines identical"
grep -qF "gpt: tensor-parallel groups (tp 2): all 2 inside a node (2 nodes)" "$work/gpt-two.out" ||
  { echo "multinode: FAILED: gpt on 2 hosts x 2 ranks did not report its tp groups inside the hosts" >&2; grep "^gpt:" "$work/gpt-two.out" >&2; exit 1; }
run 200 "offload_stress, nvme, 2 hosts x 1 rank (every step checked against a replay)" \
  "${tb_mpirun[@]}" -np 2 --host zs-host0,zs-host1 "$build/examples/zs_offload_stress" --params 2e6 --units 4 \
  --steps 2 --nvme-path "$work/stress"

# (d) tools/zs-launch: host 2's processes are killed once the first
# checkpoint is complete; the job must go on from it on hosts 0 and 1.
step "zs-launch: 3 hosts, zs-host2 killed after the first checkpoint"
ckpt="$work/elastic-ckpt"
(
  for _ in $(seq 1 600); do [ -e "$ckpt/latest" ] && break; sleep 0.2; done
  pids=$(ip netns pids "$ZS_TESTBED_PREFIX-h2" | tr '\n' ' ')
  echo "multinode: killing zs-host2's processes ($pids)"
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids
) &
killer=$!
rc=0
timeout --kill-after=10 150 "$src/tools/zs-launch" --hosts zs-host0,zs-host1,zs-host2 --ranks-per-host 1 \
  --save-dir "$ckpt" --max-restarts 1 --mpirun "$testbed mpirun" --log "$work/elastic.log" -- \
  "$build/examples/fashion_mnist" --stage 3 --epochs 1 --save-every 10 --max-steps 40 >"$work/elastic.out" 2>&1 || rc=$?
wait "$killer" || true
cat "$work/elastic.log"
grep -a "resumed from\|final test accuracy" "$work/elastic.out" || true
for want in "failed host(s): zs-host2" "start: 2 ranks on zs-host0 zs-host1, resuming from" "job finished on zs-host0 zs-host1"; do
  grep -qF "$want" "$work/elastic.log" || { echo "multinode: FAILED (zs-launch): no '$want' in its log (exit status $rc)" >&2; tail -30 "$work/elastic.out" >&2; exit 1; }
done
grep -q "saved by 3 ranks, now 2" "$work/elastic.out" || { echo "multinode: FAILED (zs-launch): the restart did not resume the 3-rank checkpoint" >&2; exit 1; }
grep -q "after 40 optimizer steps" "$work/elastic.out" || { echo "multinode: FAILED (zs-launch): the job did not reach step 40" >&2; exit 1; }
[ "$rc" = 0 ] || { echo "multinode: FAILED (zs-launch): exit status $rc" >&2; exit 1; }
echo "multinode: ok (zs-launch restarted on 2 hosts from the checkpoint and finished)"

finish
