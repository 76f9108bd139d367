"""The CPU fast paths' loop: a 1-D range cut into fixed chunks, run on a small thread pool.

numpy releases the GIL inside its loops, so two chunks run at once on two cores; within a
chunk the work goes block by block so that its temporaries stay in cache. Chunks have a
fixed size (never derived from the thread count) and results come back in chunk order,
so partial sums combined in that order give the same bits on any machine.

Chunks are claimed one at a time by whichever thread is free (the caller included), so
a helper thread that starts late, because another process holds the other core, costs
nothing: the caller has taken its chunks meanwhile. (A static split, as OpenMP's, waits
for the late thread's half.)

Every thread has its own scratch (`scratch`), grown on demand and consumed within one
chunk. The pool has `torch.get_num_threads() - 1` threads; with one thread everything
runs in the caller.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")

BLOCK = 5 * 2**16  # elements per block within a chunk (1.25 MiB of fp32): a multiple of
# 8 (bit packing) and 5 (3LC's groups); few numpy calls per element (each call is a GIL
# hand-over between the threads), temporaries still in the shared L3
CHUNK = 4 * BLOCK  # elements per task (5 MiB of fp32)

_local = threading.local()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()


def _threads() -> int:
    import torch

    return max(1, torch.get_num_threads())


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != workers:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="gcbench-compress")
            _pool_size = workers
        return _pool


def _forget_pool() -> None:
    """In a forked child the pool's threads are gone: start a new pool when needed (work
    submitted to the old one would never run; the caller would do it all anyway)."""
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def scratch(name: str, n: int, dtype: Any) -> np.ndarray:
    """A thread-local temporary of n elements (contents undefined)."""
    bufs: dict[tuple[str, np.dtype], np.ndarray] | None = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    dt = np.dtype(dtype)
    buf = bufs.get((name, dt))
    if buf is None or buf.size < n:
        buf = bufs[(name, dt)] = np.empty(max(n, BLOCK), dt)
    return buf[:n]


def ranges(n: int, chunk: int = CHUNK) -> list[tuple[int, int]]:
    return [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]


class _Job(Generic[T]):
    """Chunks claimed one at a time; `finished` is set when the last one is done."""

    def __init__(self, parts: list[tuple[int, int]], fn: Callable[[int, int], T]):
        self.parts, self.fn = parts, fn
        self.results: list[Any] = [None] * len(parts)
        self.next = self.done = 0
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.finished = threading.Event()

    def work(self) -> None:
        while True:
            with self.lock:
                i = self.next
                if i >= len(self.parts) or self.error is not None:
                    return
                self.next = i + 1
            try:
                result, error = self.fn(*self.parts[i]), None
            except BaseException as e:  # handed to the caller
                result, error = None, e
            with self.lock:
                self.results[i] = result
                if error is not None and self.error is None:
                    self.error = error
                self.done += 1
                if self.done == self.next and (
                    self.next == len(self.parts) or self.error is not None
                ):
                    self.finished.set()


def for_chunks(n: int, fn: Callable[[int, int], T], chunk: int = CHUNK) -> list[T]:
    """[fn(lo, hi) for each chunk [lo, hi) of [0, n)], run by the caller and the pool;
    results in chunk order. An exception in any chunk is raised here."""
    parts = ranges(n, chunk)
    threads = min(_threads(), len(parts))
    if threads <= 1:
        return [fn(lo, hi) for lo, hi in parts]
    job: _Job[T] = _Job(parts, fn)
    pool = _executor(threads - 1)
    for _ in range(threads - 1):
        pool.submit(job.work)
    job.work()
    job.finished.wait()
    if job.error is not None:
        raise job.error
    return job.results


def blocks(lo: int, hi: int, block: int | None = None) -> list[tuple[int, int]]:
    """[lo, hi) in blocks of `block` (default `BLOCK`) elements."""
    size = block or BLOCK
    return [(b, min(hi, b + size)) for b in range(lo, hi, size)]


def _blas_asum() -> dict[np.dtype, Callable[[int, int], float]]:
    """BLAS `sasum`/`dasum` (Σ|x| in one vectorised read) from the OpenBLAS that numpy
    wheels bundle, through ctypes (which releases the GIL). numpy exposes dot but no
    asum, and |x| then a dot with ones reads the block three times: 49 µs against 6 µs
    for a 1.25 MiB block here. Empty where that library is absent (other numpy builds):
    `abs_sum` then takes the numpy route."""
    import ctypes
    import glob

    found: dict[np.dtype, Callable[[int, int], float]] = {}
    wheel_libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    libs = glob.glob(os.path.join(wheel_libs, "*openblas*"))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for dtype, ctype, names in (
            (np.float32, ctypes.c_float, ("scipy_cblas_sasum64_", "cblas_sasum")),
            (np.float64, ctypes.c_double, ("scipy_cblas_dasum64_", "cblas_dasum")),
        ):
            for name in names:
                fn = getattr(lib, name, None)
                if fn is None:
                    continue
                index = ctypes.c_int64 if name.endswith("64_") else ctypes.c_int
                fn.restype = ctype
                fn.argtypes = [index, ctypes.c_void_p, index]
                found[np.dtype(dtype)] = _asum_call(fn)
                break
        if found:
            break
    return found


def _asum_call(fn: Any) -> Callable[[int, int], float]:
    def asum(n: int, ptr: int) -> float:
        return float(fn(n, ptr, 1))

    return asum


_ASUM: dict[np.dtype, Callable[[int, int], float]] | None = None
ASUM_PIECE = 2**16  # elements per BLAS asum call (see abs_sum)


def abs_sum(block: np.ndarray) -> float:
    """Σ|x| of a contiguous 1-D float block, accumulated as BLAS does (in the block's
    precision, vectorised partial sums), or by numpy when no BLAS asum is found."""
    global _ASUM
    if _ASUM is None:
        _ASUM = _blas_asum()
    fn = _ASUM.get(block.dtype)
    if fn is not None and block.flags.c_contiguous:
        # In pieces of ASUM_PIECE: past ~2^17 elements OpenBLAS splits asum over threads
        # of its own, which fight this pool's for the cores (2.5x slower here).
        ptr, size, step = block.ctypes.data, block.size, ASUM_PIECE
        return sum(
            fn(min(step, size - i), ptr + i * block.itemsize) for i in range(0, size, step)
        )
    t = scratch("abs", block.size, block.dtype)
    np.abs(block, out=t)
    return float(t.sum(dtype=np.float64))
