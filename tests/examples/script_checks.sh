# Helpers for the example programs' end-to-end scripts (job_errors.sh,
# gpt_cli.sh), sourced after setting `work` (a scratch folder): every
# command runs under `timeout` and its output goes to $work/out.
#   run EXPECTED COMMAND...   EXPECTED: an exit status, or "abort" (non-zero,
#                             not a timeout); a timeout (hang) always fails
#   expect TEXT               TEXT must be in the last output
#   count TEXT N              TEXT must be on exactly N lines of it
#   fail WHY                  prints WHY and the last output, exits 1
fail() { echo "FAILED: $*"; echo "--- output:"; cat "$work/out"; exit 1; }
run() {
  local want="$1"; shift
  timeout 240 "$@" >"$work/out" 2>&1; local rc=$?
  [ "$rc" -ne 124 ] || fail "timed out (hang): $*"
  if [ "$want" = abort ]; then [ "$rc" -ne 0 ] || fail "exit 0: $*"; else [ "$rc" -eq "$want" ] || fail "exit $rc, want $want: $*"; fi
}
expect() { grep -qF -- "$1" "$work/out" || fail "no \"$1\" in the output"; }
count() { [ "$(grep -cF -- "$1" "$work/out")" -eq "$2" ] || fail "\"$1\" is not printed $2 time(s)"; }
