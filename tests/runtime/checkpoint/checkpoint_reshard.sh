#!/usr/bin/env bash
# Saves at N = 2, 3, 4 ranks and loads at M = 1, 2, 3, 4, 5, 8 (different
# stages too); Lion, Adagrad and Muon saved at 3, loaded at 1, 2, 4; then kills a rank in the middle of a save and checks that the
# previous checkpoint still loads and `latest` still names it; then re-saves
# an existing tag and kills rank 0 at every crash point of the save: `latest`
# must always name a complete checkpoint (the old or the new one), and the
# next save must sweep what the killed one left.
# Under scripts/sanitize (ZS_SANITIZE set) the N x M matrix shrinks to N = 3
# (M = 1, 2, 3, 4: each process start costs seconds there); the other
# parts run whole.
# Usage: checkpoint_reshard.sh MPIRUN DRIVER WORKDIR
set -euo pipefail
mpirun="$1"; driver="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"
savers="2 3 4" loaders="1 2 3 4 5 8"
if [ -n "${ZS_SANITIZE:-}" ]; then savers="3" loaders="1 2 3 4"; fi
for n in $savers; do
  dir="$work/saved-by-$n"
  "$mpirun" -np "$n" "$driver" save "$dir" $((n - 1))
  for m in $loaders; do
    "$mpirun" -np "$m" "$driver" load "$dir" $((m % 4))
  done
done
# Lion and Adagrad (one state each: exp_avg, sum) re-shard as AdamW does;
# so does Muon's momentum (exp_avg), its owners recomputed at the new size.
for opt in Lion Adagrad Muon; do
  dir="$work/$opt-saved-by-3"
  ZS_CKPT_OPTIMIZER=$opt "$mpirun" -np 3 "$driver" save "$dir" 2
  for m in 1 2 4; do
    ZS_CKPT_OPTIMIZER=$opt "$mpirun" -np "$m" "$driver" load "$dir" $(((m + 1) % 4))
  done
done

# 8-bit states (AdamW8bit, block 64): saved at 2; loaded at 2 (exact, and
# the next step bitwise close), re-sharded to 3 (dequantized and quantized
# anew), as fp32 states at 3 (the dequantized values, exact); fp32 states
# saved at 3 loaded as 8-bit at 2.
dir="$work/8bit-saved-by-2"
ZS_CKPT_OPTIMIZER=AdamW8bit "$mpirun" -np 2 "$driver" save "$dir" 1
ZS_CKPT_OPTIMIZER=AdamW8bit "$mpirun" -np 2 "$driver" load "$dir" 3
ZS_CKPT_OPTIMIZER=AdamW8bit "$mpirun" -np 3 "$driver" load "$dir" 2
ZS_CKPT_OPTIMIZER=AdamW "$mpirun" -np 3 "$driver" load "$dir" 0
ZS_CKPT_OPTIMIZER=AdamW8bit "$mpirun" -np 2 "$driver" load "$work/saved-by-3" 1

# bf16 states (round to nearest; stochastic, seeded): saved at 3; loaded as
# bf16 at 3, 2 and 4 (exact at any world size and stage; the next step as
# the saver's), as fp32 states at 2 (widened, exact); fp32 states saved at 3
# loaded as bf16 at 4 (rounded to nearest even).
for opt in AdamWbf16 AdamWbf16sr; do
  dir="$work/$opt-saved-by-3"
  ZS_CKPT_OPTIMIZER=$opt "$mpirun" -np 3 "$driver" save "$dir" 2
  for m in 3 2 4; do
    ZS_CKPT_OPTIMIZER=$opt "$mpirun" -np "$m" "$driver" load "$dir" $(((m + 2) % 4))
  done
done
ZS_CKPT_OPTIMIZER=AdamW "$mpirun" -np 2 "$driver" load "$work/AdamWbf16sr-saved-by-3" 1
ZS_CKPT_OPTIMIZER=AdamWbf16 "$mpirun" -np 4 "$driver" load "$work/saved-by-3" 3

