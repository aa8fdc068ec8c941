#!/usr/bin/env bash
# The elastic run of tools/zs-launch on 4 test hosts (scripts/testbed,
# [Note: zs-launch]). Usage: run_elastic.sh SOURCE_ROOT BUILD_ROOT
#  (a) before any start: a host whose link is down, and a hostfile naming a
#      host that does not exist, are errors naming the host (exit 2);
#  (b) the main job, examples/fashion_mnist at stage 3, 4 hosts x 1 rank,
#      global batch 96, a checkpoint every 50 steps, 250 steps:
#       - zs-host3 crashes at a random step in 60..140 (its processes
#         killed, and once they are gone its link down): the job restarts
#         on 3 hosts from the last checkpoint (micro-batch 32 instead of
#         24: the same global batch);
#       - zs-host3's link comes back; zs-host2 goes silent 10 steps after
#         the restarted run's first checkpoint (its link down first, so no
#         connection to it is ever closed; then its processes killed): the
#         job restarts on zs-host0, zs-host1 and zs-host3 (added back) and
#         completes its 250 steps;
#      its final test accuracy is within 1 point of an uninterrupted 4-rank
#      run of the same global batch, no process is left in any test host,
#      and the timeline (failure step, detection and restart times, steps
#      lost) is printed.
# Brings the testbed down at the end, also on failure. Exits 77 with one
# line saying why where network namespaces cannot be created.
set -euo pipefail

src="${1:?usage: run_elastic.sh SOURCE_ROOT BUILD_ROOT}"
build="${2:?usage: run_elastic.sh SOURCE_ROOT BUILD_ROOT}"
export ZS_TESTBED_PREFIX="${ZS_TESTBED_PREFIX:-zsel}" ZS_TESTBED_NET="${ZS_TESTBED_NET:-10.214.0}"
job=elastic
# shellcheck source=tests/multinode/testbed_job.sh
source "$src/tests/multinode/testbed_job.sh"
fail() { echo "elastic: FAILED: $*" >&2; exit 1; }
ns() { echo "$ZS_TESTBED_PREFIX-h$1"; }
link() { ip netns exec "$(ns "$1")" ip link set eth0 "$2"; }
# kill_processes I: SIGKILL every process in test host I and wait (up to
# 10 s) until they are gone.
kill_processes() {
  local pids tries=0
  while pids=$(ip netns pids "$(ns "$1")" | tr '\n' ' ') && [ -n "$pids" ] && [ $tries -lt 100 ]; do
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
    tries=$((tries + 1))
  done
}
# crash_host I: host I's processes die (their connections are closed), then
# its link goes down.
crash_host() { kill_processes "$1"; link "$1" down; }
# silence_host I: host I's link goes down first (nothing it had open is ever
# closed towards the others), then its processes are killed.
silence_host() { link "$1" down; kill_processes "$1"; }
now() { date +%s.%N; }
main="$build/examples/fashion_mnist"
# The example's defaults with a line every 10 steps; the batch keys are
# "auto": zs-launch fills them (--micro-batch, --gradient-accumulation-steps).
cat >"$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "steps_per_print": 10,
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 3},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}}}
JSON
prog=(--config "$work/config.json" --epochs 1 --save-every 50 --max-steps 250 --seed 7)
launch=("$src/tools/zs-launch" --global-batch 96 --max-micro-batch 32 --probe-timeout 15 --mpirun "$testbed mpirun")

step "bringing up 4 test hosts"
"$testbed" up 4

step "(a) errors before any start"
link 3 down
rc=0
"${launch[@]}" --hosts zs-host0,zs-host1,zs-host2,zs-host3 --save-dir "$work/a" -- "$main" "${prog[@]}" >"$work/a.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "host zs-host3 cannot be reached" "$work/a.out" || { cat "$work/a.out" >&2; fail "unreachable host: exit status $rc"; }
echo "elastic: ok: $(grep -m1 "cannot be reached" "$work/a.out" | cut -c1-150)"
link 3 up
printf 'zs-host0\nzs-host9 slots=1\n' >"$work/hostfile"
rc=0
"${launch[@]}" --hostfile "$work/hostfile" --save-dir "$work/a" -- "$main" "${prog[@]}" >"$work/a.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "host zs-host9 cannot be reached" "$work/a.out" || { cat "$work/a.out" >&2; fail "unknown host: exit status $rc"; }
echo "elastic: ok: $(grep -m1 "cannot be reached" "$work/a.out" | cut -c1-150)"

step "(b) the uninterrupted reference: 4 ranks, micro-batch 24"
mpirun -np 4 "$main" "${prog[@]}" --micro-batch 24 --gradient-accumulation-steps 1 --save-dir "$work/ref" \
  >"$work/ref.out" 2>&1 || { tail -20 "$work/ref.out" >&2; fail "reference run"; }
ref=$(grep -o "final test accuracy [0-9.]*" "$work/ref.out" | awk '{print $4}')
echo "elastic: reference accuracy $ref"

