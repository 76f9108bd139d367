"""One iteration's timeline: the one recurrence that times every iteration gcbench
simulates, emulates on a virtual clock or plans (DESIGN §5).

Work is jobs on streams (a GPU's compute stream, a link, a CPU core). Every stream serves
its jobs in the order they are issued — never in arrival order: NCCL launches collectives
in the same order on every rank, and a fixed order keeps the timeline monotone (more
bandwidth, more cores or cheaper compression never lengthen a plan). A job starts when its
stream is free and the job before it in its chain has ended (and, for a step that waits
for it, when the whole backward has ended):

    start = max(end of the stream's previous job, end of the chain's previous job)

An iteration issues, in this order: the forward; per bucket, its tensors' backward not yet
run, then the bucket's lowered steps (`Step`, `iteration.lower`) up to the first that waits
for the whole backward; then, bucket by bucket, the steps from there on; the update after
all of them. Each job is timed the moment it is issued, with plain floats: `Timeline.begin`,
`phase1` and `phase2` are that recurrence, and nothing else in gcbench times an iteration.

A `Watch` sees every job as it is timed, and may move a collective: `Recorder` keeps them
as `Job`s (the simulator's trace and metrics) and, on an emulated worker's virtual clock,
agrees each collective's start and end with its peers; `Spans` keeps each bucket's
communication span (the planner's bubbles); the planner's bounds queue them per stream
(`bounds.slot`). With no watch, the loop is the planner kernel's hot path: the kernel
(`kernel.Kernel`) adds caches of lowerings, checkpoints and resumes over it, not copies.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from operator import add as _plus
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from gcbench.zoo.profile import ModelProfile

if TYPE_CHECKING:
    from gcbench.sim.iteration import Costs, Plan


class Step(NamedTuple):
    """One step of a bucket's lowered program (`iteration.lower`)."""

    stream: str  # compute | cpu:<i> | pcie:d2h | pcie:h2d | intra | inter_tx | root:...
    kind: str  # compress | decompress | comm | copy
    dur: float  # seconds (the recurrence takes a negative one as 0)
    bytes: float  # the mean bytes one GPU sends in it
    label: str  # `bucket <b> <what>` ("" where the caller asked for no labels)
    waits: bool  # waits for the whole backward to end, besides its chain


# `Step((stream, kind, dur, bytes, label, waits))` without the Python frame of a named
# tuple's constructor (the planner lowers thousands of options: measured 10% of its time)
new_step = partial(tuple.__new__, Step)


class Lowering(NamedTuple):
    """A bucket's program: its steps, and the first that must wait for backward to end
    (len(steps) where none does): the steps before it run in phase one, beside backward;
    the seconds of the steps from that one on."""

    steps: Sequence[Step]
    cut: int
    post_s: float


class Program(Protocol):
    """What `phase1` reads of a bucket's lowering (a `Lowering`, or the kernel's cached
    one, which carries more)."""

    @property
    def steps(self) -> Sequence[Step]: ...

    @property
    def cut(self) -> int: ...

    @property
    def post_s(self) -> float: ...


# `lowering(bucket, option, b, size)`: bucket b's program under `option` (`size`: the
# elements it holds where the plan says, else None: its tensors')
Lowerer = Callable[[list[int], Any, int, "float | None"], Program]


def as_program(steps: Sequence[Step], cut: int) -> Lowering:
    """A bucket's program from its lowered steps, negative seconds taken as 0."""
    durs = [s.dur for s in steps]
    if durs and min(durs) < 0:
        steps = [s if s.dur >= 0 else s._replace(dur=0.0) for s in steps]
        durs = [d if d >= 0 else 0.0 for d in durs]
    return Lowering(steps, cut, sum(durs[cut:]))


def lowering_key(bucket: list[int], option: Any, b: int) -> tuple[int, ...]:
    """What a memo of lowerings (`phase1`'s `memo`) looks one up by: the option's identity,
    the bucket's index and, for a run of tensors (every plan gcbench builds), its first and
    last tensor, else the bucket's identity (the memo keeps both objects alive)."""
    lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
    return (lo, hi, id(option), b) if hi - lo + 1 == len(bucket) else (id(bucket), id(option), b)


