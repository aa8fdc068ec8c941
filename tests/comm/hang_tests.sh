#!/usr/bin/env bash
# Hangs and mismatched collectives end the job within the timeout plus a few
# seconds, non-zero, with one message naming rank 2's and the others'
# collectives ([Note: collective watchdog] in comm/collective_watchdog.h),
# and leave no process behind. Usage: hang_tests.sh MPIRUN ZS_HANG_PROBE
set -uo pipefail
mpirun="$1"; probe="$2"
out=$(mktemp); trap 'rm -f "$out"' EXIT
fail() { echo "FAILED: $*"; echo "--- output:"; cat "$out"; exit 1; }
expect() { grep -qF -- "$1" "$out" || fail "no \"$1\" in the output"; }
count() { [ "$(grep -cF -- "$1" "$out")" -eq "$2" ] || fail "\"$1\" is printed $(grep -cF -- "$1" "$out") time(s), want $2"; }
# run MAX_SECONDS ARGS...: runs the probe on 4 ranks, sets rc and secs.
run() {
  local max="$1"; shift
  local start=$(date +%s.%N)
  timeout 60 "$mpirun" -np 4 "$@" >"$out" 2>&1; rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  echo "rc $rc after $secs s: $*"
  [ "$rc" -ne 124 ] || fail "timed out (hang): $*"
  [ "$(echo "$secs > $max" | bc)" -eq 0 ] || fail "took $secs s, more than $max s: $*"
  sleep 1
  ! pgrep -x zs_hang_probe >/dev/null || { pgrep -ax zs_hang_probe; fail "processes left behind: $*"; }
}

# 0. Every rank makes the same calls: the watchdog stays silent, exit 0.
run 30 "$probe" none 3
[ "$rc" -eq 0 ] || fail "exit $rc without a hang"
! grep -qF "zeroshard: collective" "$out" || fail "a report without a hang"

# (a) Rank 2 skips the all_gather of step 5 (#17): rank 2 goes on to the
# reduce_scatter #17, which MPI pairs with the others' all_gather #17.
run 15 "$probe" skip 3
[ "$rc" -eq 3 ] || fail "exit $rc, want 3 (the watchdog's)"
count "zeroshard: collective" 1
expect "rank 2 "
expect "reduce_scatter #17 (dp, unit fc1, 1024 f32)"
expect "ranks 0, 1, 3 "
expect "all_gather #17 (dp, unit fc1, 4096 f32)"

# (b) Rank 2 makes an extra all_reduce in step 5 (#17): its all_gather is
# #18 while the others' is #17.
run 15 "$probe" extra 3
[ "$rc" -eq 3 ] || fail "exit $rc, want 3 (the watchdog's)"
count "zeroshard: collective" 1
expect "rank 2 "
expect "ranks 0, 1, 3 "

# (c) Rank 2 is killed (SIGKILL) before step 5. By default Open MPI's mpirun
# sees the process die and ends the job itself (non-zero, its own message,
# before any timeout): the watchdog has nothing to add.
run 15 "$probe" kill 3
[ "$rc" -ne 0 ] || fail "exit 0 after a rank was killed"
# With --enable-recovery mpirun lets the job go on; the others block in
# all_reduce #16 and the watchdog names rank 2 unreachable.
run 15 --enable-recovery "$probe" kill 3
[ "$rc" -ne 0 ] || fail "exit 0 after a rank was killed"
echo "hang tests passed"
