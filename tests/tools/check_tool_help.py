#!/usr/bin/env python3
"""Checks the installed programs' --help against docs/tools.md.

For every program given as NAME=PATH: `PATH --help` must exit 0 and print
something; docs/tools.md must have a section "## NAME"; every option the
help prints (each -x or --long word, anywhere in it, the options of the
program it launches included) must appear in that section; and every
option the section's OPTIONS list describes (the first `code` span of each
"- " item) must be one the help prints. So the manual cannot describe an
option the program lacks, nor leave out one it has.
Usage: check_tool_help.py DOCS/TOOLS.md NAME=PATH...
"""
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z])(?![\w-])")


def sections(text):
    """{program name: its section's text} for each '## name' heading."""
    out = {}
    parts = re.split(r"^## +(.+?) *$", text, flags=re.M)
    for i in range(1, len(parts), 2):
        out[parts[i].strip().strip("`")] = parts[i + 1]
    return out


def documented_options(section):
    """Options named at the head of the items of the section's OPTIONS list."""
    m = re.search(r"^### OPTIONS\n(.*?)(?=^### |\Z)", section, re.S | re.M)
    if not m:
        return None
    found = set()
    for line in m.group(1).splitlines():
        item = re.match(r"- `([^`]+)`", line)
        if item:
            found.update(OPTION.findall(item.group(1)))
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    doc_path = sys.argv[1]
    docs = sections(open(doc_path, encoding="utf-8").read())
    problems = []
    for arg in sys.argv[2:]:
        before = len(problems)
        name, _, path = arg.partition("=")
        try:
            r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
        except OSError as e:
            problems.append(f"{name}: cannot run {path}: {e}")
            continue
        if r.returncode != 0:
            problems.append(f"{name} --help: exit status {r.returncode} (want 0): {r.stderr.strip()[:200]}")
        shown = set(OPTION.findall(r.stdout))
        if not r.stdout.strip() or not shown:
            problems.append(f"{name} --help printed no options on stdout")
        section = docs.get(name)
        if section is None:
            problems.append(f"{doc_path}: no section '## {name}'")
            continue
        for opt in sorted(shown):
            if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section):
                problems.append(f"{doc_path}, '## {name}': {name} --help prints {opt}, the section never names it")
        described = documented_options(section)
        if described is None:
            problems.append(f"{doc_path}, '## {name}': no '### OPTIONS' list")
            continue
        for opt in sorted(described - shown):
            problems.append(f"{doc_path}, '## {name}': OPTIONS describes {opt}, which {name} --help does not print")
        if len(problems) == before:
            print(f"{name}: --help exits 0; its {len(shown)} options are in {doc_path}, and no others")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