class Exceeded(Exception):
    """A bounded run (`limit`) stopped where a lower bound on the iteration's time, `low`,
    passed the limit: the plan cannot win where the planner asked (`Kernel.resume`)."""

    def __init__(self, low: float):
        super().__init__(low)
        self.low = low


# A chain's end plus its remaining seconds is summed in another order than the
# recurrence adds them: a bound takes this much off for rounding
_SLACK = 1 - 1e-12


# A bucket's deferred steps (phase two): its steps, its cut, the end of its chain after
# phase one, the bucket's index
Tail = tuple[Sequence[Step], int, float, int]


@dataclass
class State:
    """The recurrence's state just before one bucket's backward: stream free times, the
    compute chain's end, the next tensor whose backward has not run, and how many
    deferred tails were pending."""

    free: dict[str, float]
    last: float
    done: int
    pending: int


class Job:
    """One timed job on one stream. Has the attributes of a `trace.Span`, so metrics can
    sweep jobs directly."""

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


class Watch:
    """Sees each job as the recurrence times it (the default sees nothing). `step` returns
    the step's end: `start + step.dur`, or later where a watch moves it. `chain` is
    called only where `chains` is true."""

    chains = False

    def forward(self, end: float) -> None:
        """The forward pass, from 0 to `end`."""

    def backward(self, lo: int, hi: int, dep: float, start: float) -> None:
        """Tensors lo..hi's backward, one after another from `start` (`dep`: the compute
        chain's end before them)."""

    def chain(self, b: int, steps: Sequence[Step], cut: int, late: bool) -> None:
        """Bucket `b`'s steps about to be timed: before `cut` in phase one, from it
        (`late`) in phase two."""

    def step(self, b: int, step: Step, dep: float, start: float) -> float:
        """Bucket `b`'s `step`, ready at `dep`, its stream free from `start`."""
        return start + step.dur

    def update(self, start: float) -> None:
        """The optimizer's update, from `start`."""


