"""The planner's timeline kernel: one iteration's time, nothing else, fast.

Streams serve their jobs in the order they are added (`engine.Timeline`), so an
iteration is a recurrence over buckets: a job starts when its stream is free and its
predecessor has ended. `iteration_s` runs exactly the job sequence of
`iteration._simulate` (forward; per bucket its backward then the steps that need not wait
for backward; then, bucket by bucket, the steps that do; the update) with plain floats in
place of `Job`s, no trace, no metrics (a bucket's backward, a chain of jobs on the
compute stream, is summed left to right in C: the same additions), and each bucket's
lowered steps cached per what they depend on: the bucket's option and size (and its
tensors for low-rank compressors, whose ratio is per tensor), and, where the option reads
it, the bucket index modulo the CPU cores (an option with a CPU operation runs it on
`cpu:<b % cores>`) and the cluster size (rooted collectives' root is `b % n` for a group
of n, which divides the cluster size). The same floats in the same order: the result
equals `simulate(...).iteration_s` exactly (a test checks random plans).

The planner changes one tensor or one bucket at a time, so a candidate shares its first
buckets with the incumbent plan: `checkpoints` records the incumbent's state before each
bucket and `iteration_s(plan, checkpoints, at)` starts the candidate there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import add as _plus
from typing import Any

from gcbench.sim.iteration import Costs, Plan, _Ctx, _lower
from gcbench.sim.options import ROOTED
from gcbench.zoo.profile import ModelProfile

# A lowered step as the kernel keeps it: (stream, seconds, waits for backward, is comm)
_Lowered = tuple[str, float, bool, bool]


@dataclass
class _State:
    """The kernel's state just before one bucket's backward: stream free times, the
    compute chain's end, the iteration's end so far, the next tensor whose backward has
    not run, and how many deferred tails (`rest`) were pending."""

    free: dict[str, float]
    last: float
    end: float
    done: int
    pending: int


@dataclass
class Checkpoints:
    """A plan's state before each of its buckets, and its deferred tails: a plan that
    shares the first `a` buckets resumes at bucket `a` (`Kernel.iteration_s(plan, ck, a)`)."""

    states: list[_State]
    rest: list[tuple[list[_Lowered], int, float, int]]


class Kernel:
    """`iteration_s(plan)` for one profile and one set of costs, caching lowerings."""

    def __init__(self, profile: ModelProfile, costs: Costs):
        self.profile, self.costs = profile, costs
        self.numel = [t.numel for t in profile.tensors]
        self.backward = [t.backward_s for t in profile.tensors]
        self._bw = [d if d > 0 else 0.0 for d in self.backward]
        self.ctx = _Ctx(costs, self.numel)
        self.cache: dict[tuple[Any, ...], tuple[list[_Lowered], int]] = {}
        self._uses: dict[Any, tuple[bool, bool]] = {}
        self._by_size = costs.tensor_round_bytes is None
        self._prefix = [0]
        for n in self.numel:
            self._prefix.append(self._prefix[-1] + n)
        self.evaluations = 0

    def _steps(
        self, bucket: list[int], option: Any, b: int, size: float | None
    ) -> tuple[list[_Lowered], int]:
        x = self.ctx
        lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
        run = hi - lo + 1 == len(bucket)  # a run of tensors (every plan gcbench builds)
        tensors: Any
        if self._by_size:  # the lowering reads the bucket's size alone: key by it
            if size is None:
                if run:
                    n = self._prefix[hi + 1] - self._prefix[lo]
                else:
                    n = sum(x.numel[i] for i in bucket)
                size = float(n)  # what `_lower` computes from the bucket
            tensors = None
        else:  # low-rank ratios are per tensor
            tensors = (lo, hi) if run else tuple(bucket)
        uses = self._uses.get(option)
        if uses is None:  # what of the bucket index its lowering reads
            uses = self._uses[option] = (
                any(op.where == "cpu" for op in option.ops),
                any(p.collective in ROOTED for p in option.phases),
            )
        key = (tensors, option, size, b % x.cores if uses[0] else 0, b % x.N if uses[1] else 0)
        hit = self.cache.get(key)
        if hit is None:
            steps, cut = _lower(option, bucket, b, x, size)
            hit = self.cache[key] = (
                [(s[0], s[2] if s[2] > 0 else 0.0, s[5], s[1] == "comm") for s in steps],
                cut,
            )
        return hit

    def checkpoints(
        self, plan: Plan, spans: dict[int, list[float]] | None = None
    ) -> tuple[float, Checkpoints]:
        """The plan's iteration time and its state before each bucket; with `spans`, fills
        it with each bucket's communication span ([first start, last end], the simulator's
        comm jobs') for the planner's bubbles."""
        ck = Checkpoints([], [])
        return self._run(plan, None, 0, ck, spans), ck

    def iteration_s(self, plan: Plan, resume: Checkpoints | None = None, at: int = 0) -> float:
        """One iteration's time; with `resume`, the checkpoints of a plan whose first `at`
        buckets equal this plan's, phase one starts at bucket `at` from its state there
        (the same floats in the same order: the same result)."""
        return self._run(plan, resume, at, None)

    def _run(
        self,
        plan: Plan,
        resume: Checkpoints | None,
        at: int,
        record: Checkpoints | None,
        spans: dict[int, list[float]] | None = None,
    ) -> float:
        self.evaluations += 1
        profile = self.profile
        rest: list[tuple[list[_Lowered], int, float, int]]
        if resume is None:
            at = 0
            fwd = profile.forward_s if profile.forward_s > 0 else 0.0
            free: dict[str, float] = {"compute": fwd}
            end = last = fwd
            done = 0
            rest = []
        else:
            st = resume.states[at]
            free = dict(st.free)
            last, end, done = st.last, st.end, st.done
            rest = resume.rest[: st.pending]

        single = self.ctx.N == 1
        sizes = plan.elements
        backward = self._bw
        buckets, options = plan.buckets, plan.options
        states = None if record is None else record.states
        get, lower, keep = free.get, self._steps, rest.append
        for b in range(at, len(buckets)):
            bucket, opt = buckets[b], options[b]
            if states is not None:
                states.append(_State(dict(free), last, end, done, len(rest)))
            lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
            if hi - lo + 1 == len(bucket):  # a run of tensors: its backward is one chain
                if hi >= done:
                    t = get("compute", 0.0)
                    if last > t:
                        t = last
                    # left to right, as one job after another: the same float additions
                    t = reduce(_plus, backward[max(lo, done) : hi + 1], t)
                    free["compute"] = last = t
                    if t > end:
                        end = t
                    done = hi + 1
            else:
                for i in bucket:
                    if i >= done:
                        t = get("compute", 0.0)
                        if last > t:
                            t = last
                        t += backward[i]
                        free["compute"] = last = t
                        if t > end:
                            end = t
                        done = i + 1
            if single or opt is None:
                continue
            steps, cut = lower(bucket, opt, b, None if sizes is None else sizes[b])
            t = last
            for stream, dur, _, comm in steps[:cut] if cut < len(steps) else steps:
                start = get(stream, 0.0)
                if t > start:
                    start = t
                t = start + dur
                free[stream] = t
                if t > end:
                    end = t
                if spans is not None and comm:
                    _span(spans, b, start, t)
            keep((steps, cut, t, b))
        if record is not None:
            record.rest = rest
        backward_end = last
        tails = last
        for steps, cut, t, b in rest:
            if cut == len(steps):
                if t > tails:
                    tails = t
                continue
            for stream, dur, after_backward, comm in steps[cut:]:
                dep = t if not after_backward or t >= backward_end else backward_end
                start = get(stream, 0.0)
                if dep > start:
                    start = dep
                t = start + dur
                free[stream] = t
                if t > end:
                    end = t
                if spans is not None and comm:
                    _span(spans, b, start, t)
            if t > tails:
                tails = t
        update = profile.update_s if profile.update_s > 0 else 0.0
        start = get("compute", 0.0)
        if tails > start:
            start = tails
        t = start + update
        return t if t > end else end


def _span(spans: dict[int, list[float]], b: int, start: float, end: float) -> None:
    s = spans.get(b)
    if s is None:
        spans[b] = [start, end]
    else:
        if start < s[0]:
            s[0] = start
        if end > s[1]:
            s[1] = end
