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
    alternate: bool = False,
    block: int = 1,
) -> list[float]:
    """Median wall time of each of `fns` over `repeats` rounds, each round calling every
    function once in order (so they see the same machine state), after `warmup` rounds;
    `sync` waits for a device (CUDA) before each clock read. `alternate`: every other
    round in reverse order, so that no function always runs right after another (for
    memory-bound calls, whose time depends on what the cache last held). `block`: each
    function called that many times in a row within a round, every call timed, so that
    each sees its own allocations reused as in a training loop rather than the other's
    (the CPU allocator hands freed memory back to the system between large allocations
    of different sizes, and a call then pays fresh pages)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = list(zip(fns, times, strict=True))
        for fn, out in reversed(order) if alternate and r % 2 else order:
            for _ in range(block):
                t = time.perf_counter()
                fn()
                sync()
                out.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]
