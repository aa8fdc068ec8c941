#!/usr/bin/env python3
"""examples/gpt's small GPT in PyTorch, trained data-parallel with torch
DDP or FSDP2 on the CPU (gloo): the torch rows of training_peers.py. Run it
under torchrun, one process per rank, each with one thread:

  python -m torch.distributed.run --standalone --nproc-per-node 4 \\
      bench/peers/torch_gpt.py --mode ddp --steps 200 --seed 1 --json out.json

The model is examples/gpt/gpt_model.h's at its defaults: a byte-level
GPT-2 decoder of 4 pre-LayerNorm blocks, 4 heads, width 128, context 64,
vocabulary 256, the LM head tied to the token embedding, 834,304
parameters. Its parts are those of parallel/: LayerNorm with eps 1e-5,
causal attention scaled by 1/sqrt(head dim) with the fused QKV projection
laid out head by head ([Note: attention head layout]), the tanh form of
GELU, the mean cross-entropy over a micro-batch's tokens. The initialisation
is Gpt::initialize's distribution (GPT-2's): N(0, 0.02) for the embeddings
and the weights, N(0, 0.02 / sqrt(2 layers)) for both c_proj weights,
biases 0, LayerNorm weights 1 (from torch's generator, so not the same
values). The optimizer is the example's default configuration
(examples/job_config.h, adamw_job_defaults with the GPT's arguments):
AdamW lr 0.002, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the four
weight matrices of each block and 0 on the norms, biases and embeddings
(the example's "no_decay" group), constant lr, the gradient's global norm
clipped to 1; torch.optim.AdamW(fused=True).

The data are examples/gpt/text_corpus.cpp's: every regular file of the
fortune folder that is not a symbolic link and does not end in ".dat", in
name order, each split into its first 95% (training) and last 5%
(validation). A step's global batch is micro-batch x world windows of 65
bytes at uniformly drawn positions of the training text (the same draw on
every rank, which keeps its rank's rows), so the data order differs from
the example's (another generator) but not its distribution. The
validation loss is the example's validation_loss at its defaults: 16
batches of micro-batch x world fixed windows, window j of count = 16 x
micro-batch x world starting at j (size - 65) / count of the validation
text, each rank its rows of each batch, the mean of the batches' mean
losses over the batches and ranks; run once after the last step.

tokens/s is measured as the example measures it: the global batch's tokens
(micro-batch x world x 64) over the summed time of every step on rank 0's
clock, the first included, each step from drawing its batch to the
optimizer step returning (the validation pass is outside). The median step
after the first is printed beside it, as the example prints its own.

--json FILE (rank 0) writes the figures with the example's report keys
where they exist: tokens_per_s, validation_loss, train_loss (mean over the
steps and ranks), median_step_seconds, parameters, plus mode, seed, steps,
micro_batch, world_size, first_step_loss and the torch version.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def load_corpus(folder, holdout=0.05):
    """(training bytes, validation bytes, files, unigram entropy in bits per
    byte) of the fortune files in `folder`, split as text_corpus.cpp splits
    them. Exits naming the folder when it holds no such file."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        sys.exit(f"torch_gpt: cannot list {folder}: {e}")
    train, valid, files = [], [], 0
    counts = np.zeros(256, dtype=np.int64)
    for e in entries:
        if e.is_symlink() or not e.is_file() or os.path.splitext(e.name)[1] == ".dat":
            continue
        with open(e.path, "rb") as f:
            text = f.read()
        counts += np.bincount(np.frombuffer(text, dtype=np.uint8), minlength=256)
        cut = len(text) - int(len(text) * holdout)
        train.append(text[:cut])
        valid.append(text[cut:])
        files += 1
    if files == 0:
        sys.exit(f"torch_gpt: {folder}: no text files (fortune files; install the fortunes package)")
    p = counts[counts > 0] / counts.sum()
    unigram = float(-(p * np.log2(p)).sum())
    as_array = lambda parts: np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.int64)
    return as_array(train), as_array(valid), files, unigram


def fixed_windows(text, first, batch, count, seq):
    """text_corpus.cpp's fixed_windows: windows first..first+batch-1 of
    `count` evenly spaced ones, [batch, seq + 1]."""
    w = seq + 1
    starts = [j * (len(text) - w) // count for j in range(first, first + batch)]
    return torch.from_numpy(np.stack([text[s:s + w] for s in starts]))


class Attention(nn.Module):
    """Causal self-attention; c_attn's 3 x dim outputs are grouped by head
    (query, key, value rows of head 0, then head 1, ...), as parallel/'s."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.c_attn(x).view(b, t, self.heads, 3, d // self.heads)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # [b, heads, t, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = Mlp(dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """gpt_model.h's GPT with GPT-2's parameter names."""

    def __init__(self, layers, heads, dim, context, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        proj_std = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_"):
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, proj_std if name.endswith("c_proj.weight") else 0.02)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the tied LM head, no bias


def param_groups(model, weight_decay):
    """AdamW's groups: `weight_decay` on the blocks' weight matrices (c_attn,
    both c_proj, c_fc), 0 on the norms, biases and embeddings."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 and not name.startswith(("wte.", "wpe.")) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def mean_loss(model, windows):
    """Mean cross-entropy over the windows' next-byte predictions."""
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))


