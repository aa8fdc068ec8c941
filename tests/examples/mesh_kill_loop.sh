#!/usr/bin/env bash
# Kill -9 during mesh checkpoint saves ([Note: mesh checkpoint commit]): the
# GPT example on 4 ranks saves every step (--save-every 1) at (dp 2, tp 2)
# and (tp 2, pp 2), with --keep-last 1 and 2; each try starts it (resuming
# when the save directory has a commit), waits for a new commit, sleeps a
# random 0-0.4 s (saves take most of a step of this small model) and kills
# one rank, or every rank, with SIGKILL. After
# every try the folders must hold a common step, and the next run must
# resume from the newest step every folder holds; a last resume of each
# mesh must load and evaluate. Prints one line per try and the counts.
# Usage: mesh_kill_loop.sh MPIRUN GPT WORKDIR [TRIES] (TRIES default 4)
set -uo pipefail
mpirun="$1"; gpt="$2"; work="$3"; tries="${4:-4}"
rm -rf "$work"; mkdir -p "$work"
# shellcheck source=tests/examples/script_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_checks.sh"
small=(--layers 2 --dim 32 --heads 2 --seq 16 --eval-every 100000 --eval-batches 1)
folders_dp2tp2=(tp-00 tp-01)
folders_tp2pp2=(pp-00/tp-00 pp-00/tp-01 pp-01/tp-00 pp-01/tp-01)

# The steps (as numbers) every folder of mesh $1 in $2 holds with a manifest, newest last.
common_steps() {
  local -n folders="folders_$1"
  local dir="$2" f first=1 set=""
  for f in "${folders[@]}"; do
    local mine
    mine=$(for m in "$dir/$f"/step-*/manifest.json; do [ -f "$m" ] && basename "$(dirname "$m")"; done | sort)
    if [ "$first" = 1 ]; then set="$mine"; first=0; else set=$(comm -12 <(echo "$set") <(echo "$mine")); fi
  done
  echo "$set" | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n
}

resumed=0; killed_one=0; killed_all=0
for ((i = 0; i < tries; i++)); do
  mesh=$([ $((i % 2)) = 0 ] && echo dp2tp2 || echo tp2pp2)
  # Every pair of (mesh, keep-last, kill) settings within 4 tries, all 8
  # combinations within 8.
  keep=$((1 + (i / 2) % 2))
  mode=$([ $(((i + i / 2 + i / 4) % 2)) = 0 ] && echo one || echo all)
  dir="$work/ckpt-$mesh"
  mesh_args=(--tp 2); [ "$mesh" = tp2pp2 ] && mesh_args+=(--pp 2)
  resume=(); before=""
  if [ -f "$dir/latest" ]; then
    resume=(--resume); before=$(cat "$dir/latest")
    newest=$(common_steps "$mesh" "$dir" | tail -1)
    [ -n "$newest" ] || fail "try $i: no step is in every folder of $dir"
  fi
  log="$work/try-$i.log"
  "$mpirun" -np 4 "$gpt" "${small[@]}" "${mesh_args[@]}" --save-dir "$dir" --save-every 1 --keep-last "$keep" \
    --steps 100000 "${resume[@]}" >"$log" 2>&1 &
  job=$!
  # Wait (at most 60 s) for a commit of this run: `latest` naming another step.
  for ((w = 0; w < 600; w++)); do
    [ -f "$dir/latest" ] && [ "$(cat "$dir/latest" 2>/dev/null)" != "$before" ] && break
    kill -0 "$job" 2>/dev/null || { cp "$log" "$work/out"; fail "try $i: the run ended before a commit"; }
    sleep 0.1
  done
  [ "$w" -lt 600 ] || { kill -9 "$job"; cp "$log" "$work/out"; fail "try $i: no commit within 60 s"; }
  if [ ${#resume[@]} -gt 0 ]; then
    cp "$log" "$work/out"
    expect "resumed from $dir at step $newest"
    resumed=$((resumed + 1))
  fi
  sleep "0.$((RANDOM % 5))"
  ranks=$(pgrep -P "$job" -d ' ')  # mpirun's children: the 4 ranks
  [ -n "$ranks" ] || { cp "$log" "$work/out"; fail "try $i: no rank to kill"; }
  if [ "$mode" = one ]; then
    # shellcheck disable=SC2086
    victim=$(echo $ranks | tr ' ' '\n' | shuf -n 1)
    kill -9 "$victim"; killed_one=$((killed_one + 1))
  else
    # shellcheck disable=SC2086
    kill -9 $ranks; killed_all=$((killed_all + 1))
  fi
  # mpirun ends the job after a rank dies; give it 30 s.
  for ((w = 0; w < 300; w++)); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "try $i: mpirun still running 30 s after the kill"; }
  wait "$job" 2>/dev/null
  steps=$(common_steps "$mesh" "$dir" | tr '\n' ' ')
  [ -n "$steps" ] || fail "try $i ($mesh, keep-last $keep, kill $mode): no step is in every folder"
  echo "try $i: $mesh keep-last $keep kill $mode: common steps after the kill: $steps(latest $(cat "$dir/latest"))"
done
# Each mesh resumes once more (no steps left to run) from the newest common step.
for mesh in dp2tp2 tp2pp2; do
  dir="$work/ckpt-$mesh"
  [ -d "$dir" ] || continue
  mesh_args=(--tp 2); [ "$mesh" = tp2pp2 ] && mesh_args+=(--pp 2)
  newest=$(common_steps "$mesh" "$dir" | tail -1)
  run 0 "$mpirun" -np 4 "$gpt" "${small[@]}" "${mesh_args[@]}" --save-dir "$dir" --steps 1 --resume
  expect "resumed from $dir at step $newest"
  expect "no steps to run"
  resumed=$((resumed + 1))
done
echo "mesh_kill_loop: ok: $tries tries ($killed_one killed one rank, $killed_all killed every rank), $resumed resumes, each from the newest step every folder held"
