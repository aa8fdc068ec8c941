#!/usr/bin/env python3
"""The main job's step in a loop: Fashion-MNIST (examples/fashion_mnist) at
1 and 4 ranks, ZeRO stages 0 and 3, with the step breakdown on
([Note: step breakdown] in runtime/observe/step_breakdown.h). bench/step/README.md,
"The main job's step (main_job.py)".

Each (ranks, stage) runs the job for WARMUP + STEPS optimizer steps and
takes, per breakdown field, the median over the STEPS steps after the
warm-up of rank 0's per-step figures (the report's "step_breakdown_ms"):
wall, compute (the loop's forward/loss/backward spans), comm_wait,
optimizer, other, hidden_comm, in ms per step; samples/s = global batch /
median wall. The CPU time of all ranks per step comes from a second run of
WARMUP steps: the difference of the two runs' CPU seconds over STEPS (start-
up, the first steps and the final evaluation cancel). The limit, measured in
the same runs: that CPU time spread over min(ranks, cores) cores, the step's
wall time if the cores never idled (ratio = limit / wall; 1.0 means every
core was busy the whole step).

The reduce-order check ([Note: reduce order check]) is measured beside it
by bench_order_check at the same ranks, with the job's units (one per
layer) and one micro-batch: "check" is its cost per step (host calls plus
the norm exchange's 4 extra doubles per rank) as a percentage of wall.

With --overlap on/off the job runs the same settings as its defaults
(AdamW lr 1e-3, weight decay 0.01, clipping 1, micro-batch 32) from a
ds_config with zero_optimization.overlap_comm set; "default" leaves
DeepSpeed's default (off at stages 0-2, on at stage 3).

Usage (from the repository root, after a build):
  bench/step/main_job.py [--build build] [--ranks 1 4] [--stages 0 3]
                         [--overlap default on off] [--warmup 50]
                         [--steps 200] [--hidden W,W] [--program PATH]
                         [--order-check PATH]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cpu_info import cpu_model_and_isa  # noqa: E402  (bench/cpu_info.py)

FIELDS = ["wall", "compute", "comm_wait", "optimizer", "other", "hidden_comm"]


def run_job(program, ranks, stage, steps, report, extra):
    """Runs the job; returns (rank 0's per-step breakdown rows, CPU seconds of all ranks)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = ["mpirun", "-np", str(ranks), program, "--stage", str(stage), "--epochs", "1",
           "--max-steps", str(steps), "--breakdown", "--report", report] + extra
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"main_job: {' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(report) as f:
        run = json.load(f)["run"]
    if "step_breakdown_ms" not in run:
        sys.exit(f"main_job: {report} has no run.step_breakdown_ms: {program} predates the per-step "
                 f"breakdown in its report")
    names, rows = run["step_breakdown_fields"], run["step_breakdown_ms"]
    if len(rows) != steps:
        sys.exit(f"main_job: the report of {' '.join(cmd)} has {len(rows)} steps, expected {steps} "
                 f"(an epoch is shorter? lower --warmup/--steps)")
    return [dict(zip(names, r)) for r in rows], cpu


