#!/usr/bin/env bash
# The ASan build's leak check sees zeroshard's leaks in a process that ran
# MPI, and OpenMPI's are kept out of it ([Note: leak checks beside OpenMPI]):
# zs_leak_canary under mpirun must exit 0 without "leak", and with it must
# fail with LeakSanitizer reports (from the ranks that report before
# mpirun ends the job on the first one's abort) that name the 77-byte leak
# in leak_canary_allocation and no other leak. Needs the environment
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
# A rank killed while it reports leaves a report without its SUMMARY line:
# only complete reports are counted, and no line may name another leak.
reports=$(grep -c "SUMMARY: AddressSanitizer: .* leaked in" "$out")
[ "$reports" -ge 1 ] || fail "with a leak: no complete LeakSanitizer report"
others=$(grep "SUMMARY: AddressSanitizer: .* leaked in" "$out" | grep -vc "77 byte(s) leaked in 1 allocation(s)")
[ "$others" = 0 ] || fail "with a leak: $others reports with more than the canary's 77 bytes"
others=$(grep -E "(Direct|Indirect) leak of" "$out" | grep -vc "Direct leak of 77 byte(s) in 1 object(s)")
[ "$others" = 0 ] || fail "with a leak: $others leaks besides the canary's"
named=$(grep -c "in leak_canary_allocation" "$out")
[ "$named" -ge "$reports" ] || fail "with a leak: leak_canary_allocation named $named times in $reports reports"
echo "ok: the canary's leak and no other reported ($reports of $np ranks reported before the job ended)"
echo "leak_check: all passed"