@torch.no_grad()
def validation_loss(model, valid, micro, world, rank, batches, seq):
    """The example's validation_loss (see the module docstring). Collective."""
    per = micro * world
    total = torch.zeros(1, dtype=torch.float64)
    for b in range(batches):
        windows = fixed_windows(valid, b * per + rank * micro, micro, batches * per, seq)
        total += mean_loss(model, windows).item()
    dist.all_reduce(total)
    return total.item() / (batches * world)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp2"], required=True)
    ap.add_argument("--steps", type=int, default=500, help="optimizer steps (the example's default 500)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the initialisation and the data order")
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--context", type=int, default=64, help="longest sequence; also the training length")
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--data-dir", default="/usr/share/games/fortunes")
    ap.add_argument("--json", help="write the figures to this file (rank 0)")
    a = ap.parse_args()
    if min(a.steps, a.micro_batch, a.layers, a.heads, a.dim, a.context, a.eval_batches) < 1:
        sys.exit("torch_gpt: --steps, --micro-batch, --layers, --heads, --dim, --context and --eval-batches "
                 "must be >= 1")
    if a.dim % a.heads != 0:
        sys.exit(f"torch_gpt: --heads {a.heads} must divide --dim {a.dim}")
    if "RANK" not in os.environ:
        sys.exit("torch_gpt: run it under torchrun (python -m torch.distributed.run --nproc-per-node N ...)")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    seq, vocab = a.context, 256
    train, valid, files, unigram = load_corpus(a.data_dir)

    torch.manual_seed(a.seed)  # the same full model on every rank
    model = Gpt(a.layers, a.heads, a.dim, a.context, vocab)
    parameters = sum(p.numel() for p in model.parameters())  # wte once: it is one Parameter
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
        inner = model.module
    else:
        from torch.distributed.fsdp import fully_shard
        for block in model.h:  # one unit per block, as the example's "h.i"; the root holds wte, wpe, ln_f
            fully_shard(block)
        fully_shard(model)  # swaps the Parameters for sharded ones: the groups are taken after it
        inner = model
    optimizer = torch.optim.AdamW(param_groups(inner, 0.1), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    if rank == 0:
        print(f"torch_gpt: {files} files, {len(train)} train / {len(valid)} validation bytes, unigram entropy "
              f"{unigram:.4f} bits/byte\ntorch_gpt: {a.layers} layers, {a.heads} heads, width {a.dim}, context "
              f"{a.context}, {parameters} parameters; torch {torch.__version__} {a.mode}, gloo, {world} ranks x 1 "
              f"thread, micro-batch {a.micro_batch} x {seq} tokens per rank and step, AdamW lr {a.lr:g}", flush=True)

    gen = np.random.Generator(np.random.PCG64(a.seed + 1))  # the data order: the same draws on every rank
    w = seq + 1
    global_batch = a.micro_batch * world
    step_seconds, losses = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        starts = gen.integers(0, len(train) - w, size=global_batch, endpoint=True)
        mine = starts[rank * a.micro_batch:(rank + 1) * a.micro_batch]
        windows = torch.from_numpy(np.stack([train[s:s + w] for s in mine]))
        loss = mean_loss(model, windows)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_seconds.append(time.perf_counter() - t0)
        losses.append(loss.item())
    sums = torch.tensor([losses[0], sum(losses)], dtype=torch.float64)
    dist.all_reduce(sums)
    first_loss, train_loss = sums[0].item() / world, sums[1].item() / (world * a.steps)
    val = validation_loss(model, valid, a.micro_batch, world, rank, a.eval_batches, seq)
    tokens_per_s = global_batch * seq * a.steps / sum(step_seconds)
    median_step = statistics.median(step_seconds[1:]) if a.steps > 1 else 0.0
    if rank == 0:
        print(f"step {a.steps:5d}  first step loss {first_loss:.4f}  train loss {train_loss:.4f}  validation loss "
              f"{val:.4f} ({val / math.log(2):.3f} bits/byte, unigram {unigram:.3f})  {tokens_per_s:.0f} tokens/s"
              + (f"  median step {median_step:.4f} s (steps 2-{a.steps})" if a.steps > 1 else ""), flush=True)
        if a.json:
            report = {"program": "torch_gpt", "mode": a.mode, "torch": torch.__version__, "backend": "gloo",
                      "world_size": world, "threads_per_rank": torch.get_num_threads(), "seed": a.seed,
                      "steps": a.steps, "micro_batch": a.micro_batch, "seq": seq, "parameters": parameters,
                      "model": {"layers": a.layers, "heads": a.heads, "dim": a.dim, "context": a.context,
                                "vocab": vocab},
                      "first_step_loss": first_loss, "train_loss": train_loss, "validation_loss": val,
                      "validation_bits_per_byte": val / math.log(2), "unigram_entropy_bits": unigram,
                      "tokens_per_s": tokens_per_s, "median_step_seconds": median_step}
            with open(a.json, "w") as f:
                json.dump(report, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