step "(b) the elastic run: zs-host3 crashes, then zs-host2 goes silent"
first=$((10 * (6 + RANDOM % 9)))  # 60, 70, ..., 140
out="$work/elastic.out"
: >"$out"
(
  # The first failure at step $first.
  until grep -qE "^  step +$first \|" "$out"; do sleep 0.1; done
  echo "killed zs-host3 at step $first at $(now)" >"$work/kill1"
  crash_host 3
  # The restarted run: its first new checkpoint, then 10 more steps.
  until [ "$(grep -c "resumed from" "$out")" -ge 1 ]; do sleep 0.1; done
  link 3 up  # zs-host3 is back (for the restart after the next failure)
  resumed=$(grep "resumed from" "$out" | tail -n 1 | sed -E 's/.* step ([0-9]+) .*/\1/')
  target=$((resumed + 60))
  until grep -qE "^  step +$target \|" "$out"; do sleep 0.1; done
  echo "killed zs-host2 at step $target at $(now)" >"$work/kill2"
  silence_host 2
) &
killer=$!
rc=0
timeout --kill-after=10 400 "${launch[@]}" --hosts zs-host0,zs-host1,zs-host2,zs-host3 --save-dir "$work/ckpt" \
  --max-restarts 2 --log "$work/elastic.log" -- "$main" "${prog[@]}" >>"$out" 2>"$work/launch.err" || rc=$?
kill "$killer" 2>/dev/null || true  # still waiting for a step when the job ended early
wait "$killer" 2>/dev/null || true
cat "$work/elastic.log"
[ "$rc" = 0 ] || { tail -30 "$out" >&2; cat "$work/launch.err" >&2; fail "zs-launch exit status $rc"; }
for want in "start: 4 ranks on zs-host0 zs-host1 zs-host2 zs-host3 (--micro-batch 24 --gradient-accumulation-steps 1), no checkpoint yet" \
            "failed host(s): zs-host3" "start: 3 ranks on zs-host0 zs-host1 zs-host2 (--micro-batch 32 --gradient-accumulation-steps 1), resuming" \
            "failed host(s): zs-host2" "host zs-host3 is back: added" \
            "start: 3 ranks on zs-host0 zs-host1 zs-host3 (--micro-batch 32 --gradient-accumulation-steps 1), resuming" \
            "job finished on zs-host0 zs-host1 zs-host3"; do
  grep -qF "$want" "$work/elastic.log" || fail "no '$want' in zs-launch's log"
done
grep -q "after 250 optimizer steps" "$out" || fail "the job did not reach step 250"
acc=$(grep -o "final test accuracy [0-9.]*" "$out" | tail -n 1 | awk '{print $4}')

step "timeline"
# Failure i: the kill, mpirun's report (detection), the next start, the step it resumed from.
mapfile -t reported < <(grep "failure reported by mpirun" "$work/elastic.log" | sed -E 's/.*\[([0-9:.]+)\].*/\1/')
mapfile -t starts < <(grep "\] start:" "$work/elastic.log" | sed -E 's/.*\[([0-9:.]+)\].*/\1/')
mapfile -t resumes < <(grep "resumed from" "$out" | sed -E 's/.* step ([0-9]+) .*/\1/')
secs() { date -u -d "$(date -u +%F) $1" +%s.%N; }
for i in 1 2; do
  read -r _ host _ _ killed_step _ killed_at <"$work/kill$i"
  seen=$(secs "${reported[$((i - 1))]}")
  started=$(secs "${starts[$i]}")
  resumed=${resumes[$((i - 1))]}
  awk -v i="$i" -v h="$host" -v k="$killed_step" -v t0="$killed_at" -v t1="$seen" -v t2="$started" -v r="$resumed" \
    'BEGIN { printf "elastic: failure %d: %s killed at step %d; detected %.1f s later (mpirun); restarted %.1f s after that; resumed from step %d: %d steps lost\n", i, h, k, t1 - t0, t2 - t1, r, k - r }'
done
awk -v a="$acc" -v r="$ref" 'BEGIN { printf "elastic: final test accuracy %s (uninterrupted run: %s; difference %+.4f)\n", a, r, a - r; exit !(a - r <= 0.01 && r - a <= 0.01) }' ||
  fail "accuracy differs by more than 1 point"

step "nothing left behind"
for i in 0 1 2 3; do
  left=$(ip netns pids "$(ns "$i")" | wc -l)
  [ "$left" = 0 ] || fail "$left process(es) left in zs-host$i: $(ip netns pids "$(ns "$i")" | xargs -r ps -o pid=,comm= -p)"
done
trap - EXIT
cleanup
left=$(ip netns list | awk '{print $1}' | grep -c "^$ZS_TESTBED_PREFIX-" || true)
[ "$left" = 0 ] || fail "$left namespaces left after down"
echo "elastic: all passed in $((SECONDS - t0)) s"