def order_check_us(bench, ranks, units):
    """bench_order_check's total cost of the reduce-order check per step (us)."""
    cmd = ["mpirun", "-np", str(ranks), bench, "--units", str(units)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"main_job: {' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    words = done.stdout.split()
    try:
        return float(words[words.index("total") + 1])
    except (ValueError, IndexError):
        sys.exit(f"main_job: no total in the output of {' '.join(cmd)}: {done.stdout[-500:]}")


def write_config(path, micro_batch, overlap):
    """The job's default settings as a ds_config, with overlap_comm set."""
    config = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_clipping": 1.0, "steps_per_print": 100,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                                                        "weight_decay": 0.01}},
              "zero_optimization": {"overlap_comm": overlap}}
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--program", help="the job's binary (default: BUILD/examples/fashion_mnist)")
    ap.add_argument("--order-check", help="bench_order_check's binary (default: BUILD/bench/step/bench_order_check)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--stages", type=int, nargs="+", default=[0, 3])
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--hidden", help="the job's hidden layer widths (default: its own, 1024,1024)")
    ap.add_argument("--overlap", nargs="+", choices=["default", "on", "off"], default=["default"])
    a = ap.parse_args()
    if a.warmup < 1 or a.steps < 1:
        sys.exit("main_job: --warmup and --steps must be >= 1")
    if any(r < 1 for r in a.ranks) or any(not 0 <= st <= 3 for st in a.stages) or a.micro_batch < 1:
        sys.exit(f"main_job: --ranks must be >= 1 (got {a.ranks}), --stages in 0-3 (got {a.stages}), "
                 f"--micro-batch >= 1 (got {a.micro_batch})")
    program = a.program or os.path.join(a.build, "examples", "fashion_mnist")
    checker = a.order_check or os.path.join(a.build, "bench", "step", "bench_order_check")
    for exe in (program, checker):
        if not os.access(exe, os.X_OK):
            sys.exit(f"main_job: {exe} is not an executable (build first, or give --build / --program)")
    units = len((a.hidden if a.hidden is not None else "1024,1024").split(",")) + 1
    for k, v in {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                 "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
                 "OPENBLAS_NUM_THREADS": "1"}.items():
        os.environ.setdefault(k, v)
    cores = os.cpu_count() or 1
    model, isa = cpu_model_and_isa()
    print(f"main_job: {program}; {model} ({isa}); {cores} cores; {a.warmup} warm-up steps, "
          f"then {a.steps} steps timed (difference of two runs); micro-batch {a.micro_batch} per rank")
    print("ms per step: rank 0's median over the timed steps; cpu = all ranks' CPU time per step; "
          "limit = cpu / min(ranks, cores); ratio = limit / wall")
    print(f"{'ranks':>5} {'stage':>5} {'overlap':>7} {'samples/s':>10} " + " ".join(f"{k:>11}" for k in FIELDS) +
          f" {'cpu':>8} {'limit':>8} {'ratio':>6} {'check':>7}")
    with tempfile.TemporaryDirectory(prefix="zs-main-job.") as tmp:
        for ranks in a.ranks:
            check_ms = order_check_us(checker, ranks, units) / 1000
            for stage in a.stages:
                for overlap in a.overlap:
                    extra = ["--micro-batch", str(a.micro_batch)]
                    if overlap != "default":
                        extra = ["--config", write_config(f"{tmp}/ds_config.json", a.micro_batch, overlap == "on")]
                    if a.hidden is not None:
                        extra += ["--hidden", a.hidden]
                    rows, cpu_long = run_job(program, ranks, stage, a.warmup + a.steps, f"{tmp}/a.json", extra)
                    _, cpu_short = run_job(program, ranks, stage, a.warmup, f"{tmp}/b.json", extra)
                    per = {k: statistics.median(r[k] for r in rows[a.warmup:]) for k in FIELDS}
                    if not (per["wall"] > 0 and per["compute"] > 0 and all(v >= 0 for v in per.values())):
                        sys.exit(f"main_job: implausible breakdown at {ranks} ranks, stage {stage}: {per}")
                    cpu_ms = (cpu_long - cpu_short) / a.steps * 1000
                    limit = cpu_ms / min(ranks, cores)
                    samples = ranks * a.micro_batch / (per["wall"] / 1000)
                    print(f"{ranks:>5} {stage:>5} {overlap:>7} {samples:>10.0f} " +
                          " ".join(f"{per[k]:>11.2f}" for k in FIELDS) +
                          f" {cpu_ms:>8.2f} {limit:>8.2f} {limit / per['wall']:>6.2f}"
                          f" {100 * check_ms / per['wall']:>6.3f}%", flush=True)


if __name__ == "__main__":
    main()
