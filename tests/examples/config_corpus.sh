#!/usr/bin/env bash
# The corpus of real ds_config shapes (tests/runtime/config/configs/real,
# README.md there names the public template each mirrors) through the
# example programs as a user runs them, unedited: fashion_mnist on 2 ranks
# and gpt on 1, a few steps each. Every file either trains (exit 0, the
# programs' "auto" line when the file has "auto", the run's last line) or is
# refused with its stated reason (exit 1, the reason in the message). The
# monitor file's CSV series are checked row by row; a file the README does
# not list fails.
# Usage: config_corpus.sh MPIRUN FASHION_MNIST GPT FASHION_DATA CORPUS_DIR WORKDIR
set -uo pipefail
mpirun="$1"; fashion="$2"; gpt="$3"; data="$4"; corpus="$5"; work="$6"
rm -rf "$work"; mkdir -p "$work"
# shellcheck source=tests/examples/script_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_checks.sh"
export OPENBLAS_NUM_THREADS=1

# Files refused, and the reason their message must give.
declare -A refused=(
  [megatron_curriculum_seqlen.json]='"data_efficiency" = {"data_sampling":{"curriculum_learning":'
)
declare -A reason=(
  [megatron_curriculum_seqlen.json]='is not supported: curriculum learning and data routing change the data'
)

count_files=0
for file in "$corpus"/*.json; do
  name=$(basename "$file")
  count_files=$((count_files + 1))
  grep -qF "\`$name\`" "$corpus/README.md" || { echo "FAILED: $name is not listed in $corpus/README.md"; exit 1; }
  dir="$work/${name%.json}"; mkdir -p "$dir"; cd "$dir" || exit 1
  if [ -n "${refused[$name]:-}" ]; then
    run abort "$mpirun" -np 2 "$fashion" --config "$file" --data-dir "$data" --hidden 64 --max-steps 4
    expect "fashion_mnist: error: rank 0: $file: "
    count "fashion_mnist: error" 1
    expect "${refused[$name]}"
    expect "${reason[$name]}"
    run 1 "$gpt" --config "$file" --layers 1 --dim 32 --heads 2 --seq 32 --eval-batches 2 --eval-every 3 --steps 3
    expect "gpt: error: $file: "
    expect "${reason[$name]}"
    echo "config_corpus: $name: refused: ${reason[$name]}"
    continue
  fi
  run 0 "$mpirun" -np 2 "$fashion" --config "$file" --data-dir "$data" --hidden 64 --max-steps 4
  expect "final test accuracy"
  expect "after 4 optimizer steps"
  if grep -q '"auto"' "$file"; then expect 'fashion_mnist: "auto" filled: '; fi
  ! grep -q "^fashion_mnist: error" "$work/out" 2>/dev/null || fail "an error line"
  run 0 "$gpt" --config "$file" --layers 1 --dim 32 --heads 2 --seq 32 --eval-batches 2 --eval-every 3 --steps 3
  grep -q "^step     3 " "$work/out" || fail "gpt: no step 3 line with $name"
  if grep -q '"auto"' "$file"; then expect 'gpt: "auto" filled: '; fi
  echo "config_corpus: $name: trains in fashion_mnist (2 ranks) and gpt"
done
[ "$count_files" -ge 10 ] || { echo "FAILED: only $count_files corpus files"; exit 1; }

# What the programs filled, by HF Trainer's rules, for the HF ZeRO-3 template
# at 2 ranks: the flags' defaults, the widest hidden layer, the batch product.
cd "$work/hf_docs_zero3" || exit 1
run 0 "$mpirun" -np 2 "$fashion" --config "$corpus/hf_docs_zero3.json" --data-dir "$data" --hidden 48,64 \
  --max-steps 4 --micro-batch 16 --gradient-accumulation-steps 2 --lr 0.002 --warmup-steps 3
for fill in 'train_micro_batch_size_per_gpu = 16 (micro_batch)' 'gradient_accumulation_steps = 2 (gradient_accumulation)' \
            'optimizer.params.lr = 0.002 (lr)' 'optimizer.params.betas = [0.9,0.999] ([beta1, beta2])' \
            'scheduler.params.warmup_num_steps = 3 (warmup_steps)' 'fp16.enabled = false (precision == fp16)' \
            'zero_optimization.reduce_bucket_size = 4096 (hidden^2, hidden 64)' \
            'zero_optimization.stage3_prefetch_bucket_size = 3686 (0.9 hidden^2, hidden 64)' \
            'zero_optimization.stage3_param_persistence_threshold = 640 (10 hidden, hidden 64)' \
            'train_batch_size = 64 (micro x accumulation x world)'; do
  expect "$fill"
done
expect "micro-batch 16 x accumulation 2 x 2 ranks = global batch 64"
# The template's pin_memory true on the programs' host-memory Engines: off, said once.
count "pin_memory true: this program's Engine keeps its state in host memory" 1

# The monitor file: csv_monitor under the run's folder, one row per step
# at 32 x 2 ranks samples each, written once (by world rank 0).
csv="$work/deepspeed_docs_monitor/monitor/csv/corpus_run"
for series in train_loss lr grad_norm skipped_steps step_time_ms samples_per_second; do
  f="$csv/Train_Samples_$series.csv"
  [ -f "$f" ] || { echo "FAILED: no $f"; exit 1; }
  # fashion_mnist's 4 rows, then gpt's 3 appended (8 sequences per step, 1 rank).
  [ "$(head -1 "$f")" = "step,$series" ] || { echo "FAILED: header of $f: $(head -1 "$f")"; exit 1; }
  [ "$(sed -n '2,$p' "$f" | cut -d, -f1 | tr '\n' ' ')" = "64 128 192 256 8 16 24 " ] ||
    { echo "FAILED: step column of $f: $(cut -d, -f1 "$f" | tr '\n' ' ')"; exit 1; }
done
[ "$(sed -n 2p "$csv/Train_Samples_lr.csv")" = "64,0.001" ] || { echo "FAILED: lr row $(sed -n 2p "$csv/Train_Samples_lr.csv")"; exit 1; }
echo "config_corpus: ok ($count_files files)"
