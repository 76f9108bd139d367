"""The reference event engine: an iteration built as linked `Job`s, each timed as it is
added (the simulator's first timeline, kept to test the one recurrence against,
`gcbench.sim.timeline`). Streams serve their jobs in the order they are added; a job
starts when its stream is free and its dependencies have ended. Slow and obvious on
purpose: every dependency is an object, nothing is cached, nothing is inlined."""

from __future__ import annotations

from collections.abc import Sequence

from gcbench.sim.iteration import Costs, Plan, SimContext, lower
from gcbench.sim.timeline import Job, Sync
from gcbench.zoo.profile import ModelProfile


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


def reference_iteration(
    profile: ModelProfile,
    costs: Costs,
    plan: Plan,
    payloads: Sequence[Sequence[float | None] | None] | None = None,
    sync: Sync | None = None,
) -> tuple[float, list[Job]]:
    """One iteration's time and jobs, by the event engine: the forward; per bucket its
    tensors' backward, then its steps before the first that waits for backward (all of
    them for a synchronous compressor, and backward after them); then each bucket's
    other steps, those that wait depending on the whole backward too; the update after
    all."""
    tl = Timeline()

    def add(stream, name, kind, dur, deps=(), nbytes=0):
        if sync is None or kind != "comm":
            return tl.add(stream, name, kind, dur, deps, nbytes)
        start = tl.free.get(stream, 0.0)
        for d in deps:
            start = max(start, d.end_s)
        start, end = sync(name.split()[2].split(":")[0], start, dur if dur > 0 else 0.0)
        return tl.add(stream, name, kind, end - start, deps, nbytes, earliest=start)

    last = add("compute", "forward", "forward", profile.forward_s)
    x = SimContext(costs, [t.numel for t in profile.tensors])
    rest, tails, done = [], [], 0
    for b, (bucket, opt) in enumerate(zip(plan.buckets, plan.options, strict=True)):
        for i in bucket:
            if i >= done:
                t = profile.tensors[i]
                last = add("compute", t.name, "backward", t.backward_s, (last,))
                done = i + 1
        if costs.gpus == 1 or opt is None:
            continue
        size = None if plan.elements is None else plan.elements[b]
        steps, cut = lower(opt, bucket, b, x, size, None if payloads is None else payloads[b])
        job = last
        if costs.synchronous:
            for s in steps:
                job = add(s.stream, s.label, s.kind, s.dur, (job,), s.bytes)
            last = job
            continue
        for s in steps[:cut]:
            job = add(s.stream, s.label, s.kind, s.dur, (job,), s.bytes)
        rest.append((steps, cut, job))
    backward_end = last
    for steps, cut, job in rest:
        for s in steps[cut:]:
            deps = (job, backward_end) if s.waits else (job,)
            job = add(s.stream, s.label, s.kind, s.dur, deps, s.bytes)
        tails.append(job)
    add("compute", "update", "update", profile.update_s, (last, *tails))
    return tl.end_s, tl.jobs
