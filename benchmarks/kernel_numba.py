"""What the kernel's compiled resume (numba, `sim/_kernel_jit.py`) pays for.

    python benchmarks/kernel_numba.py [--repeats 5]

1. Algorithm 1 over the whole option space (what `gcbench run` plans with) on resnet101,
   bert-base, gpt2 and ugatit (8 x 8 V100 NVLink, 100 Gbps, dgc 1%, 48 cores), timed with
   the compiled resume and with the kernel's Python resume (the same recurrence: the
   kernel falls back to it wherever the compiled one does not apply), interleaved in one
   process, median of `--repeats`; the same plan both ways (checked).
2. numba's cold start: `kernel.warm()` (numba's import and the resume's compilation) in
   a fresh process with an empty numba cache, then again with the cache it wrote (what
   every later process pays).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from gcbench.backends.simulate import cell_profile, costs_for
from gcbench.config.models import Cell, Constraints
from gcbench.plan.greedy import greedy
from gcbench.plan.space import planner_space
from gcbench.sim import kernel as K


def _planner(repeats: int) -> None:
    K.warm()
    every = planner_space(Constraints(space="all"))
    original = K.Kernel.__init__

    def python_only(self: K.Kernel, *args: object) -> None:
        original(self, *args)  # type: ignore[arg-type]
        self._compiles = False

    print(f"Algorithm 1, whole space, median of {repeats} (compiled and Python interleaved)")
    print(f"  {'model':10s} {'compiled ms':>11s} {'python ms':>10s} {'gain':>6s}")
    for model in ("resnet101", "bert-base", "gpt2", "ugatit"):
        c = Cell.model_validate({
            "model": model, "compressor": "dgc-1pct",
            "network": {"intra": "nvlink", "intra_gbs": 150, "inter_gbps": 100},
            "cluster": {"machines": 8, "gpus_per_machine": 8, "cpu_cores": 48},
            "strategy": "bytecomp",
        })  # fmt: skip
        profile, costs = cell_profile(c), costs_for(c)
        fast, slow = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a = greedy(profile, costs, space=every.options, start=every.start, buckets=True)
            t1 = time.perf_counter()
            K.Kernel.__init__ = python_only  # type: ignore[method-assign]
            try:
                b = greedy(profile, costs, space=every.options, start=every.start, buckets=True)
            finally:
                K.Kernel.__init__ = original  # type: ignore[method-assign]
            t2 = time.perf_counter()
            assert a.options == b.options and a.iteration_s == b.iteration_s
            fast.append(t1 - t0)
            slow.append(t2 - t1)
        f, s = statistics.median(fast) * 1e3, statistics.median(slow) * 1e3
        print(f"  {model:10s} {f:11.1f} {s:10.1f} {s / f:5.2f}x")


def _cold_start() -> None:
    code = (
        "import time; t0 = time.perf_counter(); from gcbench.sim.kernel import warm; warm(); "
        "print(f'{time.perf_counter() - t0:.2f}')"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        times = [
            subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
            for _ in range(2)
        ]  # fmt: skip
    print(f"numba cold start (warm()): {times[0]} s with an empty cache, {times[1]} s cached")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    _cold_start()
    _planner(args.repeats)


if __name__ == "__main__":
    main()
