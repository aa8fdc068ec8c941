#!/usr/bin/env python3
"""Checks the design notes against their citations and docs/design.md's index.

A design note is a comment block in the code. Its first line is a
definition: a line holding only a line comment marker, one space and the
note's name in brackets, indented or not, for example

    `// [Note: flat buffer layout]`   (C++, CUDA)
    `# [Note: zs-launch]`             (shell, Python, meson.build)

and the next line continues the same comment (the note's text, or an empty
comment line before it). Markdown
files cite notes and never define them. Every other occurrence of
`[Note: name]` in a tracked text file (code, scripts, meson.build, docs,
docs/design.md's index included) is a citation; the name may wrap over
lines (a comment marker at the start of the next line is dropped, runs of
white space count as one space). Text between backticks on one line
quotes the syntax and is neither, as in this paragraph.

The program reads every file `git ls-files` lists under the source root and
fails, naming file:line, for:
  - a citation of a note that is not defined;
  - a note defined more than once;
  - a definition line whose next line does not continue the comment;
  - a defined note missing from design.md's "Design notes and where they
    live" table, listed there twice, or listed at another file than the one
    that defines it.
Usage: check_notes.py <source root>
"""
import os
import re
import subprocess
import sys

INDEX_HEADING = "## Design notes and where they live"
DESIGN = "docs/design.md"

# A note name: starts with a letter, digit or '.', holds no brackets,
# backslashes or backticks, at most 120 characters (a wrapped citation
# included).
NAME = r"[\w.][^\[\]\\`]{0,119}?"
DEFINITION = re.compile(r"^[ \t]*(//|#) \[Note: (" + NAME + r")\][ \t]*$")
CITATION = re.compile(r"\[Note:\s+(" + NAME + r")\]")
WRAP = re.compile(r"[ \t]*\n[ \t]*(?:///?|#|\*)?[ \t]*")
BACKTICKS = re.compile(r"`[^`\n]*`")


def normalize(name):
    """A cited name with its line wraps and comment markers undone."""
    return re.sub(r"\s+", " ", WRAP.sub(" ", name)).strip()


def scan(path, text):
    """(definitions, citations, problems) of one file.

    definitions: [(name, line)]; citations: [(name, line)]."""
    definitions, citations, problems = [], [], []
    lines = text.split("\n")
    markdown = path.endswith(".md")
    definition_lines = set()
    if not markdown:
        for i, line in enumerate(lines):
            m = DEFINITION.match(line)
            if not m:
                continue
            marker, name = m.group(1), m.group(2)
            definition_lines.add(i)
            definitions.append((name, i + 1))
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if not nxt.startswith(marker):
                problems.append(f"{path}:{i + 1}: [Note: {name}] defined here, but the next line "
                                f"does not continue the comment with the note's text")
    # Blank out backtick spans (same length, so offsets keep their lines).
    quoted = BACKTICKS.sub(lambda m: " " * len(m.group(0)), text)
    for m in CITATION.finditer(quoted):
        line = quoted.count("\n", 0, m.start())
        if line in definition_lines:
            continue
        citations.append((normalize(m.group(1)), line + 1))
    return definitions, citations, problems


def read_index(text):
    """[(name, file, line)] from design.md's note table; line is 1-based."""
    lines = text.split("\n")
    try:
        start = lines.index(INDEX_HEADING)
    except ValueError:
        return None
    rows = []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or "[Note:" not in cells[0]:
            continue
        for name in CITATION.findall(cells[0]):
            rows.append((normalize(name), cells[1].strip("`"), i + 1))
    return rows


def check(files):
    """Problems (strings) for files, a {path: text} of every tracked text file."""
    problems = []
    defined = {}  # name -> [(path, line)]
    cited = []    # (name, path, line)
    for path in sorted(files):
        d, c, p = scan(path, files[path])
        problems += p
        for name, line in d:
            defined.setdefault(name, []).append((path, line))
        cited += [(name, path, line) for name, line in c]

    for name, where in sorted(defined.items()):
        if len(where) > 1:
            places = ", ".join(f"{p}:{n}" for p, n in where)
            for p, n in where:
                problems.append(f"{p}:{n}: [Note: {name}] is defined {len(where)} times ({places}); "
                                f"keep one and cite it")
    for name, path, line in cited:
        if name not in defined:
            problems.append(f"{path}:{line}: cites [Note: {name}], which no file defines "
                            f"(a line '// [Note: {name}]' or '# [Note: {name}]' starting a comment block)")

    if DESIGN not in files:
        problems.append(f"{DESIGN}: missing; it holds the index of design notes")
        return problems
    index = read_index(files[DESIGN])
    if index is None:
        problems.append(f"{DESIGN}: no '{INDEX_HEADING}' section")
        return problems
    indexed = {}
    for name, path, line in index:
        if name in indexed:
            problems.append(f"{DESIGN}:{line}: [Note: {name}] is listed again "
                            f"(first at line {indexed[name][1]})")
            continue
        indexed[name] = (path, line)
        where = defined.get(name)
        if where and len(where) == 1 and where[0][0] != path:
            problems.append(f"{DESIGN}:{line}: [Note: {name}] is listed at {path}, "
                            f"but {where[0][0]}:{where[0][1]} defines it")
    for name, where in sorted(defined.items()):
        if name not in indexed:
            for p, n in where:
                problems.append(f"{p}:{n}: [Note: {name}] is not in {DESIGN}'s "
                                f"'{INDEX_HEADING[3:]}' table")
    return problems


def tracked_text_files(root):
    """{path: text} of every file git tracks under root that reads as UTF-8."""
    paths = subprocess.check_output(["git", "-C", root, "ls-files", "-z"], text=True).split("\0")
    files = {}
    for p in paths:
        full = os.path.join(root, p)
        if not p or not os.path.isfile(full):
            continue
        try:
            with open(full, encoding="utf-8") as fh:
                files[p] = fh.read()
        except UnicodeDecodeError:
            continue  # binary: fixtures, corpora
    return files


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = tracked_text_files(root)
    problems = check(files)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    count = sum(len(scan(p, t)[0]) for p, t in files.items())
    print(f"{count} notes in {len(files)} files: each cited note defined once and indexed in {DESIGN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
