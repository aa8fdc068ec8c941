#!/usr/bin/env bash
# zs_plan's calibrate and plan modes as a user runs them: a calibration at
# 2 ranks written as JSON; a plan for a budget that stage 0 and host offload
# do not fit (device 72 MiB, no host memory), ranked with that
# calibration, whose written ds_config has the chosen stage and keeps the
# base config's keys; a budget nothing fits (exit 2, naming the smallest
# footprint); a size with an unknown unit (an error naming the option);
# the cluster plan: Llama-3-8B on 64 H100 (a ranked table, why the first
# wins, the time to train), a model whose layer no plan fits on 16 PCIe
# A100s (exit 2,
# the closest rejected with the tier), a misspelt transformer key and a
# missing global batch (errors naming them); a transformer's estimate
# with its activations per sample, and that figure given twice (refused).
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

clusters="$configs/../clusters"
llama=kind=llama,layers=32,hidden=4096,heads=32,kv_heads=8,seq=8192,vocab=128256,ffn=14336
"$zs_plan" --cluster "$clusters/h100x64.json" --transformer "$llama" --global-batch 512 --tokens 1e12 \
  >"$work/cluster.out" 2>&1 || { cat "$work/cluster.out" >&2; fail "cluster plan"; }
grep -q "8.030B parameters" "$work/cluster.out" || fail "cluster plan: no parameter count: $(head -n 2 "$work/cluster.out")"
grep -qE "^ +[0-9]+ plans fit|^[0-9]+ plans fit" "$work/cluster.out" || fail "cluster plan: no count of fits"
grep -qE "^ +1 +[0-9]+ +[0-9]+ +[0-9]+ " "$work/cluster.out" || fail "cluster plan: no first row: $(cat "$work/cluster.out")"
grep -q "^why #1: its step of" "$work/cluster.out" || fail "cluster plan: no why"
grep -q "to train" "$work/cluster.out" || fail "cluster plan: no time to train"
echo "zs_plan_cli: ok: $(grep -m1 -E '^ +1 ' "$work/cluster.out" | cut -c1-120)"

rc=0
"$zs_plan" --cluster "$clusters/a100-pcie-x16.json" --global-batch 64 \
  --transformer layers=2,hidden=262144,heads=256,seq=2048,vocab=51200 >"$work/toobig.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "cluster plan, nothing fits: exit status $rc (want 2): $(cat "$work/toobig.out")"
grep -q "^nothing fits" "$work/toobig.out" && grep -q "device needs" "$work/toobig.out" ||
  fail "cluster plan, nothing fits: $(cat "$work/toobig.out")"

rc=0
"$zs_plan" --cluster "$clusters/h100x64.json" --global-batch 8 --transformer layers=2,hiden=3 >"$work/badkey.out" 2>&1 ||
  rc=$?
[ "$rc" = 1 ] && grep -q 'unknown transformer key "hiden"' "$work/badkey.out" ||
  fail "a misspelt transformer key: exit status $rc, $(cat "$work/badkey.out")"
rc=0
"$zs_plan" --cluster "$clusters/h100x64.json" --transformer "$llama" >"$work/nobatch.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "needs --global-batch" "$work/nobatch.out" ||
  fail "no global batch: exit status $rc, $(cat "$work/nobatch.out")"
gpt=kind=gpt,layers=2,hidden=64,heads=4,seq=16,vocab=256
"$zs_plan" --transformer "$gpt" --activation-checkpointing --world 2 >"$work/shape.out" 2>&1 ||
  fail "estimate of --transformer: $(cat "$work/shape.out")"
grep -q "activations per sample from --transformer: 93184 bytes" "$work/shape.out" ||
  fail "estimate of --transformer: no activations line in $(cat "$work/shape.out")"
rc=0
"$zs_plan" --transformer "$gpt" --world 2 --budget-device 1GiB --activation-bytes-per-sample 1MiB \
  >"$work/twice.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "give one" "$work/twice.out" ||
  fail "activations from the shape and the flag: exit status $rc, $(cat "$work/twice.out")"
# A parameter-server config: the batch counts the 3 workers of 4 ranks (24
# = 8 x 3), the default report is the server's, and no worker at all is named.
echo '{"train_batch_size": 24, "train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 3},
  "parameter_server": {"servers": 1}}' >"$work/ps.json"
"$zs_plan" --params 1e6 --units 4 --world 4 --config "$work/ps.json" >"$work/ps.out" 2>&1 ||
  fail "parameter-server estimate: $(cat "$work/ps.out")"
grep -q "this rank is server 0, holding workers 0, 1, 2" "$work/ps.out" ||
  fail "parameter-server estimate: no server line in $(cat "$work/ps.out")"
# push "direct": the server holds its window for every worker.
sed 's/"servers": 1}/"servers": 1, "push": "direct"}/' "$work/ps.json" >"$work/direct.json"
"$zs_plan" --params 1e6 --units 4 --world 4 --config "$work/direct.json" >"$work/direct.out" 2>&1 ||
  fail "direct parameter-server estimate: $(cat "$work/direct.out")"
grep -q "this rank is server 0, holding window 0 of 1 for every worker" "$work/direct.out" ||
  fail "direct parameter-server estimate: no server line in $(cat "$work/direct.out")"
rc=0
"$zs_plan" --params 1e6 --units 4 --world 1 --config "$work/ps.json" >"$work/ps1.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -qF "\"parameter_server.servers\" = 1 leaves no worker among the job's 1 ranks" "$work/ps1.out" ||
  fail "servers without workers: exit status $rc, $(cat "$work/ps1.out")"
echo "zs_plan_cli: all passed"
