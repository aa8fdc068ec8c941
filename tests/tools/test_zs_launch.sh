#!/usr/bin/env bash
# tools/zs-launch's decisions ([Note: zs-launch]) against a stub mpirun
# (no hosts, no namespaces, runs anywhere): bad invocations and hostfiles,
# a host that does not see the save directory, a host that cannot be
# reached at the first start, the global batch kept across world sizes
# (micro-batch x accumulation), a failed host left out of the next start
# and added back after it, and giving up after --max-restarts. The real
# thing on test hosts is run_elastic.sh. Usage: test_zs_launch.sh SOURCE_ROOT
set -euo pipefail

src="${1:?usage: test_zs_launch.sh SOURCE_ROOT}"
launch="$src/tools/zs-launch"
work=$(mktemp -d /tmp/zs-launch-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The stub: "-np N --host LIST PROGRAM ARGS...". A probe (PROGRAM sh) runs
# its check as mpirun would, except on hosts in $STUB_UNREACHABLE (an Open
# MPI-like error) and $STUB_NO_DIR (the token is looked for elsewhere). A
# job run appends "hosts=LIST args=ARGS" to $STUB_RUNS, and fails as if
# the ranks on the host named in line K of $STUB_FAILS (K = the run's
# number) were killed; an empty or missing line: the run succeeds. With
# $STUB_STUCK set, a failing run then ignores SIGTERM (as mpirun waiting for
# a daemon it cannot reach). Each run appends Open MPI's keepalive settings
# it was given to $STUB_RUNS.keepalive.
cat >"$work/mpirun" <<'EOF'
#!/usr/bin/env bash
[ "$1" = -np ] && [ "$3" = --host ] || { echo "stub mpirun: unexpected arguments $*" >&2; exit 99; }
hosts="$4"; shift 4
host="${hosts%%:*}"
if [ "$1" = sh ]; then
  case " ${STUB_UNREACHABLE:-} " in *" $host "*)
    echo "ORTE was unable to reliably start one or more daemons: host $host" >&2; exit 1 ;; esac
  case " ${STUB_NO_DIR:-} " in *" $host "*) exec "$1" "$2" "$3" "$4" "$5.elsewhere" ;; esac
  exec "$@"
fi
echo "hosts=$hosts args=${*:2}" >>"$STUB_RUNS"
echo "${OMPI_MCA_oob_tcp_keepalive_time:-} ${OMPI_MCA_oob_tcp_keepalive_intvl:-} ${OMPI_MCA_oob_tcp_keepalive_probes:-}" >>"$STUB_RUNS.keepalive"
k=$(wc -l <"$STUB_RUNS")
failed=$(sed -n "${k}p" "${STUB_FAILS:-/dev/null}" 2>/dev/null || true)
mkdir -p "$(dirname "$STUB_LATEST")"; echo "step-$k" >"$STUB_LATEST"
if [ -n "$failed" ]; then
  echo "mpirun noticed that process rank 1 with PID 4242 on node $failed exited on signal 9 (Killed)."
  if [ -n "${STUB_STUCK:-}" ]; then trap '' TERM; exec sleep 60; fi
  exit 137
fi
echo "job ran"
EOF
chmod +x "$work/mpirun"
export STUB_RUNS="$work/runs" STUB_LATEST="$work/ckpt/latest"

fails=0
check() {  # check DESCRIPTION WANTED_STATUS WANTED_TEXT CMD...
  local what="$1" want_rc="$2" want="$3" rc=0
  shift 3
  "$@" >"$work/out" 2>&1 || rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qF -- "$want" "$work/out"; then
    echo "FAILED: $what: exit status $rc (want $want_rc), output:" >&2
    sed 's/^/    /' "$work/out" >&2
    echo "    (wanted: $want)" >&2
    fails=$((fails + 1))
  else
    echo "ok: $what"
  fi
}
fresh() { rm -rf "$work/ckpt" "$STUB_RUNS" "$STUB_RUNS.keepalive"; : >"$STUB_RUNS"; }
run_launch() { "$launch" --save-dir "$work/ckpt" --mpirun "$work/mpirun" "$@"; }

fresh
check "no hosts" 2 "--hosts or --hostfile is required" run_launch -- prog
check "no program" 2 "no program after --" run_launch --hosts a
check "bad ranks per host" 2 "--ranks-per-host must be a positive integer (got '0')" run_launch --hosts a --ranks-per-host 0 -- prog
check "silent-host timeout too small" 2 "--silent-host-timeout must be at least 2" run_launch --hosts a --silent-host-timeout 1 -- prog
check "bad failure grace" 2 "--failure-grace must be a positive integer (got 'x')" run_launch --hosts a --failure-grace x -- prog
printf 'a slots=2\nb slot=2\n' >"$work/hf"
check "hostfile: unknown word" 2 "hf:2: unknown word 'slot=2'" run_launch --hostfile "$work/hf" -- prog
printf 'a\n# comment\na slots=1\n' >"$work/hf"
check "hostfile: a host twice" 2 "hf:3: host a is listed twice" run_launch --hostfile "$work/hf" -- prog
printf '# nothing\n\n' >"$work/hf"
check "hostfile: no host" 2 "names no host" run_launch --hostfile "$work/hf" -- prog

