"""End-to-end costs of the foundation, measured side by side in one run.

    python benchmarks/runner.py

Prints: how long rejecting a bad suite takes (a `gcbench validate` process against a bare
`python -c pass`), and what the smoke suite costs end to end through `gcbench run` versus
simulating its cells in-process (the difference is Ray start-up, task dispatch, worker
imports and the atomic writes).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
    for i in range(8)
)
BAD = {
    "several mistakes": "name: bad\ncolour: 1\ngrid:\n  model: nope\n  network: {inter_gbps: -1}\n"
    "  cluster: {machines: 0}\n",
    "alias bomb": BOMB,
    "python tag": "name: !!python/object/apply:os.system ['true']\n",
}


def wall(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        print("rejecting a bad suite (median of 5 interleaved runs, one process each)")
        for name, text in BAD.items():
            path = tmpdir / "bad.yaml"
            path.write_text(text)
            base, val = [], []
            for _ in range(5):
                base.append(wall([sys.executable, "-c", "pass"], tmpdir))
                val.append(wall([sys.executable, "-m", "gcbench", "validate", str(path)], tmpdir))
            b, v = statistics.median(base), statistics.median(val)
            print(
                f"  {name:<17} gcbench validate {v * 1e3:7.0f} ms   python -c pass "
                f"{b * 1e3:5.0f} ms   ratio {v / b:4.1f}x"
            )

        from gcbench.config import expand, load_suite
        from gcbench.sim import simulate_cell

        suite = load_suite(ROOT / "suites/smoke.yaml")
        cells = expand(suite)
        start = time.perf_counter()
        for c in cells:
            simulate_cell(c)  # cold: builds each model's profile once
        cold = time.perf_counter() - start
        start = time.perf_counter()
        for c in cells:
            for _ in range(suite.repetitions):
                simulate_cell(c)
        warm = time.perf_counter() - start
        e2e = wall(
            [
                sys.executable,
                "-m",
                "gcbench",
                "run",
                str(ROOT / "suites/smoke.yaml"),
                "--results",
                str(tmpdir / "r"),
                "--reports",
                str(tmpdir / "rep"),
            ],
            tmpdir,
        )
        print(f"smoke suite, {len(cells)} cells x {suite.repetitions} repetitions")
        print(
            f"  in-process simulation: {cold:.2f} s cold (profiles built), {warm * 1e3:.0f} ms warm"
        )
        print(f"  gcbench run end to end (local Ray start, tasks, writes, report): {e2e:.1f} s")
        print(f"  ratio end-to-end / in-process cold: {e2e / cold:.1f}x")


if __name__ == "__main__":
    main()
