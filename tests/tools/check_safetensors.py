#!/usr/bin/env python3
"""Reads zs_ckpt_export's output with the safetensors package.

Runs the checkpoint test program's fixture case (under mpirun -np N when
--mpirun is given) to save a bf16 stage-3 checkpoint and the expected fp32
master values, exports it with zs_ckpt_export, loads the file with
safetensors (strict offset checks in its Rust core) and compares bit for
bit. Exits 77 (skipped) when the safetensors package is not installed.
"""
import argparse
import json
import os
import struct
import subprocess
import sys


def load(path):
    """name -> (shape, raw little-endian bytes), and the metadata."""
    try:
        import numpy  # noqa: F401
        from safetensors import safe_open

        out = {}
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata()
            for name in f.keys():
                t = f.get_tensor(name)
                if str(t.dtype) != "float32":
                    sys.exit(f"{name}: dtype {t.dtype}, expected float32")
                out[name] = (list(t.shape), t.astype("<f4").tobytes())
        return out, metadata
    except ImportError:
        from safetensors import deserialize

        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        metadata = json.loads(data[8 : 8 + n]).get("__metadata__", {})
        out = {}
        for name, t in deserialize(data):
            if t["dtype"] != "float32" and t["dtype"] != "F32":
                sys.exit(f"{name}: dtype {t['dtype']}, expected F32")
            out[name] = (list(t["shape"]), bytes(t["data"]))
        return out, metadata


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--test-program", required=True)
    ap.add_argument("--export", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpirun")
    ap.add_argument("--np", default="3")
    args = ap.parse_args()
    try:
        import safetensors  # noqa: F401
    except ImportError:
        print("safetensors is not installed: skipped")
        return 77

    fixture = os.path.abspath(args.workdir)
    env = dict(os.environ, ZS_CKPT_FIXTURE=fixture)
    cmd = [args.test_program, "--test-case=fixture*"]
    if args.mpirun:
        cmd = [args.mpirun, "-np", args.np] + cmd
    subprocess.run(cmd, env=env, check=True)
    out = os.path.join(fixture, "model.safetensors")
    subprocess.run([args.export, os.path.join(fixture, "ckpt"), out], check=True)

    with open(os.path.join(fixture, "expected.json")) as f:
        expected = json.load(f)
    tensors, metadata = load(out)
    bad = []
    if sorted(tensors) != sorted(expected["tensors"]):
        bad.append(f"tensors {sorted(tensors)}, expected {sorted(expected['tensors'])}")
    for name, want in expected["tensors"].items():
        if name not in tensors:
            continue
        shape, raw = tensors[name]
        if shape != want["shape"]:
            bad.append(f"{name}: shape {shape}, expected {want['shape']}")
        if raw != struct.pack(f"<{len(want['bits'])}I", *want["bits"]):
            bad.append(f"{name}: values differ from gather_master")
    if metadata.get("format") != "pt" or metadata.get("optimizer_step") != str(expected["optimizer_step"]):
        bad.append(f"metadata {metadata}")
    for line in bad:
        print("FAILED:", line)
    if not bad:
        print(f"safetensors {safetensors.__version__} read {len(tensors)} tensors: all equal to gather_master")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
