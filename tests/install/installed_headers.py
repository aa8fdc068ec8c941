#!/usr/bin/env python3
"""Checks the installed headers ([Note: installed headers] in the root meson.build).

Installs the build into a temporary folder (meson install --destdir, nothing
rebuilt) and fails, naming each header, when:
  - a tracked header of the library's folders is neither installed, nor
    named in zs_private_headers, nor of a backend this build leaves out
    (added after the last configure: reconfigure the build);
  - an installed header is not tracked, or a private name is not a tracked
    header (a header removed or renamed without updating the list);
  - an installed header does not compile alone: a translation unit holding
    only `#include <zeroshard/HEADER>`, with the staged install and
    pkg-config's Cflags for zeroshard (the dependencies' include folders)
    as its only include path;
  - a private header can be included that way (it leaked into the install,
    or the include path reaches the source tree).
Usage: installed_headers.py --meson M --build-dir B --source-root S --prefix P
           --includedir I --libdir L --folders F... --private H... --unbuilt H...
The compiler is $CXX (default c++).
"""
import argparse
import concurrent.futures
import os
import shlex
import subprocess
import sys
import tempfile


def staged(stage, path):
    """Where `path` (absolute, or relative to the prefix already joined) lies under the stage."""
    return os.path.join(stage, path.lstrip("/"))


def compile_alone(cxx, cflags, header, cwd):
    """(header, returncode, stderr) of compiling `#include <zeroshard/header>` alone."""
    cmd = cxx + ["-std=c++20", "-fsyntax-only", *cflags, "-x", "c++", "-"]
    p = subprocess.run(cmd, input=f"#include <zeroshard/{header}>\n", text=True, cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return header, p.returncode, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meson", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--includedir", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--folders", nargs="+", required=True)
    ap.add_argument("--private", nargs="*", default=[])
    ap.add_argument("--unbuilt", nargs="*", default=[])
    a = ap.parse_args()
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    private, unbuilt = set(a.private), set(a.unbuilt)

    tracked = {f for f in subprocess.check_output(
        ["git", "-C", a.source_root, "ls-files", "--", *a.folders], text=True).split() if f.endswith(".h")}
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        stage = os.path.join(tmp, "stage")
        subprocess.run([a.meson, "install", "-C", a.build_dir, "--no-rebuild", "--quiet", "--destdir", stage],
                       check=True)
        prefix = staged(stage, a.prefix)
        include_root = a.includedir if os.path.isabs(a.includedir) else os.path.join(a.prefix, a.includedir)
        headers_dir = os.path.join(staged(stage, include_root), "zeroshard")
        installed = set()
        for dirpath, _, filenames in os.walk(headers_dir):
            for name in filenames:
                rel = os.path.relpath(os.path.join(dirpath, name), headers_dir)
                if rel != "zs_config.h":
                    installed.add(rel)

        for h in sorted(tracked - installed - private - unbuilt):
            problems.append(f"{h}: tracked but neither installed nor private: add it to zs_private_headers "
                            "in meson.build if users must not include it, else reconfigure "
                            "(meson setup --reconfigure) so that it is installed")
        for h in sorted(installed - tracked):
            problems.append(f"{h}: installed but not a tracked header (removed, renamed, or not in git?)")
        for h in sorted(private - tracked):
            problems.append(f"{h}: named in zs_private_headers but not a tracked header: update the list")
        for h in sorted(installed & private):
            problems.append(f"{h}: private but installed")

        # pkg-config's view of the staged install: zeroshard.pc names the
        # configured prefix, so a copy names the staged one.
        libdir = a.libdir if os.path.isabs(a.libdir) else os.path.join(a.prefix, a.libdir)
        pc_dir = os.path.join(tmp, "pkgconfig")
        os.mkdir(pc_dir)
        with open(os.path.join(staged(stage, libdir), "pkgconfig", "zeroshard.pc"), encoding="utf-8") as f:
            pc = [f"prefix={prefix}\n" if line.startswith("prefix=") else line for line in f]
        with open(os.path.join(pc_dir, "zeroshard.pc"), "w", encoding="utf-8") as f:
            f.writelines(pc)
        cflags = shlex.split(subprocess.check_output(
            ["pkg-config", "--cflags", "zeroshard"], text=True,
            env={**os.environ, "PKG_CONFIG_PATH": pc_dir}))
        for flag in cflags:
            for tree in (a.source_root, a.build_dir):
                if flag.startswith("-I") and os.path.realpath(flag[2:]).startswith(os.path.realpath(tree) + os.sep):
                    problems.append(f"pkg-config's Cflags name {flag}, inside {tree}")

        work = os.path.join(tmp, "tu")
        os.mkdir(work)
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            compiled = list(pool.map(lambda h: compile_alone(cxx, cflags, h, work), sorted(installed)))
            refused = list(pool.map(lambda h: compile_alone(cxx, cflags, h, work), sorted(private & tracked)))
        for h, rc, err in compiled:
            if rc != 0:
                lines = [ln for ln in err.splitlines() if "error" in ln][:3] or err.splitlines()[:3]
                problems.append(f"{h}: does not compile alone against the install:\n    " + "\n    ".join(lines))
        for h, rc, _ in refused:
            if rc == 0:
                problems.append(f"{h}: private, yet `#include <zeroshard/{h}>` compiles against the install")

    if problems:
        sys.exit("\n".join(problems) + f"\n{len(problems)} problem(s)")
    print(f"{len(installed)} installed headers each compile alone against the install "
          f"(Cflags: {' '.join(cflags)}); {len(private & tracked)} private and {len(unbuilt & tracked)} "
          f"left-out backend headers are not installed; every tracked header is one of these")


if __name__ == "__main__":
    main()
