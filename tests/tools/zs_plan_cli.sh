#!/usr/bin/env bash
# zs_plan's calibrate and plan modes as a user runs them: a calibration at
# 2 ranks written as JSON; a plan for a budget that stage 0 and host offload
# do not fit (device 72 MiB, no host memory), ranked with that
# calibration, whose written ds_config has the chosen stage and keeps the
# base config's keys; a budget nothing fits (exit 2, naming the smallest
# footprint); a size with an unknown unit (an error naming the option).
# Usage: zs_plan_cli.sh ZS_PLAN CONFIG_DIR
set -euo pipefail
zs_plan="$1" configs="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d /tmp/zs-plan-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "zs_plan_cli: FAILED: $*" >&2; exit 1; }

mkdir "$work/nvme"
mpirun -np 2 "$zs_plan" --calibrate "$work/calib.json" --nvme-path "$work/nvme" >"$work/cal.out" 2>&1 ||
  { cat "$work/cal.out" >&2; fail "calibrate"; }
grep -q '"world_size": 2' "$work/calib.json" || fail "calibration: no world_size 2 in $(cat "$work/calib.json")"
grep -q '"all_gather"' "$work/calib.json" || fail "calibration: no all_gather timings"
[ -z "$(ls -A "$work/nvme")" ] || fail "calibration left files in the nvme path: $(ls "$work/nvme")"
echo "zs_plan_cli: ok: $(head -n 1 "$work/cal.out")"

plan=("$zs_plan" --params 4e6 --units 8 --world 2 --config "$configs/stage3_bf16_adam.json")
"${plan[@]}" --budget-device 72MiB --budget-host 0 --calibration "$work/calib.json" --loop-ms-per-sample 1 \
  --write-config "$work/chosen.json" >"$work/plan.out" 2>&1 || { cat "$work/plan.out" >&2; fail "plan"; }
grep -q "^fits, fastest first" "$work/plan.out" || fail "the plan is not ranked by time: $(cat "$work/plan.out")"
stage=$(sed -nE 's/^chosen: stage ([0-3]), optimizer none.*/\1/p' "$work/plan.out")
[ -n "$stage" ] || fail "chosen: $(grep chosen "$work/plan.out") (want one without offload: no host budget)"
grep -q "stage 0, micro-batch 1 x 1 *device needs" "$work/plan.out" || fail "stage 0 is not rejected for the device"
grep -q "optimizer cpu.*host needs" "$work/plan.out" || fail "cpu offload is not rejected for the host"
# The written config (dump(2) of the JSON): the chosen stage, no offload, the base's keys kept.
for want in "\"stage\": $stage" '"device": "none"' '"enabled": true' '"lr": 0.0001' '"train_micro_batch_size_per_gpu": 1'; do
  grep -qF "$want" "$work/chosen.json" || fail "no '$want' in the written ds_config: $(cat "$work/chosen.json")"
done
echo "zs_plan_cli: ok: $(grep '^chosen' "$work/plan.out")"

rc=0
"${plan[@]}" --budget-device 1KiB --budget-host 1KiB >"$work/none.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "nothing fits: exit status $rc (want 2)"
grep -q "^nothing fits: the smallest footprint in memory (device + host) is" "$work/none.out" || fail "nothing fits: $(tail -n 1 "$work/none.out")"
echo "zs_plan_cli: ok: $(tail -n 1 "$work/none.out" | cut -c1-120)"

rc=0
"${plan[@]}" --budget-device 12XB >"$work/bad.out" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "budget-device" "$work/bad.out" || fail "a bad size: exit status $rc, $(cat "$work/bad.out")"
echo "zs_plan_cli: all passed"
