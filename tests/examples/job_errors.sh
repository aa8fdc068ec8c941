#!/usr/bin/env bash
# One rank's error ends the job instead of hanging it; ranks built
# differently are named; an I/O error on one rank is reported once.
# Every mpirun runs under `timeout`: a hang fails the test (status 124).
# Usage: job_errors.sh MPIRUN FASHION_MNIST ZS_OFFLOAD_STRESS DATA_DIR WORKDIR NVME_CONFIG
set -uo pipefail
mpirun="$1"; fm="$2"; stress="$3"; data="$4"; work="$5"; nvme_config="$6"
rm -rf "$work"; mkdir -p "$work"
# shellcheck source=tests/examples/script_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_checks.sh"
fmargs=(--data-dir "$data" --hidden 64 --max-steps 20 --epochs 1)

# 1. A bad config on rank 1 only: the config is read under an agreed error,
# so every rank ends with rank 1's message, printed once by rank 0.
echo '{"zero_optimization": {"stage": "three"}}' > "$work/bad.json"
run abort "$mpirun" -np 1 "$fm" "${fmargs[@]}" : -np 1 "$fm" "${fmargs[@]}" --config "$work/bad.json"
expect "fashion_mnist: error: rank 1: "
expect "zero_optimization.stage"
count "fashion_mnist: error" 1
# A data directory missing on rank 1 only.
run abort "$mpirun" -np 1 "$fm" "${fmargs[@]}" : -np 1 "$fm" --data-dir /nonexistent --hidden 64 --max-steps 20
expect "error on rank 1 of 2 (ending every rank)"
expect "/nonexistent"

# 3. Ranks built with different models or stages: named at finalize, reported once.
run 1 "$mpirun" -np 1 "$fm" "${fmargs[@]}" : -np 1 "$fm" --data-dir "$data" --hidden 64,64 --max-steps 20 --epochs 1
expect "ranks were built with different models or configurations"
expect "units (add_unit calls): 2 on rank 0; 3 on rank 1"
count "fashion_mnist: error:" 1
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --stage 3 : -np 1 "$fm" "${fmargs[@]}" --stage 2
expect "zero_optimization.stage: 3 on ranks 0, 1; 2 on rank 2"
count "fashion_mnist: error:" 1

# 2. An EIO on rank 1 only while the initial parameters are written to nvme.
run 2 "$mpirun" -np 1 "$stress" --params 3e6 --units 6 --steps 3 --sub-group-size 2e5 --nvme-path "$work/swap" \
  : -np 1 env ZS_FAULT_INJECT=write:1:EIO "$stress" --params 3e6 --units 6 --steps 3 --sub-group-size 2e5 \
    --nvme-path "$work/swap" \
  : -np 1 "$stress" --params 3e6 --units 6 --steps 3 --sub-group-size 2e5 --nvme-path "$work/swap"
expect "zs_offload_stress: error: rank 1:"
expect "Input/output error"
count "zs_offload_stress: error:" 1

# An EIO on rank 1 only while --resume writes the loaded state to nvme (the
# 7th write of rank 1: in load_checkpoint's commit): agreed, printed once.
sed "s|/tmp/zeroshard-swap|$work/fm-swap|g" "$nvme_config" > "$work/nvme.json"
fmn=(--data-dir "$data" --hidden 64 --epochs 1 --config "$work/nvme.json" --save-dir "$work/ckpt")
run 0 "$mpirun" -np 2 "$fm" "${fmn[@]}" --max-steps 5
run 1 "$mpirun" -np 1 "$fm" "${fmn[@]}" --max-steps 10 --resume \
  : -np 1 env ZS_FAULT_INJECT=write:7:EIO "$fm" "${fmn[@]}" --max-steps 10 --resume
expect "fashion_mnist: error: rank 1: write of $work/fm-swap/"
expect "Input/output error"
count "fashion_mnist: error:" 1
# The checkpoint is intact: the same resume without the fault continues.
run 0 "$mpirun" -np 2 "$fm" "${fmn[@]}" --max-steps 10 --resume
expect "resumed from $work/ckpt/step-00000005"

# 7. A --save-dir that cannot be created fails before the training, on every rank.
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --save-dir "$work/bad.json/ckpt"
expect "fashion_mnist: error: rank 0: --save-dir $work/bad.json/ckpt: cannot save checkpoints there"
count "fashion_mnist: error:" 1
# A hidden width far beyond the memory: refused naming the option, not std::bad_alloc.
run 1 "$mpirun" -np 2 "$fm" --data-dir "$data" --hidden 99999999999 --max-steps 1
expect "fashion_mnist: error: rank 0: --hidden \"99999999999\": the model would have"
count "fashion_mnist: error:" 1
# Parameter servers that leave no rank to train, and a dtype they do not carry.
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --parameter-servers 2
expect "fashion_mnist: error: rank 0: \"parameter_server.servers\" = 2 leaves no worker among the job's 2 ranks"
count "fashion_mnist: error:" 1
# The file's servers count out of its batch keys: 32 = 32 x 1 worker of 2 ranks.
echo '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage": 2},
  "parameter_server": {"servers": 1}}' > "$work/ps_batch.json"
run 0 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --config "$work/ps_batch.json"
expect "micro-batch 32 x accumulation 1 x 1 ranks = global batch 32"
echo '{"zero_optimization": {"stage": 2}, "parameter_server": {"servers": 1}}' > "$work/ps_one.json"
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --config "$work/ps_one.json" --compare-stages
expect "ps_one.json: \"parameter_server.servers\" = 1 with --compare-stages"
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --slow-rank 2
expect "--slow-rank 2: the job has ranks 0-1"
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --parameter-servers 1 --slow-rank 1
expect "--slow-rank 1: a parameter server (the last 1 of the 2 ranks serve)"
echo '{"parameter_server": {"servers": 2}}' > "$work/ps_all.json"
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --config "$work/ps_all.json"
expect "ps_all.json: \"parameter_server.servers\" = 2 leaves no worker among the job's 2 ranks"
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --parameter-servers 1 --ps-push direct --save-dir "$work/direct"
expect "with parameter_server.push \"direct\": that mode has no checkpoints"
# A value CLI11 refuses: its ValidationError's exit status, 105.
run 105 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --parameter-servers 1 --ps-push all
expect "--ps-push: all not in {reduce,direct}"
run 1 "$mpirun" -np 2 "$fm" "${fmargs[@]}" --parameter-servers 1 --bf16
expect "\"parameter_server.servers\" = 1 needs fp32 training"
count "fashion_mnist: error:" 1

echo "job error tests passed"
