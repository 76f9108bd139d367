"""Huge grids: refusing one is instant, expanding a large one is quick.

    python benchmarks/grid.py

Prints, each a median over a few fresh processes (memory: their peak RSS, read with
`resource.getrusage` in a subprocess of their own, so no other process counts):

- `gcbench validate` of a suite of 10^9 grid points (1,000 models × 1,000 networks ×
  1,000 clusters): the command refuses it from the axis lengths alone (issue 11 asks
  ≤ 2 s and ≤ 200 MB); the same for a 10^8-point suite;
- expanding a suite of 10^5 cells, cell ids included, in-process (`expand` then every
  `cell.id`; issue 11 asks ≤ 5 s), and the whole `gcbench validate` of it;
- the same for 10^6 cells, the default `--max-cells`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs `argv` as a child and reports its wall time and peak RSS (getrusage of children:
# this wrapper has no other child).
WRAPPER = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "rss_mb": rss, "rc": done.returncode,
                  "out": (done.stdout + done.stderr).strip()[-300:]}))
"""

# Expands a suite in-process: the time of `expand` plus every cell's id.
EXPAND = """
import json, sys, time
from gcbench.config import expand, load_suite
suite = load_suite(sys.argv[1])
t = time.perf_counter()
cells = expand(suite)
ids = {c.id for c in cells}
print(json.dumps({"cells": len(cells), "ids": len(ids), "expand_s": time.perf_counter() - t}))
"""


def suite(path: Path, models: int, networks: int, clusters: int) -> Path:
    lines = [f"name: grid-{models * networks * clusters}", "grid:", "  model:"]
    lines += [f"    - {{name: tiny-mlp, batch_size: {i + 1}}}" for i in range(models)]
    lines += ["  network:"] + [f"    - {{inter_gbps: {i + 1}}}" for i in range(networks)]
    lines += ["  cluster:"] + [f"    - {{machines: {i + 1}}}" for i in range(clusters)]
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(argv: list[str], repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, cwd=ROOT
        )
        runs.append(json.loads(out.stdout))
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "rss_mb": max(r["rss_mb"] for r in runs),
        "rc": runs[-1]["rc"],
        "out": runs[-1]["out"],
    }


def main() -> None:
    gcbench = [sys.executable, "-m", "gcbench"]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print("gcbench validate of a huge suite (refused from its axis lengths)")
        for name, shape in (("10^9", (1000, 1000, 1000)), ("10^8", (100, 1000, 1000))):
            path = suite(d / f"{name}.yaml", *shape)
            m = measure([*gcbench, "validate", str(path)], repeats=5)
            print(
                f"  {name} grid points: {m['wall_s']:.2f} s, {m['rss_mb']:.0f} MB peak RSS, "
                f"exit {m['rc']} ({m['out'].splitlines()[-1][:60]}...)"
            )
        baseline = measure([sys.executable, "-c", "pass"], repeats=5)
        print(f"  (python -c pass: {baseline['wall_s']:.2f} s, {baseline['rss_mb']:.0f} MB)")

        print("expanding a large suite, cell ids included")
        for name, shape, repeats in (("10^5", (10, 100, 100), 3), ("10^6", (100, 100, 100), 1)):
            path = suite(d / f"{name}.yaml", *shape)
            runs = []
            for _ in range(repeats):
                out = measure([sys.executable, "-c", EXPAND, str(path)], repeats=1)
                runs.append((json.loads(out["out"].splitlines()[-1]), out))
            expand_s = statistics.median(r["expand_s"] for r, _ in runs)
            wall_s = statistics.median(o["wall_s"] for _, o in runs)
            rss = max(o["rss_mb"] for _, o in runs)
            cells = runs[0][0]["ids"]
            print(
                f"  {name}: {cells:,} cells, distinct ids; expand + ids {expand_s:.2f} s "
                f"(process {wall_s:.2f} s, {rss:.0f} MB peak RSS)"
            )
            v = measure([*gcbench, "validate", str(path)], repeats=repeats)
            print(
                f"  {name}: gcbench validate {v['wall_s']:.2f} s, {v['rss_mb']:.0f} MB peak RSS, "
                f"exit {v['rc']}"
            )


if __name__ == "__main__":
    main()
