#!/usr/bin/env python3
"""Reads the examples' report files with Python's own parsers.

Runs the report test program's case "report files for the python check"
(ZS_REPORT_OUT=<workdir>) to write SVG charts and per-rank Chrome traces,
then:
  - parses every SVG with xml.etree (well-formed XML, svg root in the SVG
    namespace) and checks one <g class="series"> per bar in each panel,
    with the bar labels (escaped text read back unescaped);
  - runs zs_trace_merge on the trace directory and checks the merged JSON
    (every rank present, timed events sorted by ts);
  - runs zs_trace_merge on a bad file and checks exit status 1 and that the
    message names the file.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def fail(msg):
    sys.exit(f"check_report_files: {msg}")


def check_svg(path, expected_panels):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail(f"{path}: not well-formed XML: {e}")
    if root.tag != SVG + "svg":
        fail(f"{path}: root element {root.tag}, expected {SVG}svg")
    if root.get("version") != "1.1":
        fail(f"{path}: svg version {root.get('version')}, expected 1.1")
    panels = [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]
    if len(panels) != len(expected_panels):
        fail(f"{path}: {len(panels)} panels, expected {len(expected_panels)}")
    for i, (panel, labels) in enumerate(zip(panels, expected_panels)):
        series = [g for g in panel.iter(SVG + "g") if g.get("class") == "series"]
        got = [g.get("data-label") for g in series]
        if got != labels:
            fail(f"{path}: panel {i}: series {got}, expected one per bar {labels}")
        for g in series:
            texts = [t.text for t in g.iter(SVG + "text")]
            if texts != [g.get("data-label")]:
                fail(f"{path}: panel {i}: series {g.get('data-label')!r} labelled {texts}")
    print(f"{path}: OK ({', '.join(str(len(p)) for p in expected_panels)} series)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--test-program", required=True)
    ap.add_argument("--merge", required=True, help="zs_trace_merge")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    env = dict(os.environ, ZS_REPORT_OUT=args.workdir)
    subprocess.run([args.test_program, "--test-case=report files for the python check"], env=env, check=True)

    with open(os.path.join(args.workdir, "expected.json")) as f:
        expected = json.load(f)
    if not expected:
        fail("the test program wrote no charts")
    for name, panels in expected.items():
        check_svg(os.path.join(args.workdir, name), panels)

    merged_path = os.path.join(args.workdir, "merged.json")
    subprocess.run([args.merge, "-o", merged_path, os.path.join(args.workdir, "traces")], check=True)
    with open(merged_path) as f:
        merged = json.load(f)
    ranks = sorted(r["rank"] for r in merged["otherData"]["ranks"])
    if ranks != [0, 1, 2]:
        fail(f"{merged_path}: ranks {ranks}, expected [0, 1, 2]")
    timed = [e["ts"] for e in merged["traceEvents"] if e["ph"] != "M"]
    if timed != sorted(timed) or len(timed) != 3:
        fail(f"{merged_path}: timed events {timed}, expected 3 sorted by ts")
    if [e["pid"] for e in merged["traceEvents"] if e["ph"] == "X"] != [3, 2, 1]:
        fail(f"{merged_path}: the later a rank's span, the earlier it should come")
    print(f"{merged_path}: OK")

    bad = os.path.join(args.workdir, "bad-trace.json")
    good = os.path.join(args.workdir, "traces", "trace-rank0.json")
    r = subprocess.run([args.merge, "-o", os.path.join(args.workdir, "never.json"), good, bad],
                       capture_output=True, text=True)
    if r.returncode != 1 or bad not in r.stderr or "traceEvents" not in r.stderr:
        fail(f"zs_trace_merge on {bad}: exit {r.returncode}, stderr {r.stderr!r}")
    if os.path.exists(os.path.join(args.workdir, "never.json")):
        fail("zs_trace_merge wrote its output despite the error")
    print(f"zs_trace_merge on a bad file: exit 1, {r.stderr.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
