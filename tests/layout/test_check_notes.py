#!/usr/bin/env python3
"""check_notes.py on small trees with one fault each: it must name the
fault at its file and line, and pass the tree without faults.

The trees' texts write a note's brackets as << and >> (turned into the
real syntax by `real()`), so that this file cites no note of its own."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_notes  # noqa: E402


def real(text):
    """text with <<name>> written as the bracketed note syntax."""
    return text.replace("<<", "[" + "Note: ").replace(">>", "]")


INDEX = """# design

## Design notes and where they live

| note | file |
|---|---|
| <<alpha>>, <<beta>> | a/alpha.h |
| <<launch>> | tools/zs-launch |

## Conventions
"""

GOOD = {
    "docs/design.md": INDEX,
    "a/alpha.h": ("// <<alpha>>\n"
                  "// Alpha's text.\n"
                  "\n"
                  "  // <<beta>>\n"
                  "  //\n"
                  "  // Beta's text, after an empty comment line.\n"),
    "a/user.cpp": ("// Uses alpha (<<\n"
                   "// alpha>>) and, wrapped, <<beta>>.\n"
                   "// `<<quoted>>` in backticks is neither.\n"),
    "tools/zs-launch": "#!/bin/sh\n# <<launch>>\n# The launcher.\necho '<<alpha>>'\n",
    "meson.build": "# see <<launch>>\n",
    "README.md": "Cited in docs: <<alpha>>, wrapped <<\nbeta>>.\n",
}

failures = []


def expect(name, files, wanted):
    """check() on files finds exactly the problems starting with `wanted`."""
    got = check_notes.check({path: real(text) for path, text in files.items()})
    wanted = [real(w) for w in wanted]
    ok = len(got) == len(wanted) and all(any(g.startswith(w) for g in got) for w in wanted)
    if not ok:
        failures.append(f"{name}: expected {wanted}, got {got}")


# (what is wrong, the files that differ from GOOD, the problems expected)
CASES = [
    ("a citation of an undefined note",
     {"a/user.cpp": "// x\n// see <<gamma>>\n"},
     ["a/user.cpp:2: cites <<gamma>>"]),
    ("a wrapped citation of an undefined note",
     {"README.md": "text\n<<alpha\nbeta>>\n"},
     ["README.md:2: cites <<alpha beta>>"]),
    ("a note defined twice",
     {"a/user.cpp": "int x;\n// <<alpha>>\n// again\n"},
     ["a/alpha.h:1: <<alpha>> is defined 2 times", "a/user.cpp:2: <<alpha>> is defined 2 times"]),
    ("a definition without text",
     {"a/alpha.h": GOOD["a/alpha.h"] + "// <<zeta>>\nint x;\n"},
     ["a/alpha.h:7: <<zeta>> defined here, but the next line", "a/alpha.h:7: <<zeta>> is not in docs/design.md"]),
    ("a note missing from the index",
     {"a/more.h": "# <<delta>>\n# text\n"},
     ["a/more.h:1: <<delta>> is not in docs/design.md"]),
    ("a note indexed at another file",
     {"docs/design.md": INDEX.replace("tools/zs-launch", "scripts/zs-launch")},
     ["docs/design.md:8: <<launch>> is listed at scripts/zs-launch, but tools/zs-launch:2 defines it"]),
    ("a note indexed twice",
     {"docs/design.md": INDEX.replace("| <<launch>> |", "| <<launch>>, <<alpha>> |")},
     ["docs/design.md:8: <<alpha>> is listed again (first at line 7)"]),
    ("an indexed note no file defines",
     {"docs/design.md": INDEX.replace("| <<launch>> |", "| <<launch>>, <<omega>> |")},
     ["docs/design.md:8: cites <<omega>>"]),
    ("markdown does not define",
     {"README.md": "# <<epsilon>>\n# heading\n"},
     ["README.md:1: cites <<epsilon>>"]),
    ("no index section",
     {"docs/design.md": "# design\n"},
     ["docs/design.md: no '## Design notes and where they live' section"]),
]

expect("a good tree", GOOD, [])
for name, edits, wanted in CASES:
    expect(name, {**GOOD, **edits}, wanted)

for f in failures:
    print(f)
if failures:
    print(f"{len(failures)} case(s) failed")
    sys.exit(1)
print("check_notes.py finds each fault at its file and line")
