"""How long a one-cell answer takes from the command line (issue #34: one-second answers).

    python benchmarks/cli_latency.py [--runs 5]

`gcbench simulate --model bert-base --inter-gbps 25 --machines 4` (which also simulates
its two baselines) in fresh processes, alternating: with an empty trace cache (the
model traced: torch imported, the forward run on the meta device) and with the cache
the previous run filled (`gcbench.zoo.traces`: no torch). Medians of `--runs` each,
side by side, and `gcbench plan` of the same cell warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CELL = ["--model", "bert-base", "--inter-gbps", "25", "--machines", "4"]


def timed(args: list[str], cache: str) -> float:
    env = {**os.environ, "GCBENCH_CACHE": cache}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gcbench", *args], env=env, check=True,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    cold, warm, plan = [], [], []
    with tempfile.TemporaryDirectory() as root:
        for _ in range(runs):
            cache = os.path.join(root, "cache")
            shutil.rmtree(cache, ignore_errors=True)
            cold.append(timed(["simulate", *CELL], cache))
            warm.append(timed(["simulate", *CELL], cache))
            plan.append(timed(["plan", *CELL, "--compressor", "dgc"], cache))
    c, w, p = (statistics.median(x) for x in (cold, warm, plan))
    print(f"gcbench simulate (bert-base, 4 x 8): cold cache {c:.2f} s, warm {w:.2f} s "
          f"(x{c / w:.1f}); gcbench plan --compressor dgc, warm: {p:.2f} s "
          f"(medians of {runs})")  # fmt: skip


if __name__ == "__main__":
    main()
