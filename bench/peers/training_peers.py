#!/usr/bin/env python3
"""zeroshard's training jobs against torch DDP and FSDP2 in one run: the
small GPT (examples/gpt) in tokens/s and validation loss, the Fashion-MNIST
MLP (examples/fashion_mnist) in samples/s and test accuracy, each as
zeroshard stage 0, zeroshard stage 3, torch DDP and torch FSDP2 at the same
number of ranks on this machine (issue 34). bench/peers/README.md,
"Training jobs against torch DDP and FSDP2".

The torch rows are the same jobs written in PyTorch (torch_gpt.py and
torch_mlp.py: the same architecture, parameter count, initialisation
distribution, optimizer, clipping, batch and data split; their docstrings
list what matches and what cannot), run by torchrun with the gloo backend
and one thread per process; the zeroshard rows are the examples under
mpirun, one rank per process. All share the machine's cores (with more
ranks than cores mpirun oversubscribes and the MPI ranks yield when idle).

Rounds: each of --rounds rounds runs every row once, in an order rotated
by one row per round (no row always first or last), with the seed
--seeds[round mod len(--seeds)] for all rows of the round, so the rows of a
round share the machine's state and a slow spell of the machine falls on
all of them. A row's throughput is the median over the rounds of its
job's own figure:
  - GPT: tokens/s as examples/gpt prints it, the global batch's tokens over
    the summed time of every step on rank 0 (the first step included, the
    validation pass outside), after --steps optimizer steps; zeroshard
    runs with --eval-every STEPS (one validation pass, at the end), as the
    torch job does.
  - MLP: samples/s as examples/fashion_mnist prints it for its epoch, the
    samples trained over the epoch's training time on rank 0 (evaluation
    outside); one epoch (468 steps at 4 ranks), or --mlp-max-steps.
The ratios are of those medians (zeroshard over torch: stage 3 / DDP, the
issue's goal being >= 1.5, stage 3 / FSDP2, stage 0 / DDP), with the range
of the same ratio taken within each round beside them.

Quality: the GPT's validation loss after --steps steps (the example's 16
validation batches of micro-batch x ranks fixed windows of the held-out 5%
of the fortunes) and the MLP's final test accuracy, per seed (the median
of the rounds run with that seed: a zeroshard build repeats its losses
exactly), then the median over the seeds and their spread (lowest,
highest). Each seed needs a round: --rounds must be at least the number of
--seeds. The torch jobs draw their data and initial values from other
generators than the examples', so a seed gives the two sides different
(equally distributed) runs: compare the medians over seeds, not a seed's
pair.

The header gives the CPU model, the cores, the load average at the start
(and at the end), the torch version and the settings: figures from a
loaded machine are not the quiet-machine figures the issue asks for.

Usage (from the repository root, after a build, with the peers virtual
environment that bench/peers/setup makes at ZEROSHARD_PEERS_VENV or
~/.cache/zeroshard/peers-venv):
  bench/peers/training_peers.py [--build build] [--ranks 4] [--rounds 5]
                                [--steps 200] [--seeds 1 2 3]
                                [--jobs gpt mlp] [--micro-batch 8]
                                [--mlp-micro-batch 32] [--mlp-max-steps 0]
                                [--json FILE]
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cpu_info import cpu_model_and_isa  # noqa: E402  (bench/cpu_info.py)

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, implementation, stage or torch mode) of each row, in the first round's order.
ROWS = [("zeroshard stage 0", "zeroshard", 0), ("zeroshard stage 3", "zeroshard", 3),
        ("torch DDP", "torch", "ddp"), ("torch FSDP2", "torch", "fsdp2")]
# (numerator row, denominator row) of the printed ratios.
RATIOS = [("zeroshard stage 3", "torch DDP"), ("zeroshard stage 3", "torch FSDP2"), ("zeroshard stage 0", "torch DDP")]
GOAL = ("zeroshard stage 3", "torch DDP", 1.5)  # issue 34: stage 3 at >= 1.5x torch DDP


def load_average():
    """The 1, 5 and 15 minute load averages, or None where the system has none."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def venv_python():
    """The peers virtual environment's python and its torch version. Exits
    saying how to get one when it is missing or cannot import torch."""
    venv = os.environ.get("ZEROSHARD_PEERS_VENV") or os.path.expanduser("~/.cache/zeroshard/peers-venv")
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        sys.exit(f"training_peers: no virtual environment at {venv} ({python} is not an executable): create it with "
                 f"bench/peers/setup, or point ZEROSHARD_PEERS_VENV at one with torch and numpy installed")
    done = subprocess.run([python, "-c", "import numpy, torch; print(torch.__version__)"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"training_peers: {python} cannot import torch and numpy (is bench/peers/setup still running, "
                 f"or did it fail?):\n{done.stderr[-1500:]}")
    return python, done.stdout.strip()


def run(cmd, what, report):
    """Runs cmd, which writes `report` when it has finished its work; exits
    with its output's end when it fails before that. A run that fails after
    writing its report (torch 2.15's FSDP2 ranks sometimes abort in their
    teardown: "terminate called without an active exception") keeps its
    figures, with a note on stderr. Returns its wall seconds."""
    if os.path.exists(report):
        os.remove(report)  # a report left by an earlier run must not pass for this one's
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        if not os.path.exists(report):
            sys.exit(f"training_peers: {what}: {' '.join(cmd)} failed (exit {done.returncode}):\n{tail}")
        print(f"training_peers: note: {what} exited with {done.returncode} after writing its report; its figures "
              f"are kept. The end of its output:\n{tail[-600:]}", file=sys.stderr, flush=True)
    return time.perf_counter() - t0


def read_json(path, cmd):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"training_peers: cannot read the report {path} of {' '.join(cmd)}: {e}")


