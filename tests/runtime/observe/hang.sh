#!/usr/bin/env bash
# Collectives that never complete end the job with one message instead of
# hanging (zeroshard.collective_timeout_s = 3 s in hang_driver): rank 2 of 4
# skips an unshard, runs an extra forward (MPI then fails the mismatched
# all-gathers: "collective error"), stalls for 60 s in its compute (the
# others time out: "collective timeout"), or is killed (mpirun ends the job
# and names it). Each run must end
# non-zero within the timeout plus a few seconds, name rank 2 and the
# sequence numbers, and leave no process behind.
# Usage: hang.sh MPIRUN HANG_DRIVER WORKDIR
set -uo pipefail
mpirun="$1"; driver="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAILED: $*"; echo "--- output:"; cat "$work/out"; exit 1; }
# With zeroshard.collective_check the skipped unshard is caught before MPI
# matches the wrong calls: every rank throws the same error naming rank 2.
timeout 120 "$mpirun" -np 4 "$driver" checked >"$work/out" 2>&1; rc=$?
echo "checked: exit $rc"; grep "hang_driver: error" "$work/out"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "checked: exit $rc"
grep -qE "hang_driver: error: collective mismatch on communicator dp: .*rank 2 calls all_gather #[0-9]+ \(dp, unit u2" "$work/out" \
  || fail "checked: no mismatch error naming rank 2's all-gather of u2"

# Live processes of the driver (zombies, already dead and waiting to be reaped, do not count).
leftovers() { pgrep -r R,S,D,T -x "$(basename "$driver")" >/dev/null; }

# The healthy run finishes: the watchdog must not fire on a slow machine.
timeout 120 "$mpirun" -np 4 "$driver" ok >"$work/out" 2>&1 || fail "the healthy run failed"
grep -q "3 steps done" "$work/out" || fail "the healthy run did not finish"

for mode in skip_unshard extra_forward stall kill; do
  start=$(date +%s)
  timeout 120 "$mpirun" -np 4 "$driver" "$mode" >"$work/out" 2>&1; rc=$?
  took=$(( $(date +%s) - start ))
  echo "$mode: exit $rc after $took s"
  sed -n '1,12p' "$work/out"
  [ "$rc" -ne 124 ] || fail "$mode: hung (killed by timeout after 120 s)"
  [ "$rc" -ne 0 ] || fail "$mode: exit 0"
  [ "$took" -le 30 ] || fail "$mode: took $took s (timeout 3 s plus start-up)"
  grep -q "rank 2" "$work/out" || fail "$mode: rank 2 is not named"
  if [ "$mode" = stall ]; then
    grep -qE "^zeroshard: collective timeout after 3 s: ranks 0, 1, 3 are in [a-z_]+ #[0-9]+ \(dp, unit [a-z0-9_]+, [0-9]+ f(32|64)\); rank 2 is in no collective \(last completed: [a-z_]+ #[0-9]+" "$work/out" \
      || fail "stall: the timeout report does not name the waiting ranks' collective and rank 2's last one"
  fi
  if [ "$mode" != kill ]; then
    # A timeout, or a collective MPI failed (mismatched calls): one report either way.
    grep -qE "^zeroshard: collective (timeout|error)" "$work/out" || fail "$mode: no watchdog report"
    [ "$(grep -cE "^zeroshard: collective (timeout|error)" "$work/out")" -eq 1 ] || fail "$mode: the report is printed more than once"
    grep -E "^zeroshard: collective" "$work/out" | grep -qE "rank 2 (is|failed) in ([a-z_]+ #[0-9]+ \(dp, unit|no collective)" \
      || fail "$mode: the report does not give rank 2's collective, sequence number and unit"
    grep -E "^zeroshard: collective" "$work/out" | grep -qE "ranks [0-9, ]+ (are|failed) in [a-z_]+ #[0-9]+" \
      || fail "$mode: the report does not give the other ranks' collective"
  fi
  sleep 1
  if leftovers; then fail "$mode: processes left behind: $(pgrep -x -a "$(basename "$driver")")"; fi
done
echo "every hang ended with a message"
