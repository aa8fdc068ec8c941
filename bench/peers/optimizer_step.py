#!/usr/bin/env python3
"""zeroshard's CPU AdamW step against torch.optim.AdamW(fused=True) and
DeepSpeed's DeepSpeedCPUAdam, measured side by side in one run
(bench/peers/README.md, "Optimizer step (optimizer_step.py)").

Rows, per thread count, all with lr 1e-3, betas 0.9/0.999, eps 1e-8 and
weight decay 0.01 (bench_adam's hyperparameters):
  torch fp32      torch.optim.AdamW(fused=True) over one flat fp32 parameter
                  with an fp32 gradient; fp32 exp_avg, exp_avg_sq (28 B/param)
  torch bf16      the same over a bf16 parameter and gradient: torch keeps
                  exp_avg and exp_avg_sq in bf16 as well (the parameter's
                  dtype), computes each element in fp32 and rounds the three
                  results to bf16 (14 B/param)
  DeepSpeed fp32  deepspeed.ops.adam.DeepSpeedCPUAdam(adamw_mode=True), fp32
                  parameter, gradient and states (28 B/param)
  zeroshard       every row of BUILD/bench/adam/bench_adam --sizes N
                  --threads T --iters K: fp32 (SIMD), bf16 gradient + bf16
                  copy, 8-bit states (block 256, 2048), bf16 states (nearest,
                  stochastic), the scalar reference and the limit pass (4 reads
                  + 3 writes of fp32 arrays), with its bytes models
                  (bench/adam/README.md)

Method. Each measurement is its own subprocess, started with
OMP_NUM_THREADS = MKL_NUM_THREADS = T (torch also torch.set_num_threads(T),
bench_adam --threads T): it allocates the tensors, fills the parameter and
the gradient (touching every page), runs one warm-up step (which creates and
writes the optimizer states), then times K steps and reports their median.
bench_adam times its rows interleaved iteration by iteration in one process
and reports each row's median of K. The measurements run in R interleaved
rounds: round r runs every (threads, implementation) once, in the order
rotated by r, so that a busy phase of a shared machine falls on all rows
alike. The table gives each round's median, the median over the rounds,
Mparams/s, and two ratios of speed (the reference's time / the row's time):
  vs peer  the faster of torch fp32 and DeepSpeed fp32 at the same threads
  vs fp32  zeroshard's AdamW fp32 (SIMD) row at the same threads
and checks issue 34's goals: zeroshard fp32 >= 1.1x the faster peer; 8-bit
states >= 0.8x (AVX2) / 1.0x (AVX-512) of zeroshard fp32; bf16 states
>= 1.0x of it.

The peers run with the Python of the virtual environment that
bench/peers/setup makes (ZEROSHARD_PEERS_VENV, default
~/.cache/zeroshard/peers-venv); this script itself needs only the standard
library. DeepSpeed compiles its C++ op (cpu_adam) on first use, into
VENV/torch-extensions unless TORCH_EXTENSIONS_DIR is set: that happens once,
before anything is timed.

--isa avx2 restricts every implementation to AVX2 on a machine with
AVX-512: bench_adam --target AVX2, torch with ATEN_CPU_CAPABILITY=avx2, and
DeepSpeed's cpu_adam compiled a second time, with -march=haswell and
-D__AVX256__ (its choice on a CPU without AVX-512), into
VENV/torch-extensions-avx2. The same instructions as on an AVX2 machine, on
this machine's cores, caches and memory.

Usage (from anywhere, after bench/peers/setup and a build of bench_adam):
  bench/peers/optimizer_step.py [--params 100000000] [--threads 1 2] [--isa native|avx2]
                                [--rounds 3] [--iters 5]
                                [--peers torch-fp32 torch-bf16 deepspeed-fp32]
                                [--build BUILD] [--bench-adam PATH]
                                [--python VENV/bin/python] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cpu_info import cpu_model_and_isa  # noqa: E402  (bench/cpu_info.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01
PEERS = {  # name: (label in the table, bytes model per parameter)
    "torch-fp32": ("torch AdamW fused fp32", 28.0),
    "torch-bf16": ("torch AdamW fused bf16 (states bf16)", 14.0),
    "deepspeed-fp32": ("DeepSpeedCPUAdam fp32", 28.0),
}
FAST_PEERS = ["torch-fp32", "deepspeed-fp32"]  # the peers "vs peer" is taken against
ZS_FP32 = "AdamW fp32 (SIMD)"  # bench_adam's row names
ZS_8BIT = ["AdamW 8-bit states, block 256", "AdamW 8-bit states, block 2048"]
ZS_BF16_STATES = ["AdamW bf16 states, nearest", "AdamW bf16 states, stochastic"]
RESULT = "optimizer_step-result: "  # the line a worker reports on


# --- the workers: one measurement each, run with the venv's Python ----------

def worker_probe():
    """Reports the peers' versions and instruction sets without importing deepspeed."""
    try:
        import torch
    except ImportError as e:
        sys.exit(str(e))
    from importlib import metadata
    try:
        deepspeed = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        deepspeed = None
    return {"python": sys.executable, "prefix": sys.prefix, "venv": sys.prefix != sys.base_prefix,
            "torch": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "deepspeed": deepspeed}


