"""A deterministic discrete-event engine for one iteration's timeline.

Work is a set of `Job`s, each on one stream (a GPU's compute stream, a link direction, a
CPU core, one inter-machine ring) with a duration and the jobs it depends on. Every stream
serves its jobs in the fixed order they were added to it — tensor index, then phase, as
NCCL launches collectives in the same order on every rank (DESIGN §5) — never in arrival
order; that keeps the timeline monotone: more bandwidth never lengthens a plan. A job
starts when it is at the head of its stream and all its dependencies have finished:
start = max(stream free, dependencies' ends).

Events (job completions) sit in a heap ordered by (time, priority, sequence number), so
ties resolve the same way on every run. No framework imports: plain Python, fast enough
for thousands of jobs per millisecond-scale simulation.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector: building and timing thousands of linked
    jobs would otherwise trigger collections whose cost grows with the live jobs, making a
    large timeline superlinear."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Job:
    """One piece of work on one stream; `start_s`/`end_s` are set by `Timeline.run`.
    Has the attributes of a `Span`, so metrics can sweep jobs directly."""

    __slots__ = ("stream", "name", "kind", "dur_s", "bytes", "deps", "start_s", "end_s",
                 "waiting", "dependents")  # fmt: skip
    worker = 0

    def __init__(
        self, stream: str, name: str, kind: str, dur_s: float, nbytes: int, deps: tuple[Job, ...]
    ):
        self.stream = stream
        self.name = name
        self.kind = kind  # forward | backward | compress | decompress | comm | update
        self.dur_s = dur_s if dur_s > 0 else 0.0
        self.bytes = nbytes
        self.deps = deps
        self.start_s = -1.0
        self.end_s = -1.0
        self.waiting = 0  # dependencies not yet finished
        self.dependents: list[Job] = []


class Timeline:
    """Streams of jobs in fixed service order; `run()` times them."""

    def __init__(self) -> None:
        self.order: dict[str, list[Job]] = {}
        self.jobs: list[Job] = []

    def add(
        self,
        stream: str,
        name: str,
        kind: str,
        dur: float,
        deps: tuple[Job, ...] = (),
        nbytes: int = 0,
    ) -> Job:
        """Append a job to `stream`'s service order."""
        job = Job(stream, name, kind, dur, nbytes, deps)
        queue = self.order.get(stream)
        if queue is None:
            self.order[stream] = queue = []
        queue.append(job)
        self.jobs.append(job)
        return job

    def run(self) -> float:
        """Time every job; returns when the last one ends (0 with no jobs)."""
        with no_gc():
            return self._run()

    def _run(self) -> float:
        for job in self.jobs:
            job.waiting = len(job.deps)
            job.dependents = []
            job.start_s = job.end_s = -1.0
        for job in self.jobs:
            for d in job.deps:
                d.dependents.append(job)
        head = {s: 0 for s in self.order}
        free = {s: 0.0 for s in self.order}
        rank = {s: i for i, s in enumerate(self.order)}
        heap: list[tuple[float, int, int, Job]] = []
        seq = 0

        def try_start(stream: str) -> None:
            nonlocal seq
            queue = self.order[stream]
            i = head[stream]
            if i >= len(queue) or queue[i].start_s >= 0:
                return
            job = queue[i]
            if job.waiting:
                return
            start = free[stream]
            for d in job.deps:
                if d.end_s > start:
                    start = d.end_s
            job.start_s = start
            job.end_s = start + job.dur_s
            heapq.heappush(heap, (job.end_s, rank[stream], seq, job))
            seq += 1

        for stream in self.order:
            try_start(stream)
        last = 0.0
        done = 0
        while heap:
            time, _, _, job = heapq.heappop(heap)
            last = time if time > last else last
            done += 1
            free[job.stream] = job.end_s
            head[job.stream] += 1
            try_start(job.stream)
            for dep in job.dependents:
                dep.waiting -= 1
                if dep.waiting == 0:
                    try_start(dep.stream)
        for job in self.jobs:  # drop the back-references: no reference cycles remain, so
            job.dependents = []  # refcounting frees a timeline at once, never the cyclic GC
        if done != len(self.jobs):
            stuck = next(j for j in self.jobs if j.start_s < 0)
            raise RuntimeError(f"timeline deadlock at {stuck.stream}:{stuck.name}")
        return last