def gpt_run(row, seed, a, tools, report):
    """One GPT run of `row`: {"rate": tokens/s, "quality": validation loss, "median_step_seconds"}."""
    _, impl, how = row
    if impl == "zeroshard":
        cmd = ["mpirun", "-np", str(a.ranks), tools["gpt"], "--stage", str(how), "--steps", str(a.steps),
               "--seed", str(seed), "--micro-batch", str(a.micro_batch), "--eval-every", str(a.steps),
               "--report", report]
    else:
        cmd = [tools["python"], "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.ranks),
               os.path.join(HERE, "torch_gpt.py"), "--mode", how, "--steps", str(a.steps), "--seed", str(seed),
               "--micro-batch", str(a.micro_batch), "--json", report]
    wall = run(cmd, row[0], report)
    r = read_json(report, cmd)
    for key in ("tokens_per_s", "validation_loss"):
        if key not in r:
            sys.exit(f"training_peers: the report of {' '.join(cmd)} has no \"{key}\"")
    return {"rate": r["tokens_per_s"], "quality": r["validation_loss"],
            "median_step_seconds": r.get("median_step_seconds"),
            "parameters": r["model"]["parameters"] if impl == "zeroshard" else r["parameters"], "wall_seconds": wall}


def mlp_run(row, seed, a, tools, report):
    """One MLP run of `row`: {"rate": samples/s, "quality": test accuracy}."""
    _, impl, how = row
    limit = ["--max-steps", str(a.mlp_max_steps)] if a.mlp_max_steps else []
    if impl == "zeroshard":
        cmd = ["mpirun", "-np", str(a.ranks), tools["mlp"], "--stage", str(how), "--epochs", "1", "--seed", str(seed),
               "--micro-batch", str(a.mlp_micro_batch), "--report", report] + limit
    else:
        cmd = [tools["python"], "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.ranks),
               os.path.join(HERE, "torch_mlp.py"), "--mode", how, "--epochs", "1", "--seed", str(seed),
               "--micro-batch", str(a.mlp_micro_batch), "--json", report] + limit
    wall = run(cmd, row[0], report)
    r = read_json(report, cmd)
    epochs = r["run"]["epochs"] if impl == "zeroshard" else r.get("epochs")
    if not epochs or "final_accuracy" not in r:
        sys.exit(f"training_peers: the report of {' '.join(cmd)} has no epoch figures or final_accuracy")
    seconds = sum(e["seconds"] for e in epochs)
    return {"rate": sum(e["samples"] for e in epochs) / seconds, "quality": r["final_accuracy"],
            "steps": sum(e["optimizer_steps"] for e in epochs), "parameters": r["parameters"],
            "wall_seconds": wall}