fresh
check "a host that cannot be reached at start" 2 "host b cannot be reached: ORTE was unable to reliably start" \
  env STUB_UNREACHABLE=b "$launch" --hosts a,b --save-dir "$work/ckpt" --mpirun "$work/mpirun" -- prog
[ ! -s "$STUB_RUNS" ] || { echo "FAILED: the job ran although a host failed its probe" >&2; fails=$((fails + 1)); }
check "a host that does not see the save directory" 2 "host a does not see the save directory $work/ckpt" \
  env STUB_NO_DIR=a "$launch" --hosts a,b --save-dir "$work/ckpt" --mpirun "$work/mpirun" -- prog

# Hostfile slots, the global batch at 5 then 3 then 4 ranks, a failed host
# left out once and then added back, resume once a checkpoint exists.
fresh
printf 'a slots=2\nb\nc slots=2\n' >"$work/hf"
printf 'b\nc\n' >"$work/fails"
check "two failures, then done" 0 "job finished on a b" \
  env STUB_FAILS="$work/fails" "$launch" --hostfile "$work/hf" --save-dir "$work/ckpt" --mpirun "$work/mpirun" \
  --global-batch 120 --max-micro-batch 16 --max-restarts 2 --log "$work/log" -- prog --x 1
want_runs="hosts=a:2,b:1,c:2 args=--x 1 --save-dir $work/ckpt --micro-batch 12 --gradient-accumulation-steps 2
hosts=a:2,c:2 args=--x 1 --save-dir $work/ckpt --micro-batch 15 --gradient-accumulation-steps 2 --resume
hosts=a:2,b:1 args=--x 1 --save-dir $work/ckpt --micro-batch 10 --gradient-accumulation-steps 4 --resume"
if [ "$(cat "$STUB_RUNS")" != "$want_runs" ]; then
  echo "FAILED: the three starts were:" >&2; sed 's/^/    /' "$STUB_RUNS" >&2
  echo "  wanted:" >&2; echo "$want_runs" | sed 's/^/    /' >&2
  fails=$((fails + 1))
else
  echo "ok: starts on 5, 4 and 3 ranks keep the global batch of 120"
fi
for want in "failed host(s): b" "failed host(s): c" "host b is back: added" "restart 2 of 2"; do
  grep -qF "$want" "$work/log" || { echo "FAILED: no '$want' in the log" >&2; fails=$((fails + 1)); }
done

fresh
printf 'a\nb\n' >"$work/fails"
check "gives up after --max-restarts" 1 "restarted 1 time(s) already (--max-restarts 1); giving up" \
  env STUB_FAILS="$work/fails" "$launch" --hosts a,b,c --save-dir "$work/ckpt" --mpirun "$work/mpirun" \
  --global-batch 7 --max-micro-batch 2 --max-restarts 1 -- prog
check "a global batch that cannot be kept is said" 0 "global batch 7 cannot be kept at 3 ranks (micro-batch <= 2): using 2 x 1 x 3 = 6" \
  env STUB_FAILS=/dev/null "$launch" --hosts a,b,c --save-dir "$work/ckpt2" --mpirun "$work/mpirun" \
  --global-batch 7 --max-micro-batch 2 -- prog

# A silent host is lost after about --silent-host-timeout s of keepalive.
fresh
check "keepalive from --silent-host-timeout" 0 "job finished on a" \
  env STUB_FAILS=/dev/null "$launch" --hosts a --save-dir "$work/ckpt3" --mpirun "$work/mpirun" --silent-host-timeout 7 -- prog
[ "$(cat "$STUB_RUNS.keepalive")" = "4 1 3" ] ||
  { echo "FAILED: keepalive time/intvl/probes for 7 s: $(cat "$STUB_RUNS.keepalive") (want 4 1 3)" >&2; fails=$((fails + 1)); }

# An mpirun that ignores SIGTERM after a failure is killed.
fresh
printf 'b\n' >"$work/fails"
t_stuck=$SECONDS
check "an mpirun stuck after a failure is killed" 0 "mpirun still running 1 s after SIGTERM; killing it" \
  env STUB_FAILS="$work/fails" STUB_STUCK=1 "$launch" --hosts a,b --save-dir "$work/ckpt4" --mpirun "$work/mpirun" \
  --failure-grace 1 -- prog
[ $((SECONDS - t_stuck)) -lt 30 ] || { echo "FAILED: the stuck mpirun was ended only after $((SECONDS - t_stuck)) s" >&2; fails=$((fails + 1)); }

[ "$fails" = 0 ] || { echo "test_zs_launch: $fails failed" >&2; exit 1; }
echo "test_zs_launch: all passed"