def deepspeed_builder():
    """DeepSpeed's CPUAdamBuilder; with ZS_PEERS_ISA=avx2, one that compiles for
    AVX2 (the flags DeepSpeed picks on a CPU without AVX-512)."""
    from deepspeed.ops.op_builder import CPUAdamBuilder
    if os.environ.get("ZS_PEERS_ISA") == "avx2":
        CPUAdamBuilder.cpu_arch = lambda self: "-march=haswell"
        CPUAdamBuilder.simd_width = lambda self: "-D__AVX256__"
    return CPUAdamBuilder


def worker_deepspeed_build():
    """Compiles (or finds) DeepSpeed's cpu_adam op; reports the flags it was built with."""
    builder = deepspeed_builder()()
    builder.load(verbose=False)
    return {"flags": f"{builder.cpu_arch()} {builder.simd_width()}"}


def worker_step(peer, n, threads, iters):
    """Times `iters` steps of one peer over n parameters after one warm-up step."""
    import torch
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if peer == "torch-bf16" else torch.float32
    gen = torch.Generator().manual_seed(1)
    param = torch.nn.Parameter(torch.empty(n, dtype=dtype).uniform_(-1.0, 1.0, generator=gen))
    param.grad = torch.empty(n, dtype=dtype).uniform_(-1e-3, 1e-3, generator=gen)
    if peer.startswith("torch"):
        opt = torch.optim.AdamW([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                                fused=True)
    else:
        deepspeed_builder()  # the ISA's flags, before the op loads
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                               adamw_mode=True)
    opt.step()  # warm-up: creates and writes exp_avg and exp_avg_sq
    state = opt.state[param]
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.step()
        ms.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(ms), "ms": ms, "threads": torch.get_num_threads(),
            "state_dtype": str(state["exp_avg"].dtype).replace("torch.", "")}


def run_worker(a):
    """The --worker mode: one probe, build or measurement, reported on one RESULT line."""
    if a.worker == "probe":
        out = worker_probe()
    elif a.worker == "deepspeed-build":
        out = worker_deepspeed_build()
    else:
        out = worker_step(a.worker, a.params, a.threads[0], a.iters)
    print(RESULT + json.dumps(out), flush=True)


# --- the driver -------------------------------------------------------------

def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def pins():
    """The name==version lines of requirements.txt beside this script."""
    out = {}
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements.txt")) as f:
            for line in f:
                name, sep, version = line.split("#")[0].strip().partition("==")
                if sep:
                    out[name] = version
    except OSError:
        pass
    return out