def measure(job, runner, a, tools, tmp):
    """The rounds of one job; prints a line per run and returns the runs by row name."""
    runs = {name: [] for name, _, _ in ROWS}
    for rnd in range(a.rounds):
        seed = a.seeds[rnd % len(a.seeds)]
        order = ROWS[rnd % len(ROWS):] + ROWS[:rnd % len(ROWS)]
        for row in order:
            r = runner(row, seed, a, tools, os.path.join(tmp, f"{job}.json"))
            r.update(round=rnd + 1, seed=seed)
            runs[row[0]].append(r)
            quality = f"validation loss {r['quality']:.4f}" if job == "gpt" else f"test accuracy {r['quality']:.4f}"
            unit = "tokens/s" if job == "gpt" else "samples/s"
            print(f"  round {rnd + 1} seed {seed:<6} {row[0]:<18} {r['rate']:>9.0f} {unit}  {quality}  "
                  f"({r['wall_seconds']:.0f} s)", flush=True)
    return runs


def summarise(job, runs, a):
    """Medians, per-seed quality and ratios of one job's runs; prints its table."""
    unit, quality = ("tokens/s", "validation loss") if job == "gpt" else ("samples/s", "test accuracy")
    rows = {}
    for name, _, _ in ROWS:
        rs = runs[name]
        by_seed = {str(s): statistics.median(r["quality"] for r in rs if r["seed"] == s) for s in a.seeds}
        rows[name] = {"runs": rs, "median_rate": statistics.median(r["rate"] for r in rs),
                      "rate_range": [min(r["rate"] for r in rs), max(r["rate"] for r in rs)],
                      "quality_by_seed": by_seed, "quality_median": statistics.median(by_seed.values()),
                      "quality_spread": [min(by_seed.values()), max(by_seed.values())]}
    counts = {name: runs[name][0]["parameters"] for name, _, _ in ROWS}
    if len(set(counts.values())) == 1:
        print(f"\n{job}: {counts[ROWS[0][0]]:,} parameters in every row")
    else:
        print(f"\n{job}: warning: the rows' models differ in size: {counts} parameters")
    print(f"{'row':<18} {'median ' + unit:>17} {'lowest':>9} {'highest':>9}   {quality} over seeds "
          f"{' '.join(map(str, a.seeds))}: median (lowest-highest)")
    for name, r in rows.items():
        lo, hi = r["quality_spread"]
        print(f"{name:<18} {r['median_rate']:>17.0f} {r['rate_range'][0]:>9.0f} {r['rate_range'][1]:>9.0f}   "
              f"{r['quality_median']:.4f} ({lo:.4f}-{hi:.4f})")
    ratios = []
    for num, den in RATIOS:
        per_round = [x["rate"] / y["rate"] for x, y in zip(runs[num], runs[den])]
        value = rows[num]["median_rate"] / rows[den]["median_rate"]
        ratios.append({"numerator": num, "denominator": den, "ratio_of_medians": value,
                       "per_round_range": [min(per_round), max(per_round)]})
        print(f"{num} / {den}: {value:.2f}x (per round {min(per_round):.2f}-{max(per_round):.2f})")
    out = {"unit": unit, "quality": quality, "parameters": counts, "rows": rows, "ratios": ratios}
    num, den, goal = GOAL
    value = rows[num]["median_rate"] / rows[den]["median_rate"]
    out["goal"] = {"numerator": num, "denominator": den, "at_least": goal, "ratio": value, "met": value >= goal}
    print(f"goal (issue 34): {num} >= {goal}x {den}: {value:.2f}x, {'met' if value >= goal else 'not met'}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=4, help="ranks (processes) of every row")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200, help="GPT optimizer steps per run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--jobs", nargs="+", choices=["gpt", "mlp"], default=["gpt", "mlp"])
    ap.add_argument("--micro-batch", type=int, default=8, help="GPT sequences per rank and step")
    ap.add_argument("--mlp-micro-batch", type=int, default=32, help="MLP images per rank and step")
    ap.add_argument("--mlp-max-steps", type=int, default=0, help="stop the MLP's epoch after this many steps (0: "
                                                                 "the whole epoch)")
    ap.add_argument("--json", help="write every run's figures and the summaries to this file")
    a = ap.parse_args()
    if a.ranks < 1 or a.rounds < 1 or a.steps < 1 or a.micro_batch < 1 or a.mlp_micro_batch < 1 or a.mlp_max_steps < 0:
        sys.exit("training_peers: --ranks, --rounds, --steps, --micro-batch and --mlp-micro-batch must be >= 1, "
                 "--mlp-max-steps >= 0")
    if len(set(a.seeds)) != len(a.seeds):
        sys.exit(f"training_peers: --seeds {a.seeds} repeats a seed")
    if a.rounds < len(a.seeds):
        sys.exit(f"training_peers: --rounds {a.rounds} is fewer than the {len(a.seeds)} --seeds: each seed's "
                 f"quality figure comes from a round that runs it")
    tools = {"gpt": os.path.join(a.build, "examples", "gpt"), "mlp": os.path.join(a.build, "examples", "fashion_mnist")}
    for job in a.jobs:
        if not os.access(tools[job], os.X_OK):
            sys.exit(f"training_peers: {tools[job]} is not an executable (build first, or give --build)")
    if shutil.which("mpirun") is None:
        sys.exit("training_peers: no mpirun on PATH (the zeroshard rows run under it; install Open MPI)")
    tools["python"], torch_version = venv_python()
    for k, v in {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                 "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
                 "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}.items():
        os.environ.setdefault(k, v)

    cores = os.cpu_count() or 1
    load = load_average()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    machine = {"cpu": cpu_model_and_isa()[0], "cores": cores, "load_average_start": load, "started": started,
               "torch": torch_version}
    print(f"training_peers: {machine['cpu']}; {cores} cores; load average {load} at the start ({started}); "
          f"torch {torch_version} (gloo, 1 thread per process) vs zeroshard ({a.build}, mpirun); {a.ranks} ranks, "
          f"{a.rounds} round{'s' if a.rounds > 1 else ''}, seed{'s' if len(a.seeds) > 1 else ''} "
          f"{' '.join(map(str, a.seeds))}")
    result = {"machine": machine, "settings": {k: getattr(a, k) for k in
                                               ("ranks", "rounds", "steps", "seeds", "jobs", "micro_batch",
                                                "mlp_micro_batch", "mlp_max_steps", "build")}}
    with tempfile.TemporaryDirectory(prefix="zs-training-peers.") as tmp:
        if "gpt" in a.jobs:
            print(f"\nGPT (examples/gpt and torch_gpt.py): 4 layers, 4 heads, width 128, context 64, {a.steps} steps, "
                  f"micro-batch {a.micro_batch} x {a.ranks} ranks x 64 tokens per step")
            runs = measure("gpt", gpt_run, a, tools, tmp)
            result["gpt"] = summarise("gpt", runs, a)
        if "mlp" in a.jobs:
            length = f"{a.mlp_max_steps} steps" if a.mlp_max_steps else "one epoch"
            print(f"\nMLP (examples/fashion_mnist and torch_mlp.py): 784-1024-1024-10, {length}, "
                  f"micro-batch {a.mlp_micro_batch} x {a.ranks} ranks per step")
            runs = measure("mlp", mlp_run, a, tools, tmp)
            result["mlp"] = summarise("mlp", runs, a)
    machine["load_average_end"] = load_average()
    print(f"\nload average {machine['load_average_end']} at the end")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