class Timeline:
    """The recurrence for one profile and one set of costs. `phase1` and `phase2` take
    the state as plain values and update `free` and `rest` in place, so that the planner's
    kernel can start them from a checkpoint.

    The iteration ends with the update, which starts after every chain has ended (a
    chain's steps end in order: each starts after the one before it) and after the
    backward: so no job ends later than the update, and the recurrence keeps no running
    maximum of the jobs' ends."""

    def __init__(self, profile: ModelProfile, costs: Costs):
        self.profile, self.costs = profile, costs
        self._bw = [t.backward_s if t.backward_s > 0 else 0.0 for t in profile.tensors]
        self._forward = profile.forward_s if profile.forward_s > 0 else 0.0
        self._update = (profile.update_s if profile.update_s > 0 else 0.0) + max(
            costs.iteration_overhead_s, 0.0
        )
        self._single = costs.gpus == 1  # one GPU sends nothing
        # a synchronous compressor (PowerSGD's torch hook on a GPU) holds backward while
        # its bucket's whole chain runs: nothing is deferred
        self._synchronous = costs.synchronous

    def run(
        self, plan: Plan, lowering: Lowerer, watch: Watch | None = None,
    ) -> float:  # fmt: skip
        """One iteration's time, each bucket lowered by `lowering(bucket, option, b, size)`."""
        free, last = self.begin(watch)
        rest: list[Tail] = []
        last, _ = self.phase1(plan, 0, len(plan.buckets), free, last, 0, rest, lowering,
                              watch=watch)  # fmt: skip
        return self.phase2(free, last, rest, watch)

    def begin(self, watch: Watch | None = None) -> tuple[dict[str, float], float]:
        """The state after the forward pass: (free, last); no backward has run."""
        fwd = self._forward
        if watch is not None:
            watch.forward(fwd)
        return {"compute": fwd}, fwd

    def backward(
        self,
        bucket: list[int],
        free: dict[str, float],
        last: float,
        done: int,
        watch: Watch | None = None,
    ) -> tuple[float, int]:
        """The bucket's tensors' backward not yet run, on the compute stream (a tensor
        split over buckets is computed once): (last, done)."""
        bw = self._bw
        lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
        if hi - lo + 1 == len(bucket):  # a run of tensors: its backward is one chain
            if hi >= done:
                first = lo if lo > done else done
                t = free.get("compute", 0.0)
                if last > t:
                    t = last
                if watch is not None:
                    watch.backward(first, hi, last, t)
                # left to right, as one job after another: the same float additions
                t = reduce(_plus, bw[first : hi + 1], t)
                free["compute"] = last = t
                done = hi + 1
            return last, done
        for i in bucket:
            if i >= done:
                t = free.get("compute", 0.0)
                if last > t:
                    t = last
                if watch is not None:
                    watch.backward(i, i, last, t)
                t += bw[i]
                free["compute"] = last = t
                done = i + 1
        return last, done

    def phase1(
        self,
        plan: Plan,
        first: int,
        stop: int,
        free: dict[str, float],
        last: float,
        done: int,
        rest: list[Tail],
        lowering: Lowerer,
        states: list[State] | None = None,
        watch: Watch | None = None,
        memo: Callable[[tuple[int, ...]], Any] | None = None,
        limit: float = math.inf,
    ) -> tuple[float, int]:
        """Buckets first..stop-1: each one's backward, then its steps that need not wait
        for backward (`free` and `rest` updated in place): (last, done). `states`
        gets the state before each bucket (the kernel's checkpoints); `memo`, where given,
        looks a lowering up first, by (first, last tensor, id(option), b) for a run of
        tensors, else by (id(bucket), id(option), b): (bucket, option, lowering) or None.
        Raises `Exceeded` once a chain's end, its remaining seconds and the update pass
        `limit` (no later job can end earlier)."""
        single, synchronous = self._single, self._synchronous
        sizes = plan.elements
        buckets, options = plan.buckets, plan.options
        get, keep, bw = free.get, rest.append, self._bw
        bounded, update = limit < math.inf, self._update
        for b in range(first, stop):
            bucket, opt = buckets[b], options[b]
            if states is not None:
                states.append(State(dict(free), last, done, len(rest)))
            # `backward`, inline for a run of tensors (the hot path: every plan gcbench
            # builds), the same additions
            lo = bucket[0] if bucket else 0
            hi = bucket[-1] if bucket else -1
            run = hi - lo + 1 == len(bucket)
            if not run or watch is not None:
                last, done = self.backward(bucket, free, last, done, watch)
            elif hi >= done:
                t = get("compute", 0.0)
                if t < last:
                    t = last
                if hi == lo or hi == done:  # one tensor left: the same single addition
                    t += bw[hi]
                else:
                    t = reduce(_plus, bw[lo if lo > done else done : hi + 1], t)
                free["compute"] = last = t
                done = hi + 1
            if single or opt is None:
                continue
            got = None if memo is None else memo(  # (`lowering_key`, inline)
                (lo, hi, id(opt), b) if run else (id(bucket), id(opt), b)
            )
            hit = got[2] if got is not None else lowering(
                bucket, opt, b, None if sizes is None else sizes[b]
            )
            steps, cut = hit.steps, hit.cut
            if synchronous:
                cut = len(steps)
            if watch is not None and watch.chains:
                watch.chain(b, steps, cut, False)
            t = last
            for step in steps[:cut] if cut < len(steps) else steps:
                stream, _, dur, _, _, _ = step
                start = get(stream, 0.0)
                if t > start:
                    start = t
                t = start + dur if watch is None else watch.step(b, step, t, start)
                free[stream] = t
            if synchronous:  # backward goes on after the whole chain
                last = t
                continue
            keep((steps, cut, t, b))
            if bounded and (t + hit.post_s + update) * _SLACK > limit:
                raise Exceeded((t + hit.post_s + update) * _SLACK)
        return last, done

    def phase2(
        self,
        free: dict[str, float],
        last: float,
        rest: list[Tail],
        watch: Watch | None = None,
        limit: float = math.inf,
    ) -> float:
        """After backward: each bucket's steps that wait for it, in bucket order; the
        update after every chain. The iteration's time (`limit`: as in `phase1`)."""
        get = free.get
        update = self._update
        backward_end = last
        tails = last
        for steps, cut, t, b in rest:
            if cut == len(steps):
                if t > tails:
                    tails = t
                continue
            if watch is not None and watch.chains:
                watch.chain(b, steps, cut, True)
            for step in steps[cut:]:
                stream, _, dur, _, _, waits = step
                dep = t if not waits or t >= backward_end else backward_end
                start = get(stream, 0.0)
                if dep > start:
                    start = dep
                t = start + dur if watch is None else watch.step(b, step, dep, start)
                free[stream] = t
            if t > tails:
                tails = t
                if (t + update) * _SLACK > limit:
                    raise Exceeded((t + update) * _SLACK)
        start = get("compute", 0.0)
        if tails > start:
            start = tails
        t = start + update
        if watch is not None:
            watch.update(start)
        return t


