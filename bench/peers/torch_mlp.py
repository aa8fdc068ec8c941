#!/usr/bin/env python3
"""examples/fashion_mnist's job in PyTorch, trained data-parallel with torch
DDP or FSDP2 on the CPU (gloo): the torch rows of training_peers.py's MLP
table. Run it under torchrun, one process per rank, each with one thread:

  python -m torch.distributed.run --standalone --nproc-per-node 4 \\
      bench/peers/torch_mlp.py --mode ddp --epochs 1 --json out.json

The model is examples/fashion_mnist/mlp.h's at its defaults: Linear layers
784-1024-1024-10 with ReLU between them, weights and biases drawn from
U(-1/sqrt(in), 1/sqrt(in)) as Mlp::initialize draws them (torch's
generator, so not the same values), the mean cross-entropy over a
micro-batch. The optimizer is the example's default configuration
(examples/job_config.h, adamw_job_defaults(32, 1e-3, 0.999, 0.01)): AdamW
lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on the weights and 0
on the biases (the example's "no_decay" group), constant lr, the
gradient's global norm clipped to 1; torch.optim.AdamW(fused=True).
Micro-batch 32 per rank, no accumulation.

The data are the example's: the gzip IDX files of --data-dir (the
example's default /usr/share/datasets/fashion-mnist, which scripts/bootstrap
installs), pixels as byte / 255. Each epoch every rank draws the same
permutation of the 60,000 training images and takes its rows of each
global batch (micro-batch x world consecutive samples of it; the last
incomplete global batch dropped), as examples/fashion_mnist/data_parallel.h
lays them out; the permutation comes from numpy's generator, so the order
differs from the example's. After each epoch each rank evaluates its
balanced contiguous slice of the 10,000 test images in batches of 1000 and
the counts are summed over the ranks (Trainer::evaluate_test).

samples/s is measured as the example measures it: the samples trained over
all ranks in the epoch over the epoch's training time on rank 0's clock
(from its first step to its last, evaluation outside); over several epochs
the totals of both. --max-steps stops early (smoke runs).

--json FILE (rank 0) writes mode, seed, world_size, parameters, the
per-epoch figures ("epochs": samples, seconds, samples_per_second,
train_loss, test_loss, test_accuracy, as the example's report's
run.epochs), samples_per_second (all epochs), final_accuracy and
optimizer_steps.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

TRAIN_IMAGES = 60000


def read_idx(path, magic):
    """The elements of a gzip IDX file of unsigned bytes with this magic
    number, shaped by its dimensions. Exits naming the file when it is
    missing or not such a file."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit(f"torch_mlp: cannot read {path}: {e} (the Fashion-MNIST files; scripts/bootstrap installs them)")
    if len(data) < 4 or int.from_bytes(data[:4], "big") != magic:
        sys.exit(f"torch_mlp: {path}: not an IDX file with magic 0x{magic:08x}")
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims)
    if body.size != math.prod(dims):
        sys.exit(f"torch_mlp: {path}: {body.size} bytes of elements, its header says {math.prod(dims)}")
    return body.reshape(dims)


