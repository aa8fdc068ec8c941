#!/usr/bin/env python3
"""Fails when two tracked file names differ by one letter.

Names one letter apart (engine_state.h beside engine_states.cpp) are read
as the same file and opened by mistake. This program takes the stem (the
name without its extension) of every tracked .h, .cpp, .cu, .cuh, .sh and
.py file, and fails naming both files of every pair of distinct stems at
edit distance 1 (one letter inserted, removed or replaced: Levenshtein).
Files sharing a stem (a .h and its .cpp, main.cpp in two folders) are
fine.
Usage: check_file_names.py <source root>
       check_file_names.py --names FILE...   (checks the names given instead)
"""
import os
import subprocess
import sys

from problems import finish

EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".sh", ".py")


def one_edit_apart(a, b):
    """True when a and b differ by exactly one insertion, deletion or substitution."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        return a[i + 1:] == b[i + 1:]
    return a[i:] == b[i + 1:]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--names":
        files = sys.argv[2:]
    else:
        root = sys.argv[1] if len(sys.argv) > 1 else "."
        files = subprocess.check_output(["git", "-C", root, "ls-files"], text=True).split()
    by_stem = {}
    for f in files:
        stem, ext = os.path.splitext(os.path.basename(f))
        if ext in EXTENSIONS:
            by_stem.setdefault(stem, []).append(f)
    stems = sorted(by_stem)
    problems = []
    for i, a in enumerate(stems):
        for b in stems[i + 1:]:
            if one_edit_apart(a, b):
                problems.append(f"{', '.join(by_stem[a])} and {', '.join(by_stem[b])}: "
                                f"the names differ by one letter; rename one")
    return finish(problems, f"{len(stems)} file stems: no two differ by one letter",
                  "pair(s) of file names one letter apart")


if __name__ == "__main__":
    sys.exit(main())