# An emulated worker's agreement with its peers on one collective (`gcbench.cluster`):
# (level, its local start, its duration) -> the collective's (start, end) across the group
Sync = Callable[[str, float, float], tuple[float, float]]


class Recorder(Watch):
    """Keeps every job (`jobs`, in the order issued)."""

    def __init__(self, profile: ModelProfile, overhead_s: float = 0.0):
        self.jobs: list[Job] = []
        self._tensors = profile.tensors
        # the update's job holds the iteration's fixed overhead (`Costs.iteration_overhead_s`)
        self._update = (profile.update_s if profile.update_s > 0 else 0.0) + max(overhead_s, 0.0)

    def forward(self, end: float) -> None:
        self.jobs.append(Job("compute", "forward", "forward", end, 0, 0.0))

    def backward(self, lo: int, hi: int, dep: float, start: float) -> None:
        jobs, tensors = self.jobs, self._tensors
        for i in range(lo, hi + 1):
            t = tensors[i]
            job = Job("compute", t.name, "backward", t.backward_s if t.backward_s > 0 else 0.0,
                      0, start)  # fmt: skip
            jobs.append(job)
            start = job.end_s

    def step(self, b: int, step: Step, dep: float, start: float) -> float:
        stream, kind, dur, nbytes, label, _ = step
        job = Job(stream, label, kind, dur, nbytes, start)
        self.jobs.append(job)
        return job.end_s

    def update(self, start: float) -> None:
        self.jobs.append(Job("compute", "update", "update", self._update, 0, start))


class Synced(Recorder):
    """A `Recorder` on an emulated worker's virtual clock: a collective starts when its
    last peer is ready and lasts until its slowest peer is done (`sync`, by the level its
    label names: `bucket <b> <level>:...`)."""

    def __init__(self, profile: ModelProfile, sync: Sync, overhead_s: float = 0.0):
        super().__init__(profile, overhead_s)
        self._sync = sync

    def step(self, b: int, step: Step, dep: float, start: float) -> float:
        if step.kind != "comm":
            return super().step(b, step, dep, start)
        at, until = self._sync(step.label.split()[2].split(":")[0], start, step.dur)
        dur = until - at
        return super().step(b, step._replace(dur=dur if dur > 0 else 0.0), dep, max(start, at))


class Spans(Watch):
    """Each bucket's communication span, [first start, last end] (the planner's
    bubbles, `plan.greedy`)."""

    def __init__(self, spans: dict[int, list[float]]):
        self.spans = spans

    def step(self, b: int, step: Step, dep: float, start: float) -> float:
        end = start + step.dur
        if step.kind == "comm":
            s = self.spans.get(b)
            if s is None:
                self.spans[b] = [start, end]
            else:
                if start < s[0]:
                    s[0] = start
                if end > s[1]:
                    s[1] = end
        return end


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
