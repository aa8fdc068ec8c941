#!/usr/bin/env bash
# The GPT example's command line end to end on 2 ranks (a 1-layer model, 3
# steps): --resume without --save-dir is an error; a run resumed from its
# last checkpoint with the same --steps trains nothing and reports the
# loaded model's validation loss (the saved run's, to the printed digit); a
# resume with more steps continues from the checkpoint's step; flags out of
# range are refused; --breakdown prints in a run shorter than --eval-every;
# --steps 0 says there is nothing to run; --resume-tag loads an older
# checkpoint by name; sizes too large for the memory, a bad config file and
# a missing checkpoint are each one error line naming the flag, key or file
# once. Every mpirun runs under `timeout`
# (a hang fails).
# Usage: gpt_cli.sh MPIRUN GPT WORKDIR
set -uo pipefail
mpirun="$1"; gpt="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"
# shellcheck source=tests/examples/script_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_checks.sh"
final_val() { sed -n 's/^validation loss \([0-9.]*\) nats.*/\1/p' "$work/out"; }
small=(--layers 1 --dim 32 --heads 2 --seq 32 --eval-every 3 --eval-batches 2 --save-dir "$work/ckpt")

run 1 "$gpt" --resume --steps 2
expect "--resume needs --save-dir"
run 105 "$gpt" --pp 0
expect "--pp: Value 0 not in range"

run 0 "$mpirun" -np 2 "$gpt" "${small[@]}" --steps 3
saved=$(final_val)
[ -n "$saved" ] || fail "no final validation loss"
run 0 "$mpirun" -np 2 "$gpt" "${small[@]}" --steps 3 --resume
expect "resumed from $work/ckpt at step 3"
expect "the checkpoint is at step 3, not below --steps 3: no steps to run"
[ "$(final_val)" = "$saved" ] || fail "validation loss of the loaded model $(final_val), saved run $saved"
run 0 "$mpirun" -np 2 "$gpt" "${small[@]}" --steps 5 --resume
expect "resumed from $work/ckpt at step 3"
grep -q "^step     5 " "$work/out" || fail "no step 5 line after resuming at step 3"
! grep -q "global batch" "$work/out" || fail "a note on the global batch, which did not change"
# Another global batch on resume: said.
run 0 "$mpirun" -np 2 "$gpt" "${small[@]}" --steps 6 --resume --micro-batch 2
expect "saved with a global batch of 16 sequences per step, this run uses 4"
! grep -q "^step     3 " "$work/out" || fail "steps before the checkpoint were run again"
# --resume-tag loads a named checkpoint (step 3, older than step 6); a tag
# the save directory lacks is refused, naming it.
run 0 "$mpirun" -np 2 "$gpt" "${small[@]}" --steps 4 --resume-tag step-00000003 --micro-batch 2
expect "resumed from $work/ckpt at step 3"
grep -q "^step     4 " "$work/out" || fail "no step 4 line after resuming at step 3"
run 1 "$mpirun" -np 2 "$gpt" "${small[@]}" --steps 9 --resume-tag step-00000042
expect "$work/ckpt/step-00000042/manifest.json"
run 1 "$gpt" --resume-tag step-00000003 --steps 2
expect "--resume-tag needs --save-dir"
# --breakdown prints at least once in a run shorter than --eval-every.
run 0 "$mpirun" -np 2 "$gpt" --layers 2 --dim 32 --heads 2 --seq 32 --eval-batches 2 --pp 2 --steps 2 --breakdown
expect "step 2 breakdown, ms"
run 0 "$gpt" --layers 1 --dim 32 --heads 2 --seq 32 --eval-batches 2 --steps 0
expect "gpt: --steps 0: no steps to run"
# Sizes too large for the memory are refused up front, naming the flag,
# once (an agreed error: rank 0 prints it), never std::bad_alloc.
run 1 "$mpirun" -np 2 "$gpt" --layers 100000 --steps 1
expect "--layers 100000 --dim 128:"
run 1 "$mpirun" -np 2 "$gpt" --gradient-accumulation-steps 100000000 --steps 1
expect "--gradient-accumulation-steps 100000000: one step's"
run 1 "$mpirun" -np 2 "$gpt" --micro-batch 1000000 --steps 1
expect "--micro-batch 1000000 --seq 64:"
! grep -q "bad_alloc" "$work/out" || fail "std::bad_alloc instead of the flag"
count "gpt: error" 1
# A bad configuration file: one line, not one per rank; an error agreed
# twice (the checkpoint's latest, then the world) names its rank once.
printf '{"zero_optimization": {"stage": 3, "bogus": 1}}' > "$work/bad.json"
run 1 "$mpirun" -np 2 "$gpt" "${small[@]}" --config "$work/bad.json" --steps 1
expect 'unknown or unsupported configuration key "zero_optimization.bogus"'
count "gpt: error" 1
run 1 "$mpirun" -np 2 "$gpt" --resume --save-dir "$work/none" --steps 1
expect "latest"
! grep -q "rank 0: rank 0:" "$work/out" || fail "a doubled rank prefix"
echo "gpt_cli: ok"
