#!/usr/bin/env python3
"""Checks the project's folders against docs/design.md, "Folders".

That section's table names every folder of the code and the folders (or
single headers) each may include. This program reads the table and every
`#include "..."` line of the tracked C++ and CUDA sources, and fails naming
the file, the line and the rule for:
  - a source file in a folder the table does not name;
  - an include of a folder (or header) its folder may not include;
  - a folder under runtime/ holding more than 20 files (meson.build aside).
Usage: check_layers.py <source root>
"""
import os
import re
import subprocess
import sys

from problems import finish

MAX_RUNTIME_FILES = 20


def read_table(design_path):
    """{folder: set of allowed folders or headers} from the "Folders" table."""
    text = open(design_path, encoding="utf-8").read()
    m = re.search(r"^## Folders\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        sys.exit(f"{design_path}: no '## Folders' section")
    rules = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").rstrip("/")
        allowed = set()
        for item in re.findall(r"`([^`]+)`", cells[2]):
            allowed.add(item.rstrip("/"))
        rules[folder] = allowed
    if not rules:
        sys.exit(f"{design_path}: the '## Folders' table has no rows")
    return rules


def folder_of(path, rules):
    """The longest folder of the table that holds `path`, or None."""
    best = None
    for folder in rules:
        if (path.startswith(folder + "/")) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    rules = read_table(os.path.join(root, "docs", "design.md"))
    files = subprocess.check_output(
        ["git", "-C", root, "ls-files", "*.h", "*.cpp", "*.cu", "*.cuh"], text=True).split()
    problems = []
    counts = {}
    for f in files:
        own = folder_of(f, rules)
        if own is None:
            problems.append(f"{f}: its folder is not in docs/design.md's 'Folders' table")
            continue
        if own.startswith("runtime/"):
            counts[own] = counts.get(own, 0) + 1
        allowed = rules[own]
        if "everything" in allowed:
            continue
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m or "/" not in m.group(1):
                    continue
                inc = m.group(1)
                target = folder_of(inc, rules)
                if target is None or target == own or inc in allowed or target in allowed:
                    continue
                problems.append(f"{f}:{n}: includes {inc}: {own}/ may include "
                                f"{', '.join(sorted(allowed)) or 'no other folder'} (docs/design.md, 'Folders')")
    for folder, n in sorted(counts.items()):
        listed = len([e for e in os.listdir(os.path.join(root, folder)) if e != "meson.build"
                      and os.path.isfile(os.path.join(root, folder, e))])
        if listed > MAX_RUNTIME_FILES:
            problems.append(f"{folder}/: {listed} files, more than {MAX_RUNTIME_FILES}: split it")
    return finish(problems,
                  f"{len(files)} files in {len(rules)} folders: every include points the way docs/design.md allows")


if __name__ == "__main__":
    sys.exit(main())
