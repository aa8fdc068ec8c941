# The common start of the test-host drivers (run_multinode.sh,
# run_elastic.sh, run_zeropp.sh), sourced after setting job (the name in messages), src
# and build: Open MPI's environment for root and oversubscribed cores, the
# skip (exit 77, one line saying why) where network namespaces cannot be
# made, a work folder, the testbed brought down (and the work folder
# removed) on exit, step DESCRIPTION for the log's headings, and run
# LIMIT_S DESCRIPTION CMD... (CMD under a time limit, its output shown; the
# job fails naming the step otherwise), and finish, the last step: the
# testbed down, no namespace of it left, the job's time.
testbed="$src/scripts/testbed"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1

skip() { echo "$job: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root with CAP_NET_ADMIN to create network namespaces (running as uid $(id -u))"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed (scripts/bootstrap installs it)"
probe="$ZS_TESTBED_PREFIX-probe$$"
if ! err=$(ip netns add "$probe" 2>&1); then
  skip "cannot create network namespaces (needs CAP_NET_ADMIN): $err"
fi
ip netns delete "$probe"

t0=$SECONDS
work=$(mktemp -d "/tmp/zs-$job.XXXXXX")
cleanup() {
  "$testbed" down || echo "$job: testbed down failed" >&2
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
step() { printf '\n=== %s [%3ds] %s\n' "$job" $((SECONDS - t0)) "$*"; }
# run LIMIT_S DESCRIPTION CMD...: CMD under a time limit, its output shown.
run() {
  local limit="$1" what="$2"
  shift 2
  step "$what"
  local s=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "$job: FAILED ($what): exit status $rc$([ "$rc" = 124 ] && echo ", over the ${limit} s limit")" >&2
    exit 1
  fi
  echo "$job: ok ($what) in $((SECONDS - s)) s"
}
# finish: the last step: brings the testbed down, fails if any of its
# namespaces is left, and prints that the job passed.
finish() {
  step "bringing the testbed down"
  trap - EXIT
  cleanup
  local left
  left=$(ip netns list | awk '{print $1}' | grep -c "^$ZS_TESTBED_PREFIX-" || true)
  [ "$left" = 0 ] || { echo "$job: FAILED: $left namespaces left after down" >&2; exit 1; }
  echo "$job: all passed in $((SECONDS - t0)) s"
}
