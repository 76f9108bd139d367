"""End-to-end costs of the foundation, measured side by side in one run.

    python benchmarks/runner.py
    python benchmarks/runner.py --suite suites/nvlink100.yaml   # Ray's overhead on a suite

With `--suite`: the suite through `gcbench run` (local Ray, reports off) against the same
cells simulated in-process with their writes (the Records and traces and plans written
by `RunStore`, one process, cold caches), and Ray's start-up and shutdown alone; Ray's
overhead = (run - start-up - in-process) / in-process. Issue #13 asks <= 20% on
nvlink100, and the whole run <= 2 minutes here.

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


def wall(cmd: list[str], cwd: Path, check: bool = False) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
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

        from gcbench.backends.simulate import simulate_cell
        from gcbench.config import expand, load_suite

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


def suite_overhead(path: Path) -> None:
    from gcbench.config import expand, load_suite
    from gcbench.results.store import RunStore
    from gcbench.runner import execute_cell
    from gcbench.runner.run import _record

    suite = load_suite(path)
    cells = expand(suite)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        start_ray = wall(
            [sys.executable, "-c", "from gcbench.runner.local import connect; connect("
             "num_cpus=2); import ray; ray.shutdown()"],
            tmpdir,
            check=True,
        )  # fmt: skip
        start = time.perf_counter()
        store, _ = RunStore.open(tmpdir / "inproc", suite.name)
        for c in cells:
            rows, spans, plan = execute_cell(c, suite.repetitions)
            rows = [_record(c, r, store, suite, None) for r in rows]  # as the runner does
            store.write_cell(c.id, rows, spans, plan)
        inproc = time.perf_counter() - start
        runs = {}
        for cpus in (1, 2):
            runs[cpus] = wall(
                [sys.executable, "-m", "gcbench", "run", str(path), "--results",
                 str(tmpdir / f"r{cpus}"), "--no-report", "--num-cpus", str(cpus)],
                tmpdir,
                check=True,
            )  # fmt: skip
    print(f"{path.name}: {len(cells)} cells x {suite.repetitions} repetitions")
    print(f"  in-process with writes: {inproc:.1f} s (one process, one core)")
    print(f"  Ray start-up and shutdown alone: {start_ray:.1f} s")
    for cpus, e2e in runs.items():
        over = (e2e - start_ray - inproc) / inproc
        print(
            f"  gcbench run, local Ray with {cpus} CPU(s), no report: {e2e:.1f} s; "
            f"(run - start-up - in-process) / in-process = {over:+.1%}"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--suite":
        suite_overhead(Path(sys.argv[2]).resolve())
    else:
        main()
