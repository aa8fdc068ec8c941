#!/usr/bin/env bash
# The parameter-server layout with a straggler, on test hosts
# (scripts/testbed; [Note: parameter-server layout] in
# runtime/ps/param_server.h). Usage:
#   bench/ps/run_bench.sh BUILD_ROOT [EPOCHS [VARIANTS]]
# Three test hosts: zs-host0 runs the server (parameter_server.placement),
# zs-host1 and zs-host2 one worker each; worker 1 computes 2x slower
# (--slow-rank 1 --slow-factor 2). fashion_mnist at stage 2 (AdamW, micro
# 32, hidden 1024,1024) for EPOCHS (default 1) with the all-reduce engine
# on the two worker hosts, synchronous servers, and staleness 1, 2 and 4,
# in that order, then parameter_server.push "direct" (each worker pushes
# its own gradient; the servers apply each push as it comes, and an epoch
# ends at 937 x 2 pushes, so the fast worker takes more steps) at
# staleness 0 and 2, and at 2 with communication_data_type bf16 (the
# pushed gradients in bf16: direct2bf16), and that with
# parameter_server.staleness_aware_lr (direct2bf16lr); then the table:
# samples/s, final
# accuracy, the ratio to synchronous servers, the collectives' bytes per
# step between hosts (comms log), the bytes each worker pushed and pulled
# per step, each worker's time in step() per step (its idle time: waiting
# for the other worker and the server), and the server's milliseconds per
# update receiving, updating and replying, and ("direct") its mean lag in
# its own updates and mean lr scale. VARIANTS (a quoted list,
# default all of them: allreduce sync s1 s2 s4 direct0 direct2
# direct2bf16 direct2bf16lr) picks runs; it must hold sync, the peer. Needs root
# (network namespaces), like the multinode tests.
set -euo pipefail
build="${1:?usage: run_bench.sh BUILD_ROOT [EPOCHS [VARIANTS]]}"
epochs="${2:-1}"
read -r -a variants <<<"${3:-allreduce sync s1 s2 s4 direct0 direct2 direct2bf16 direct2bf16lr}"
[[ " ${variants[*]} " == *" sync "* ]] || { echo "run_bench.sh: VARIANTS must hold sync (the peer)" >&2; exit 2; }
src="$(cd "$(dirname "$0")/../.." && pwd)"
export ZS_TESTBED_PREFIX="${ZS_TESTBED_PREFIX:-zspsb}"
export ZS_TESTBED_NET="${ZS_TESTBED_NET:-10.213.6}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1
testbed="$src/scripts/testbed"
work=$(mktemp -d /tmp/zs-ps-bench.XXXXXX)
trap '"$testbed" down >/dev/null; rm -rf "$work"' EXIT
"$testbed" up 3
python3 "$src/bench/cpu_info.py" 2>/dev/null || true

fm=("$build/examples/fashion_mnist" --epochs "$epochs" --slow-rank 1 --slow-factor 2)
base='"train_micro_batch_size_per_gpu": 32, "steps_per_print": 100000, "comms_logger": {"enabled": true},
  "zero_optimization": {"stage": 2}'
for variant in "${variants[@]}"; do
  push=reduce extra="" ps_extra=""
  case $variant in
    allreduce) echo "{$base}" >"$work/$variant.json"; hosts=zs-host1:1,zs-host2:1; np=2 ;;
    sync) s=0 ;;
    s1) s=1 ;;
    s2) s=2 ;;
    s4) s=4 ;;
    direct0) s=0 push=direct ;;
    direct2) s=2 push=direct ;;
    direct2bf16) s=2 push=direct extra=', "communication_data_type": "bf16"' ;;
    direct2bf16lr) s=2 push=direct extra=', "communication_data_type": "bf16"' ps_extra=', "staleness_aware_lr": true' ;;
    *) echo "run_bench.sh: unknown variant \"$variant\"" >&2; exit 2 ;;
  esac
  if [ "$variant" != allreduce ]; then
    echo "{$base$extra, \"parameter_server\": {\"servers\": 1, \"staleness\": $s, \"push\": \"$push\",
      \"placement\": [\"zs-host0\"]$ps_extra}}" >"$work/$variant.json"
    hosts=zs-host0:1,zs-host1:1,zs-host2:1
    np=3
  fi
  echo "== $variant"
  "$testbed" mpirun -np "$np" --host "$hosts" "${fm[@]}" --config "$work/$variant.json" \
    --report "$work/$variant.report.json" >"$work/$variant.out" 2>&1 || { tail -20 "$work/$variant.out"; exit 1; }
  grep -aE "^epoch|^final test|^cross-host|^  rank" "$work/$variant.out"
done

python3 - "$work" "${variants[@]}" <<'PY'
import json, sys
work = sys.argv[1]
rows = []
for v in sys.argv[2:]:
    r = json.load(open(f"{work}/{v}.report.json"))
    run = r["run"]
    rate = sum(e["samples"] for e in run["epochs"]) / sum(e["seconds"] for e in run["epochs"])
    f = r["parameter_server_figures"]
    k = 10  # figures per rank (examples/fashion_mnist/main.cpp, kPsFigures)
    ranks = [f[k * i:k * i + k] for i in range(len(f) // k)]
    workers = [x for x in ranks if x[0] == 0.0]
    servers = [x for x in ranks if x[0] != 0.0]
    cross = run.get("cross_host_bytes", {}).get("measured_per_step", -1)
    # A server's ms per update: receiving, updating, replying.
    split = " / ".join(f"{1e3 * x[4] / max(x[1], 1):.1f} / {1e3 * x[5] / max(x[1], 1):.1f} / "
                       f"{1e3 * x[7] / max(x[1], 1):.1f}" for x in servers) or "-"
    # "direct": a server's mean lag in its own updates and mean lr scale.
    lags = " / ".join(f"{x[8] / max(x[1], 1):.2f} / {x[9] / max(x[1], 1):.2f}" for x in servers)
    rows.append((v, rate, r["final_accuracy"], cross,
                 [(w[2] + w[3]) / max(w[1], 1) / 1e6 for w in workers],
                 [1e3 * w[4] / max(w[1], 1) for w in workers], [int(w[1]) for w in workers], split,
                 lags if "direct" in v else "-"))
sync = next(rate for v, rate, *_ in rows if v == "sync")
print("\n| run | samples/s | x sync servers | final accuracy | collective bytes/step between hosts | "
      "pushed + pulled MB/step per worker | ms/step in step() per worker | steps per worker | "
      "server ms/update: receive / update / reply | server: mean lag (updates) / mean lr scale |")
print("|---|---|---|---|---|---|---|---|---|---|")
for v, rate, acc, cross, mb, idle, steps, split, lags in rows:
    print(f"| {v} | {rate:.0f} | {rate / sync:.2f} | {acc:.4f} | {cross} | "
          f"{' / '.join(f'{x:.2f}' for x in mb)} | {' / '.join(f'{x:.1f}' for x in idle)} | "
          f"{' / '.join(str(x) for x in steps)} | {split} | {lags} |")
PY
