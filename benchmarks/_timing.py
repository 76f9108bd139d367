"""Timing helpers shared by the benchmark scripts (run them from the project root)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn`, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def interleaved_medians(
    fns: Sequence[Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    sync: Callable[[], None] = lambda: None,
) -> list[float]:
    """Median wall time of each of `fns` over `repeats` rounds, each round calling every
    function once in order (so they see the same machine state), after `warmup` rounds;
    `sync` waits for a device (CUDA) before each clock read."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times, strict=True):
            t = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]