def call_worker(python, name, env, failure, args=()):
    """Runs one worker of this script under the venv's Python; returns its report,
    or exits with `failure` and the worker's last output."""
    cmd = [python, os.path.abspath(__file__), "--worker", name] + [str(x) for x in args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        sys.exit(f"optimizer_step: {failure}.\n{' '.join(cmd)} exited with {done.returncode}; "
                 f"its last output:\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(lines[-1][len(RESULT):])


def worker_env(threads, probe, isa="native"):
    """A peer worker's environment: its thread count, DeepSpeed's CPU accelerator
    (whatever GPUs the machine has), its compiled ops kept in the venv (one
    folder per ISA) and, with isa "avx2", torch and DeepSpeed held to AVX2."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env["DS_ACCELERATOR"] = "cpu"
    extensions = "torch-extensions"
    if isa == "avx2":
        env["ATEN_CPU_CAPABILITY"] = "avx2"
        env["ZS_PEERS_ISA"] = "avx2"
        extensions += "-avx2"
    if probe["venv"]:
        env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(probe["prefix"], extensions))
    return env


def run_bench_adam(bench_adam, n, threads, iters, isa="native"):
    """bench_adam's rows at one size and thread count: (SIMD target, [(row, B/param, ms)])."""
    cmd = [bench_adam, "--sizes", str(n), "--threads", str(threads), "--iters", str(iters)]
    if isa == "avx2":
        cmd += ["--target", "AVX2"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"optimizer_step: {' '.join(cmd)} failed (exit {done.returncode}):\n"
                 f"{(done.stderr + done.stdout)[-2000:]}")
    target, rows = None, []
    for line in done.stdout.splitlines():
        if line.startswith("bench_adam:") and "SIMD target " in line:
            target = line.split("SIMD target ", 1)[1].split(";", 1)[0].strip()
            continue
        words = line.split()
        if len(words) < 10 or words[1] != str(threads):
            continue
        try:
            numbers = [float(w) for w in words[-7:]]
        except ValueError:
            continue
        rows.append((" ".join(words[2:-7]), numbers[0], numbers[1]))
    if target is None or ZS_FP32 not in [r[0] for r in rows]:
        sys.exit(f"optimizer_step: no SIMD target or no '{ZS_FP32}' row in the output of "
                 f"{' '.join(cmd)}:\n{done.stdout[-2000:]}")
    return target, rows


def shown_path(path):
    """A path under the repository relative to its root, any other as given."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else path


def count_name(n):
    return f"{n // 1000000}M" if n % 1000000 == 0 else str(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=int, default=100_000_000, help="parameters per step (default 100M)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--iters", type=int, default=5, help="timed steps per measurement, median (default 5)")
    ap.add_argument("--peers", nargs="+", choices=list(PEERS), default=list(PEERS),
                    help="peer rows to run (default: all)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="zeroshard's build directory")
    ap.add_argument("--bench-adam", help="bench_adam's binary (default: BUILD/bench/adam/bench_adam)")
    ap.add_argument("--python", help="the peers' Python (default: $ZEROSHARD_PEERS_VENV/bin/python, "
                    "ZEROSHARD_PEERS_VENV defaulting to ~/.cache/zeroshard/peers-venv)")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="native: each implementation's best; avx2: all held to AVX2 (see above)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.params < 1 or a.rounds < 1 or a.iters < 1 or any(t < 1 for t in a.threads):
        sys.exit(f"optimizer_step: --params, --rounds, --iters and --threads must be >= 1 "
                 f"(got {a.params}, {a.rounds}, {a.iters}, {a.threads})")
    if a.worker:
        run_worker(a)
        return
    a.threads, a.peers = list(dict.fromkeys(a.threads)), list(dict.fromkeys(a.peers))

    venv = os.environ.get("ZEROSHARD_PEERS_VENV", os.path.expanduser("~/.cache/zeroshard/peers-venv"))
    python = a.python or os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        sys.exit(f"optimizer_step: no virtual environment with torch and DeepSpeed: {python} does not exist.\n"
                 f"Create it with bench/peers/setup (or set ZEROSHARD_PEERS_VENV / give --python).")
    bench_adam = a.bench_adam or os.path.join(a.build, "bench", "adam", "bench_adam")
    if not os.access(bench_adam, os.X_OK):
        sys.exit(f"optimizer_step: bench_adam is not built: {bench_adam} is not an executable.\n"
                 f"Build it from the repository root with: meson setup build -Dbuildtype=release && "
                 f"ninja -C build bench/adam/bench_adam (or give --build / --bench-adam).")

    probe_env = dict(os.environ, **({"ATEN_CPU_CAPABILITY": "avx2"} if a.isa == "avx2" else {}))
    probe = call_worker(python, "probe", probe_env,
                        f"torch is not importable by {python}: (re)install it with bench/peers/setup")
    if "deepspeed-fp32" in a.peers and probe["deepspeed"] is None:
        sys.exit(f"optimizer_step: deepspeed is not installed in {probe['prefix']}: run bench/peers/setup, "
                 f"or leave it out with --peers torch-fp32 torch-bf16")
    wanted = pins()
    for name in ("torch", "deepspeed"):
        have = probe[name]
        if have is not None and name in wanted and have.split("+")[0] != wanted[name]:
            print(f"optimizer_step: note: {name} {have} in {probe['prefix']}, requirements.txt pins "
                  f"{wanted[name]} (bench/peers/setup installs it)", file=sys.stderr)
    ds_flags = None
    if "deepspeed-fp32" in a.peers:
        print("optimizer_step: compiling or loading DeepSpeed's cpu_adam op (the first time: a minute or two)",
              file=sys.stderr, flush=True)
        ds_flags = call_worker(
            python, "deepspeed-build", worker_env(1, probe, a.isa),
            "DeepSpeed's cpu_adam op did not build or load (DeepSpeed compiles it with g++ and ninja against "
            "the Python.h of the Python that made the venv); leave DeepSpeed out with "
            "--peers torch-fp32 torch-bf16")["flags"]

    model, isa = cpu_model_and_isa()
    load_before = load_average()
    units = [(t, impl) for t in a.threads for impl in a.peers + ["zeroshard"]]
    times = {}  # (threads, impl, row) -> [ms per round]
    bytes_model = {}
    target = None
    t_start = time.monotonic()
    for r in range(a.rounds):
        shift = r % len(units)
        for threads, impl in units[shift:] + units[:shift]:
            t0 = time.monotonic()
            if impl == "zeroshard":
                target, rows = run_bench_adam(bench_adam, a.params, threads, a.iters, a.isa)
                for row, bpp, ms in rows:
                    times.setdefault((threads, impl, row), []).append(ms)
                    bytes_model[(impl, row)] = bpp
                shown = dict((row, ms) for row, _, ms in rows)[ZS_FP32]
                label = f"zeroshard fp32 (and {len(rows) - 1} other rows)"
            else:
                rep = call_worker(python, impl, worker_env(threads, probe, a.isa),
                                  f"the {impl} measurement at {threads} thread(s) failed",
                                  ["--params", a.params, "--threads", threads, "--iters", a.iters])
                if rep["threads"] != threads:
                    sys.exit(f"optimizer_step: the {impl} worker ran {rep['threads']} threads, not {threads}")
                times.setdefault((threads, impl, PEERS[impl][0]), []).append(rep["median_ms"])
                bytes_model[(impl, PEERS[impl][0])] = PEERS[impl][1]
                shown, label = rep["median_ms"], f"{impl} ({rep['state_dtype']} states)"
            print(f"optimizer_step: round {r + 1}/{a.rounds}, {threads} thread(s): {label}: "
                  f"{shown:.2f} ms ({time.monotonic() - t0:.1f} s)", file=sys.stderr, flush=True)
    elapsed, load_after = time.monotonic() - t_start, load_average()

    date = time.strftime("%Y-%m-%d %H:%M %Z")
    held = "; every implementation held to AVX2 (--isa avx2)" if a.isa == "avx2" else ""
    print(f"optimizer_step: {date}; {model} ({isa}){held}; {os.cpu_count()} hardware threads; "
          f"load average {load_before} before, {load_after} after; {elapsed:.0f} s")
    print(f"{count_name(a.params)} parameters; {a.rounds} interleaved round(s), each measurement its own process, "
          f"median of {a.iters} steps after 1 warm-up; lr {LR}, betas {BETAS[0]}/{BETAS[1]}, eps {EPS}, "
          f"weight decay {WEIGHT_DECAY}")
    print(f"zeroshard: {shown_path(bench_adam)}, SIMD target {target}; torch {probe['torch']} "
          f"(CPU capability {probe['torch_cpu_capability']})"
          + (f"; DeepSpeed {probe['deepspeed']} (cpu_adam built with {ds_flags})" if ds_flags else "")
          + f"; peers' Python {probe['python']}")
    print("vs peer = time of the faster of torch fp32 and DeepSpeed fp32 / time of the row; "
          "vs fp32 = time of zeroshard AdamW fp32 (SIMD) / time of the row")
    print()
    head = " ".join(f"{f'r{i + 1} ms':>9}" for i in range(a.rounds))
    print(f"{'params':>6} {'threads':>7}  {'row':<48} {'B/param':>7} {head} {'median ms':>9} "
          f"{'Mparams/s':>9} {'GB/s':>6} {'vs peer':>7} {'vs fp32':>7}")
    results, goals, goal_lines = [], [], []
    for threads in a.threads:
        med = {(impl, row): statistics.median(v) for (t, impl, row), v in times.items() if t == threads}
        peer_ms = {impl: med[(impl, PEERS[impl][0])] for impl in FAST_PEERS if impl in a.peers}
        best = min(peer_ms, key=peer_ms.get) if peer_ms else None
        zs_fp32 = med[("zeroshard", ZS_FP32)]
        for (impl, row), ms in med.items():
            vs_peer = peer_ms[best] / ms if best else None
            label = row if impl != "zeroshard" else f"zeroshard {row}"
            bpp = bytes_model[(impl, row)]
            rounds = times[(threads, impl, row)]
            results.append({"params": a.params, "threads": threads, "impl": impl, "row": row,
                            "bytes_per_param": bpp, "round_ms": rounds, "median_ms": ms,
                            "mparams_per_s": a.params / ms / 1e3, "vs_faster_peer": vs_peer,
                            "vs_zeroshard_fp32": zs_fp32 / ms})
            print(f"{count_name(a.params):>6} {threads:>7}  {label:<48} {bpp:>7.2f} "
                  + " ".join(f"{x:>9.2f}" for x in rounds)
                  + f" {ms:>9.2f} {a.params / ms / 1e3:>9.0f} {bpp * a.params / ms / 1e6:>6.1f}"
                  + (f" {vs_peer:>7.2f}" if vs_peer else f" {'-':>7}") + f" {zs_fp32 / ms:>7.2f}")

        def goal(what, value, need, basis):
            goals.append({"threads": threads, "goal": what, "value": value, "need": need, "met": value >= need})
            goal_lines.append(f"{threads:>7}  {what + ':':<64} {value:>5.2f}x  goal >= {need:.2f}x{basis:<16} "
                              f"{'met' if value >= need else 'NOT met'}")
        if best:
            goal(f"zeroshard fp32 vs the faster peer ({PEERS[best][0]})", peer_ms[best] / zs_fp32, 1.1, "")
        eight_bit_need = 1.0 if target.startswith("AVX3") else 0.8 if target.startswith("AVX2") else None
        for row in ZS_8BIT:
            if ("zeroshard", row) in med and eight_bit_need is not None:
                goal(f"{row} vs zeroshard fp32", zs_fp32 / med[("zeroshard", row)], eight_bit_need,
                     " (AVX-512)" if eight_bit_need == 1.0 else " (AVX2)")
        for row in ZS_BF16_STATES:
            if ("zeroshard", row) in med:
                goal(f"{row} vs zeroshard fp32", zs_fp32 / med[("zeroshard", row)], 1.0, "")
    print(f"\ngoals of issue 34 (medians over the rounds; {target} is zeroshard's SIMD target):")
    print(f"{'threads':>7}  {'ratio':<64} {'value':>6}")
    print("\n".join(goal_lines))

    if a.json:
        out = {"date": date, "cpu": model, "cpu_isa": isa, "hardware_threads": os.cpu_count(),
               "load_average": [load_before, load_after], "params": a.params, "threads": a.threads,
               "rounds": a.rounds, "iters": a.iters, "seconds": elapsed,
               "zeroshard": {"bench_adam": shown_path(bench_adam), "simd_target": target},
               "torch": {"version": probe["torch"], "cpu_capability": probe["torch_cpu_capability"]},
               "deepspeed": {"version": probe["deepspeed"], "cpu_adam_flags": ds_flags} if ds_flags else None,
               "hyperparameters": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY},
               "rows": results, "goals": goals}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