# Kill test: rank 1 pauses in the middle of writing its file of the second
# save; SIGKILL the whole job there.
dir="$work/killed"
ZS_CHECKPOINT_PAUSE_RANK=1 setsid "$mpirun" -np 2 "$driver" pause "$dir" 3 &
job=$!
for _ in $(seq 1 300); do
  if ls "$dir"/.tmp-step-00000003/paused >/dev/null 2>&1; then break; fi
  sleep 0.1
done
if ! ls "$dir"/.tmp-step-00000003/paused >/dev/null 2>&1; then
  echo "the save never reached the pause point"; kill -9 -"$job" || true; exit 1
fi
kill -9 -- -"$job" 2>/dev/null || kill -9 "$job"
wait "$job" 2>/dev/null || true
pkill -9 -f "$driver pause" 2>/dev/null || true
grep -qx "step-00000002" "$dir/latest" || { echo "latest no longer names step-00000002:"; cat "$dir/latest"; exit 1; }
[ ! -e "$dir/step-00000003" ] || { echo "a half-written step-00000003 was renamed into place"; exit 1; }
"$mpirun" -np 3 "$driver" latest "$dir" 2
# Crash points of a re-save of tag "fixed" (after 2 steps, then after 3):
# before the exchange the old checkpoint (2 steps) must load, after it the new one.
for spec in files:2 manifest:2 renamed:3 latest:3; do
  point="${spec%%:*}"; steps="${spec##*:}"
  dir="$work/crash-$point"
  if ZS_CHECKPOINT_CRASH_AT="$point" timeout 300 "$mpirun" -np 2 "$driver" resave "$dir" 2 >/dev/null 2>&1; then
    echo "the re-save did not crash at $point"; exit 1
  fi
  grep -qx "fixed" "$dir/latest" || { echo "crash at $point: latest does not name fixed"; exit 1; }
  [ -f "$dir/fixed/manifest.json" ] || { echo "crash at $point: latest names a missing checkpoint"; exit 1; }
  timeout 300 "$mpirun" -np 3 "$driver" latest "$dir" "$steps" || { echo "crash at $point: wrong checkpoint"; exit 1; }
  timeout 300 "$mpirun" -np 2 "$driver" resave "$dir" 4
  if ls -d "$dir"/.tmp-* "$dir"/.old-* >/dev/null 2>&1; then echo "crash at $point: leftovers not swept"; ls -a "$dir"; exit 1; fi
  timeout 300 "$mpirun" -np 1 "$driver" latest "$dir" 5
done
# The same for an async re-save ([Note: async checkpoint]): killed after its
# snapshot, in the middle of the background write, and in its commit (in the
# next step or in wait_for_checkpoints) before and after the rename (the
# commit's other points run the code of the synchronous save's, above).
for spec in snapshot:2 writing:2 manifest:2 latest:3; do
  point="${spec%%:*}"; steps="${spec##*:}"
  dir="$work/async-crash-$point"
  if ZS_CHECKPOINT_CRASH_AT="$point" timeout 300 "$mpirun" -np 2 "$driver" async-resave "$dir" 2 >/dev/null 2>&1; then
    echo "the async re-save did not crash at $point"; exit 1
  fi
  grep -qx "fixed" "$dir/latest" || { echo "async crash at $point: latest does not name fixed"; exit 1; }
  timeout 300 "$mpirun" -np 3 "$driver" latest "$dir" "$steps" || { echo "async crash at $point: wrong checkpoint"; exit 1; }
  timeout 300 "$mpirun" -np 2 "$driver" async-resave "$dir" 4
  if ls -d "$dir"/.tmp-* "$dir"/.old-* >/dev/null 2>&1; then echo "async crash at $point: leftovers not swept"; ls -a "$dir"; exit 1; fi
  timeout 300 "$mpirun" -np 1 "$driver" latest "$dir" 5
done
echo "checkpoint re-sharding, kill and crash-point tests passed"
