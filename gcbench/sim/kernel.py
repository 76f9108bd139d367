"""The planner's timeline kernel: one iteration's time, nothing else, fast.

The kernel is `timeline.Timeline` — the one recurrence the simulator runs too — with
the planner's speed tricks as a layer over it: no trace and no metrics, and each bucket's
lowered steps cached per what they depend on: the bucket's option and size (and its
tensors for low-rank compressors, whose ratio is per tensor), and, where the option reads
it, the bucket index modulo the CPU cores (an option with a CPU operation runs it on
`cpu:<b % cores>`) and modulo its rooted phases' group sizes (a reduce or gather over n
GPUs is rooted at `b % n`). The same floats in the same order: the result equals
`simulate(...).iteration_s` exactly, and both equal the reference event engine's
(tests check random plans).

The planner changes one tensor or one bucket at a time, so a candidate shares its first
buckets with the incumbent plan: `checkpoints` records the incumbent's state before each
bucket and `iteration_s(plan, checkpoints, at)` starts the candidate there.

Over a large option space most candidates are ruled out before they are timed, by lower
bounds that never exceed the exact time (tests check them against it, `bounds`): `slot`
times the plan without the candidate bucket's steps (no candidate ends earlier) and
records it as a graph of jobs; `screen` bounds every option of the space at once from
numpy tables of each option's seconds per stream and that graph's longest paths; `tight`
gives one option's time from those paths (`paths`: exact but for the order of its sums).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from gcbench.sim import bounds, paths
from gcbench.sim.bounds import Table, per_stream
from gcbench.sim.iteration import Costs, Plan, SimContext, lower, zero_s
from gcbench.sim.options import ROOTED
from gcbench.sim.timeline import (
    Exceeded,
    Spans,
    State,
    Step,
    Tail,
    Timeline,
    as_program,
    lowering_key,
)
from gcbench.zoo.profile import ModelProfile


class _CopyBack:
    """A bucket's placeholder option whose steps are DDP's copy back out of the bucket
    alone (`Costs.bucket_copy_s`), waiting for backward: every option of the bucket ends
    with that copy after more work, so a plan with the placeholder ends no later than
    with any option (the recurrence is monotone), and closer to them than with no steps
    there at all (`greedy`'s first check of a run, before its slot)."""

    __slots__ = ()


COPY_BACK = _CopyBack()


class Cached(NamedTuple):
    """A bucket's lowering as the kernel caches it (a `timeline.Lowering` and more): its
    steps, the first that waits for backward, for the steps from that one on their
    seconds and each stream's share of them, and each stream's share of the steps
    before it (`bounds` reads them)."""

    steps: Sequence[Step]
    cut: int
    post_s: float
    post: tuple[tuple[str, float], ...]
    pre: tuple[tuple[str, float], ...]


@dataclass
class Checkpoints:
    """A plan's state before each of its buckets, and its deferred tails: a plan that
    shares the first `a` buckets resumes at bucket `a` (`Kernel.iteration_s(plan, ck, a)`)."""

    states: list[State]
    rest: list[Tail]


class Kernel(Timeline):
    """`iteration_s(plan)` for one profile and one set of costs, caching lowerings; the
    lower bounds of `bounds` (`slot`, `screen`, `resume_at`) and `paths.tight`."""

    slot = bounds.slot
    screen = bounds.screen
    option_table = bounds.option_table
    resume_at = bounds.resume_at
    tight = paths.tight

    def __init__(self, profile: ModelProfile, costs: Costs):
        if costs.synchronous:
            raise ValueError("the kernel times asynchronous buckets only (Costs.synchronous)")
        super().__init__(profile, costs)
        self.numel = [t.numel for t in profile.tensors]
        self.ctx = SimContext(costs, self.numel)
        self.cache: dict[tuple[Any, ...], Cached] = {}
        self._seen: dict[tuple[int, ...], tuple[list[int], Any, Cached]] = {}
        self._uses: dict[Any, tuple[int, int]] = {}
        self.copies = costs.bucket_copy_s is not zero_s  # buckets end with DDP's copy back
        self._copy_back: dict[float, Cached] = {}
        self._by_size = (
            costs.tensor_round_bytes is None
            and costs.bucket_bytes is None
            and costs.tensor_compress_s is None
        )
        self._prefix = [0]
        for n in self.numel:
            self._prefix.append(self._prefix[-1] + n)
        self.evaluations = 0
        self._tables: dict[tuple[Any, ...], Table] = {}
        self._spaces: dict[int, tuple[tuple[Any, ...], tuple[str, ...], int]] = {}

    def _key(
        self, bucket: list[int], option: Any, b: int, size: float | None
    ) -> tuple[tuple[Any, ...], float | None]:
        """What a bucket's lowering depends on (`_steps` caches by it), and the size to
        lower it at: the bucket's where the lowering reads that alone, else `size` as
        given."""
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
                size = float(n)  # what `lower` computes from the bucket
            tensors = None
        else:  # low-rank ratios are per tensor, 3LC's and threshold's per bucket (a run
            # marked as one: the bucket [0, 2] is not the run 0..2)
            tensors = ("run", lo, hi) if run else tuple(bucket)
        uses = self._uses.get(option)
        if uses is None:  # what of the bucket index its lowering reads: the CPU core
            # b % cores if it has a CPU operation, each rooted phase's root b % n
            roots = [x.n[p.level] for p in option.phases if p.collective in ROOTED]
            uses = self._uses[option] = (
                x.cores if any(op.where == "cpu" for op in option.ops) else 1,
                math.lcm(*roots) if roots else 1,
            )
        return (tensors, option, size, b % uses[0], b % uses[1]), size

    def _steps(self, bucket: list[int], option: Any, b: int, size: float | None) -> Cached:
        """The bucket's lowered steps, the first that waits for backward, and the seconds
        of the steps from that one on, in all and per stream (`option_table` reads them)."""
        if option is COPY_BACK:
            return self._copied_back(bucket, size)
        key, size = self._key(bucket, option, b, size)
        hit = self.cache.get(key)
        if hit is None:
            steps, cut, post_s = as_program(*lower(option, bucket, b, self.ctx, size, labels=False))
            pre, post = per_stream(steps, cut)
            hit = self.cache[key] = Cached(
                steps, cut, post_s, tuple(post.items()), tuple(pre.items())
            )
        return hit

    def _shared(self, bucket: list[int], option: Any, b: int, size: float | None) -> Cached:
        """`_steps` for a plan without sizes of its own: a lowering is looked up first by
        `timeline.lowering_key`, without building its full key (the memo holds the bucket
        and the option: no other live object can have their ids)."""
        if size is not None:
            return self._steps(bucket, option, b, size)
        seen = lowering_key(bucket, option, b)
        got = self._seen.get(seen)
        if got is not None:
            return got[2]
        hit = self._steps(bucket, option, b, size)
        if len(self._seen) >= _SEEN_MAX:
            self._seen.clear()
        self._seen[seen] = (bucket, option, hit)
        return hit

    def _copied_back(self, bucket: list[int], size: float | None) -> Cached:
        """`COPY_BACK`'s lowering for a bucket of `size` elements (its tensors' if None)."""
        if size is None:
            size = float(sum(self.numel[i] for i in bucket))
        hit = self._copy_back.get(size)
        if hit is None:
            copy = self.costs.bucket_copy_s(size)
            step = Step("compute", "copy", copy, 0.0, "", False)
            hit = self._copy_back[size] = Cached((step,), 0, copy, (("compute", copy),), ())
        return hit

    def checkpoints(
        self, plan: Plan, spans: dict[int, list[float]] | None = None
    ) -> tuple[float, Checkpoints]:
        """The plan's iteration time and its state before each bucket; with `spans`, fills
        it with each bucket's communication span ([first start, last end], the simulator's
        comm jobs') for the planner's bubbles."""
        ck = Checkpoints([], [])
        watch = None if spans is None else Spans(spans)
        self.evaluations += 1
        free, last = self.begin()
        last, _ = self.phase1(plan, 0, len(plan.buckets), free, last, 0, ck.rest, self._shared,
                              ck.states, watch, self._memo(plan))  # fmt: skip
        return self.phase2(free, last, ck.rest, watch), ck

    def iteration_s(
        self, plan: Plan, resume: Checkpoints | None = None, at: int = 0, limit: float = math.inf
    ) -> float:
        """One iteration's time; with `resume`, the checkpoints of a plan whose first `at`
        buckets equal this plan's, phase one starts at bucket `at` from its state there
        (the same floats in the same order: the same result). With `limit`, a time above
        it may be a lower bound instead (`resume`)."""
        if resume is None:  # a plan timed whole shares nothing with a checkpointed one
            self.evaluations += 1
            return self.run(plan, self._steps)
        st = resume.states[at]
        return self.resume(plan, st, resume.rest[: st.pending], at, limit)

    def resume(
        self, plan: Plan, state: State, rest: list[Tail], at: int, limit: float = math.inf
    ) -> float:
        """`plan`'s time from `state`, the state before its bucket `at`, and `rest`, the
        deferred tails pending then (a list of the caller's, extended here). Where the
        time passes `limit` (a candidate that cannot win), it may stop as soon as a lower
        bound does, and return that bound: a value above `limit`, never above the time."""
        self.evaluations += 1
        free = dict(state.free)
        try:
            last, _ = self.phase1(
                plan, at, len(plan.buckets), free, state.last, state.done, rest, self._shared,
                memo=self._memo(plan), limit=limit,
            )  # fmt: skip
            return self.phase2(free, last, rest, limit=limit)
        except Exceeded as e:
            return e.low

    def _memo(self, plan: Plan) -> Any:
        """`_shared`'s identity memo, for `phase1` to look up inline (plans with sizes of
        their own key by size: `_steps`)."""
        return self._seen.get if plan.elements is None else None


_SEEN_MAX = 1 << 16  # entries of `Kernel._shared`'s identity memo before it starts afresh
