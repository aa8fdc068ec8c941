#!/usr/bin/env bash
# The ASan build's leak check sees zeroshard's leaks in a process that ran
# MPI, and OpenMPI's are kept out of it ([Note: leak checks beside OpenMPI]):
# zs_leak_canary under mpirun must exit 0 without "leak", and with it must
# fail with one LeakSanitizer report per rank, naming its 77-byte leak in
# leak_canary_allocation and no other leak. Needs the environment
# scripts/sanitize sets (ASAN_OPTIONS with detect_leaks=1, LSAN_OPTIONS).
# Usage: leak_check.sh MPIRUN CANARY NP
set -u
mpirun="$1" canary="$2" np="$3"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
fail() { echo "leak_check: FAILED: $*"; sed -n 1,80p "$out"; exit 1; }

"$mpirun" -np "$np" "$canary" > "$out" 2>&1 || fail "without a leak: exit status $?"
grep -q "LeakSanitizer" "$out" && fail "without a leak: a leak was reported"
echo "ok: no leak reported at $np ranks"

"$mpirun" -np "$np" "$canary" leak > "$out" 2>&1 && fail "with a leak: exit status 0"
reports=$(grep -c "ERROR: LeakSanitizer: detected memory leaks" "$out")
[ "$reports" = "$np" ] || fail "with a leak: $reports LeakSanitizer reports, expected $np (one per rank)"
canaries=$(grep -c "Direct leak of 77 byte(s) in 1 object(s)" "$out")
[ "$canaries" = "$np" ] || fail "with a leak: $canaries reports of the 77-byte leak, expected $np"
named=$(grep -c "in leak_canary_allocation" "$out")
[ "$named" = "$np" ] || fail "with a leak: leak_canary_allocation named $named times, expected $np"
leaks=$(grep -cE "(Direct|Indirect) leak of" "$out")
[ "$leaks" = "$np" ] || fail "with a leak: $leaks leaks reported, expected only the $np canaries"
echo "ok: the canary's leak and no other reported on each of $np ranks"
echo "leak_check: all passed"
