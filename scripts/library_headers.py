#!/usr/bin/env python3
"""Prints the library's headers, one per line, relative to the source root.

Usage: library_headers.py <source root> <folder>...
Every `*.h` file under the named folders (recursively), sorted. The root
meson.build installs these minus the private ones and those of backends
the build leaves out ([Note: installed headers] there);
tests/install/installed_headers.py checks the result against git.
"""
import os
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: library_headers.py <source root> <folder>...")
    root = sys.argv[1]
    headers = []
    for folder in sys.argv[2:]:
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            sys.exit(f"library_headers.py: {top} is not a folder")
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in filenames:
                if name.endswith(".h"):
                    headers.append(os.path.relpath(os.path.join(dirpath, name), root))
    print("\n".join(sorted(headers)))


if __name__ == "__main__":
    main()