def load_split(folder, prefix):
    """(images [n, 784] float32 in [0, 1], labels [n] int64) of one split."""
    images = read_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), 0x803)
    labels = read_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), 0x801)
    if images.shape[0] != labels.shape[0]:
        sys.exit(f"torch_mlp: {folder}: {images.shape[0]} {prefix} images but {labels.shape[0]} labels")
    x = torch.from_numpy(images.reshape(images.shape[0], -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


def make_mlp(sizes):
    """Linear layers between `sizes` with ReLU between them, initialised as
    Mlp::initialize (U(-1/sqrt(in), 1/sqrt(in)) for weights and biases)."""
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = nn.Linear(n_in, n_out)
        bound = 1.0 / math.sqrt(n_in)
        nn.init.uniform_(linear.weight, -bound, bound)
        nn.init.uniform_(linear.bias, -bound, bound)
        layers.append(linear)
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def rank_slice(count, rank, world):
    """data_parallel.h's rank_slice: balanced contiguous [begin, end)."""
    base, extra = divmod(count, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


@torch.no_grad()
def evaluate_test(model, x, y, rank, world, batch):
    """(mean test loss, accuracy) over every rank's slice; the same number of
    forward calls on every rank (FSDP2's all-gathers). Collective."""
    begin, end = rank_slice(len(y), rank, world)
    largest = -(-len(y) // world)
    sums = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, samples
    for b in range(-(-largest // batch)):
        first = min(end, begin + b * batch)
        n = min(end - first, batch)
        logits = model(x[first:first + n])
        sums[0] += F.cross_entropy(logits, y[first:first + n], reduction="sum").item()
        sums[1] += (logits.argmax(dim=1) == y[first:first + n]).sum().item()
        sums[2] += n
    dist.all_reduce(sums)
    return sums[0].item() / sums[2].item(), sums[1].item() / sums[2].item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp2"], required=True)
    ap.add_argument("--epochs", type=int, default=2, help="passes over the training set (the example's default 2)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many optimizer steps (0: no limit)")
    ap.add_argument("--seed", type=int, default=42, help="seed of the initialisation and the shuffling")
    ap.add_argument("--micro-batch", type=int, default=32, help="images per rank and step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--hidden", default="1024,1024", help="hidden layer widths, comma-separated")
    ap.add_argument("--eval-batch", type=int, default=1000)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", help="write the figures to this file (rank 0)")
    a = ap.parse_args()
    if a.epochs < 1 or a.max_steps < 0 or a.micro_batch < 1 or a.eval_batch < 1:
        sys.exit("torch_mlp: --epochs, --micro-batch and --eval-batch must be >= 1, --max-steps >= 0")
    try:
        hidden = [int(w) for w in a.hidden.split(",")] if a.hidden else []
    except ValueError:
        sys.exit(f"torch_mlp: --hidden \"{a.hidden}\": give widths like \"1024,1024\"")
    if any(w < 1 for w in hidden):
        sys.exit(f"torch_mlp: --hidden \"{a.hidden}\": widths must be >= 1")
    if "RANK" not in os.environ:
        sys.exit("torch_mlp: run it under torchrun (python -m torch.distributed.run --nproc-per-node N ...)")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    train_x, train_y = load_split(a.data_dir, "train")
    test_x, test_y = load_split(a.data_dir, "t10k")
    sizes = [train_x.shape[1]] + hidden + [10]

    torch.manual_seed(a.seed)  # the same full model on every rank
    model = make_mlp(sizes)
    parameters = sum(p.numel() for p in model.parameters())
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
        inner = model.module
    else:
        from torch.distributed.fsdp import fully_shard
        for layer in model:  # one unit per Linear layer, as the example's "fc<l>"
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)  # swaps the Parameters for sharded ones: the groups are taken after it
        inner = model
    weights = [p for n, p in inner.named_parameters() if n.endswith(".weight")]
    biases = [p for n, p in inner.named_parameters() if not n.endswith(".weight")]
    optimizer = torch.optim.AdamW([{"params": weights, "weight_decay": 0.01}, {"params": biases, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.999), eps=1e-8, fused=True)
    global_batch = a.micro_batch * world
    steps_per_epoch = len(train_y) // global_batch
    if rank == 0:
        print(f"torch_mlp: {len(train_y)} train / {len(test_y)} test images, layers {'-'.join(map(str, sizes))}, "
              f"{parameters} parameters; torch {torch.__version__} {a.mode}, gloo, {world} ranks x 1 thread, "
              f"micro-batch {a.micro_batch} x {world} ranks = global batch {global_batch}, AdamW lr {a.lr:g}",
              flush=True)

    epochs, steps_done, accuracy = [], 0, 0.0
    for epoch in range(a.epochs):
        if a.max_steps and steps_done >= a.max_steps:
            break
        perm = torch.from_numpy(np.random.Generator(np.random.PCG64([a.seed + 1, epoch])).permutation(len(train_y)))
        loss_sum, steps = 0.0, 0
        t0 = time.perf_counter()
        for step in range(steps_per_epoch):
            if a.max_steps and steps_done >= a.max_steps:
                break
            first = step * global_batch + rank * a.micro_batch
            rows = perm[first:first + a.micro_batch]
            loss = F.cross_entropy(model(train_x[rows]), train_y[rows])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.item()
            steps += 1
            steps_done += 1
        seconds = time.perf_counter() - t0
        sums = torch.tensor([loss_sum, steps], dtype=torch.float64)
        dist.all_reduce(sums)
        test_loss, accuracy = evaluate_test(model, test_x, test_y, rank, world, a.eval_batch)
        samples = steps * global_batch
        stats = {"epoch": epoch + 1, "optimizer_steps": steps, "samples": samples,
                 "train_loss": sums[0].item() / max(1.0, sums[1].item()), "test_loss": test_loss,
                 "test_accuracy": accuracy, "seconds": seconds, "samples_per_second": samples / seconds}
        epochs.append(stats)
        if rank == 0:
            print(f"epoch {stats['epoch']:3d} | steps {steps:5d} | train loss {stats['train_loss']:.4f} | test loss "
                  f"{test_loss:.4f} | test accuracy {accuracy:.4f} | {stats['samples_per_second']:.0f} samples/s "
                  f"({seconds:.1f} s)", flush=True)
    total_samples = sum(e["samples"] for e in epochs)
    total_seconds = sum(e["seconds"] for e in epochs)
    samples_per_second = total_samples / total_seconds if total_seconds > 0 else 0.0
    if rank == 0:
        print(f"final test accuracy {accuracy:.4f} after {steps_done} optimizer steps, {samples_per_second:.0f} "
              f"samples/s", flush=True)
        if a.json:
            report = {"program": "torch_mlp", "mode": a.mode, "torch": torch.__version__, "backend": "gloo",
                      "world_size": world, "threads_per_rank": torch.get_num_threads(), "seed": a.seed,
                      "micro_batch": a.micro_batch, "layer_sizes": sizes, "parameters": parameters,
                      "max_steps": a.max_steps, "epochs": epochs, "optimizer_steps": steps_done,
                      "samples_per_second": samples_per_second, "final_accuracy": accuracy}
            with open(a.json, "w") as f:
                json.dump(report, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
