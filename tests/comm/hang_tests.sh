#!/usr/bin/env bash
# Hangs and mismatched collectives end the job within the timeout plus a few
# seconds, non-zero, with one message naming rank 2's and the others'
# collectives ([Note: collective watchdog] in comm/traced/collective_watchdog.h),
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
  # No live probe may remain (zombies, dead and waiting to be reaped, do not
  # count); give the launcher's kills 5 s.
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do [ "$(live)" -eq 0 ] && return; sleep 0.5; done
  ps -eo pid,stat,comm | grep zs_hang_probe; fail "processes left behind: $*"
}
live() { ps -eo stat=,comm= | awk '$2 == "zs_hang_probe" && $1 !~ /^Z/' | wc -l; }

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
expect "rank 2 is in all_reduce #17 (dp, unit fc1, 1024 f32)"
expect "ranks 0, 1, 3 are in all_gather #17 (dp, unit fc1, 4096 f32)"

# A mismatched count (rank 2's all_reduce #16 has 2048 elements): MPI fails
# with MPI_ERR_TRUNCATE on rank 2 at once; the report names the error.
run 15 "$probe" count 3
[ "$rc" -eq 3 ] || fail "exit $rc, want 3 (the watchdog's)"
count "zeroshard: collective" 1
expect "zeroshard: collective error: "
expect "rank 2 failed in all_reduce #16 (dp, unit fc1, 2048 f32): MPI_Allreduce failed on rank 2: MPI_ERR_TRUNCATE"

# A point-to-point message that is never sent: rank 2 skips its send to
# rank 3 in step 5, so rank 3 waits in its first receive from rank 2 while
# the others go on to all_reduce #16 (messages do not take collective
# sequence numbers) and wait there for rank 3.
run 15 "$probe" p2p 3
[ "$rc" -eq 3 ] || fail "exit $rc, want 3 (the watchdog's)"
count "zeroshard: collective" 1
expect "zeroshard: collective timeout after 3 s: "
expect "ranks 0, 1, 2 are in all_reduce #16 (dp, unit fc1, 1024 f32)"
expect "rank 3 is in recv #1 (dp, from rank 2, unit fc1, 256 f32)"

# Rank 2 stalls before it makes its first watched communicator: the others
# wait in the watchdog's own setup (the side channel's MPI_Comm_idup),
# bounded by the same timeout: they say so (each waiting rank may print its
# line before the abort reaches it; rank 0's comes first) and end the job
# (rank 2 included, status 3) instead of hanging for ever.
run 15 "$probe" late 3
[ "$rc" -eq 3 ] || fail "exit $rc, want 3 (the watchdog's)"
expect "zeroshard: collective timeout after 3 s: rank 0 of 4 waited for every process of the job to set up the collective watchdog"
expect "at least one process has not got there"

# (c) Rank 2 is killed (SIGKILL) before step 5. By default Open MPI's mpirun
# sees the process die and ends the job itself within a second (status
# 137, its own message), before any timeout: the watchdog has nothing to add.
run 15 "$probe" kill 3
[ "$rc" -ne 0 ] || fail "exit 0 after a rank was killed"
expect "mpirun noticed that process rank 2"
! grep -qF "zeroshard: collective" "$out" || fail "a watchdog report although mpirun ended the job"
# With --enable-recovery mpirun lets the others go on: they block in
# all_reduce #16, the watchdog reports after 3 s, waits kGracePeriod (2 s)
# for rank 2 and names it unreachable; MPI_Abort then takes mpirun ~3 s
# (8.5-9.5 s in all). Open MPI 4.1.4's mpirun does not pass MPI_Abort's
# status on in this mode: runs here ended with 0, or with mpirun itself
# crashing (139, segfault in libpmix after "PMIX ERROR: BAD-PARAM"), so only
# the message, the time and the cleanup are checked.
run 15 --enable-recovery "$probe" kill 3
count "zeroshard: collective" 1
expect "zeroshard: collective timeout after 3 s: ranks 0, 1, 3 are in all_reduce #16 (dp, unit fc1, 1024 f32); rank 2 unreachable"
echo "hang tests passed"
