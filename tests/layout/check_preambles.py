#!/usr/bin/env python3
"""Fails when a header's preamble runs past MAX_LINES lines.

A header's preamble is the run of `//` comment lines it opens with: what
the file is for, in a few lines. Longer reasoning goes in a design note
placed after the includes (`[Note: ...]` blocks, tests/layout/check_notes.py).
This program reads every tracked .h and .cuh file and fails naming each one
whose preamble is longer, with its length.
Usage: check_preambles.py <source root>
       check_preambles.py --files FILE...   (checks the files given instead)
"""
import os
import subprocess
import sys

from problems import finish

MAX_LINES = 34  # "about 30": the longest kept preambles list keys or calls


def preamble_lines(path):
    """Number of `//` lines at the top of the file at `path`."""
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("//"):
                break
            n += 1
    return n


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--files":
        paths = sys.argv[2:]
    else:
        root = sys.argv[1] if len(sys.argv) > 1 else "."
        names = subprocess.check_output(["git", "-C", root, "ls-files", "*.h", "*.cuh"], text=True).split()
        # tests/layout/testdata/ holds the long preamble this check must refuse.
        paths = [os.path.join(root, n) for n in names if not n.startswith("tests/layout/testdata/")]
    problems = []
    for p in paths:
        n = preamble_lines(p)
        if n > MAX_LINES:
            problems.append(f"{p}: its preamble is {n} comment lines (at most {MAX_LINES}); "
                            "move the reasoning into a design note after the includes")
    return finish(problems, f"{len(paths)} headers: every preamble at most {MAX_LINES} lines",
                  "header(s) with a long preamble")


if __name__ == "__main__":
    sys.exit(main())
