"""A deterministic timeline of jobs on streams, each stream serving in a fixed order.

Work is a set of `Job`s, each on one stream (a GPU's compute stream, a link, a CPU core)
with a duration and the jobs it depends on. Every stream serves its jobs in the order
they were added to it — never in arrival order (DESIGN §5): NCCL launches collectives in
the same order on every rank, and a fixed order keeps the timeline monotone (more
bandwidth, more cores or cheaper compression never lengthen a plan). A job starts when the
job before it on its stream and all its dependencies have finished:

    start = max(end of the stream's previous job, ends of its dependencies)

A job can only depend on jobs added before it, and its stream predecessor was added
before it too, so the order of `add` calls is a topological order: each job is timed the
moment it is added, in O(1). One iteration is this recurrence over its jobs — the exact
kernel the planner scores candidates with. No framework imports.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector: building thousands of linked jobs would
    otherwise trigger collections whose cost grows with the live jobs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Job:
    """One piece of work on one stream, timed when added. Has the attributes of a `Span`,
    so metrics can sweep jobs directly."""

    __slots__ = ("stream", "name", "kind", "dur_s", "bytes", "start_s", "end_s")
    worker = 0

    def __init__(
        self, stream: str, name: str, kind: str, dur_s: float, nbytes: float, start_s: float
    ):
        self.stream = stream
        self.name = name
        self.kind = kind  # forward | backward | compress | decompress | comm | copy | update
        self.dur_s = dur_s
        self.bytes = nbytes
        self.start_s = start_s
        self.end_s = start_s + dur_s


class Timeline:
    """Streams of jobs in the order they are added; each job timed on `add`."""

    def __init__(self) -> None:
        self.free: dict[str, float] = {}  # each stream's last end
        self.jobs: list[Job] = []
        self.end_s = 0.0

    def add(
        self,
        stream: str,
        name: str,
        kind: str,
        dur: float,
        deps: tuple[Job, ...] = (),
        nbytes: float = 0,
        earliest: float = 0.0,
    ) -> Job:
        """Append a job to `stream`'s service order and time it (no earlier than
        `earliest`: an emulated collective starts when its last peer is ready)."""
        start = self.free.get(stream, 0.0)
        if earliest > start:
            start = earliest
        for d in deps:
            if d.end_s > start:
                start = d.end_s
        job = Job(stream, name, kind, dur if dur > 0 else 0.0, nbytes, start)
        self.free[stream] = job.end_s
        if job.end_s > self.end_s:
            self.end_s = job.end_s
        self.jobs.append(job)
        return job

    def run(self) -> float:
        """When the last job ends (0 with no jobs). Jobs are timed as they are added."""
        return self.end_s
