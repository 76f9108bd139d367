"""The planner kernel's lower bounds: methods of `kernel.Kernel` (the first argument is
the kernel; `Kernel` takes them as its own), here so that each module reads in one sitting.

Over a large option space most candidates are ruled out before they are timed, by lower
bounds that never exceed the exact time (tests check them against it): `slot` times the
plan without the candidate bucket's steps (no candidate ends earlier) by the one
recurrence (`timeline.Timeline`), watching each job join its stream's queue (`_Queues`);
`screen` bounds every option of the space at once from numpy tables of each option's
seconds per stream, cached per bucket size; `bound` bounds one option more tightly, stream
by stream (`_after`); `resume_at` times a candidate exactly from the slot's state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from operator import add as _plus
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from gcbench.sim.iteration import Plan, lower
from gcbench.sim.options import ROOTED
from gcbench.sim.timeline import State, Step, Tail, Watch

if TYPE_CHECKING:
    from gcbench.sim.kernel import Checkpoints, Kernel


def per_stream(steps: Sequence[Step], cut: int) -> tuple[dict[str, float], dict[str, float]]:
    """A lowering's seconds per stream before its first step that waits for backward, and
    from that one on (`iteration.lower`'s steps; negative seconds count as none)."""
    pre: dict[str, float] = {}
    post: dict[str, float] = {}
    for j, s in enumerate(steps):
        part = pre if j < cut else post
        d = s.dur
        part[s.stream] = part.get(s.stream, 0.0) + (d if d > 0 else 0.0)
    return pre, post


class StreamSums(NamedTuple):
    """A stream's remaining jobs summed up for `_after` (release r, seconds d, tail q
    each; C_j the end of job j served in order from the releases alone, P_j the seconds
    up to j): before the candidate's deferred steps, max(C_j + q_j) over all releases
    (`most_c`) and over those that follow the backward (`most_cm`), max(P_j + q_j)
    (`most_p`), the last C_j both ways and P_j; after them, the first three again."""

    most_c: float
    most_cm: float
    most_p: float
    last_c: float
    last_cm: float
    last_p: float
    then_c: float
    then_cm: float
    then_p: float


def _served(jobs: list[tuple[float, float, float, float]]) -> tuple[float, ...]:
    """`StreamSums`' six sums of one group of a stream's jobs, served in order."""
    c = cm = most_c = most_cm = most_p = -math.inf
    p = 0.0
    for r, rm, d, q in jobs:
        c = (c if c > r else r) + d
        cm = (cm if cm > rm else rm) + d  # from the releases that move alone
        p += d
        if c + q > most_c:
            most_c = c + q
        if cm + q > most_cm:
            most_cm = cm + q
        if p + q > most_p:
            most_p = p + q
    return most_c, most_cm, most_p, c, cm, p


# Per option of a space, for one bucket (`Kernel.screen`): the streams, each option's
# seconds on each, and its chain's seconds before and after the first step that waits
# (columns: each a stream, or for a root's stream (name, level, suffix), named per bucket;
# per option and column its seconds before and from its first step that waits, 0 where
# it has steps from then on there else -inf; per option its chain's seconds before and
# from that step)
Table = tuple[
    list[tuple[str, str | None, str]],
    "np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray",
]  # fmt: skip


@dataclass
class Slot:
    """One bucket about to take a candidate option (`Kernel.slot`): the state before it
    (`before`, `rest`), the compute chain's end after its backward (`last`), the
    earliest end of the whole backward (from the backward alone, which a candidate's
    steps may delay, and as timed without the candidate: `backward_base`) and whether any
    runs after the bucket's steps, the streams' free times then, each stream's remaining
    jobs summed up for `_after`,
    the largest bound that holds whatever the candidate (`top`), the largest from the
    releases that follow the backward alone (`moving`: later by what the candidate delays
    the backward), and the update's seconds."""

    bucket: int
    before: State
    rest: list[Tail]
    last: float
    backward_end: float
    backward_base: float
    more_backward: bool
    free: dict[str, float]
    streams: dict[str, StreamSums]
    top: float
    moving: float
    update: float


def slot(
    self: Kernel, plan: Plan, resume: Checkpoints, at: int, m: int, bar: float = math.inf
) -> Slot:
    """Bucket `m` of `plan` about to take one option or another (the planner's
    candidates for one tensor or bucket, `plan` sharing its first `at` buckets with the
    checkpointed one): the state before it, for `resume_at`, and what `bound` needs.
    Where the plan without the bucket's steps already ends after `bar` (every
    candidate does too), the streams' summaries are left out: `top` says it all.

    The bound treats each stream as one machine serving its remaining jobs in order
    (the jobs of the buckets after m and the pending steps that wait for backward; the
    candidate's own are added in `bound`). A job has a release (no earlier start: its
    readiness in the plan without the candidate's steps, timed exactly here, since
    the candidate's jobs can only delay it; and, for the candidate's delay of the
    backward, a second release that follows the backward alone) and a tail (what must
    follow its end: the rest of its bucket's steps and the update). Served in order,
    job j ends no earlier than C_j = max(release_j, C_j-1) + seconds_j, and the
    iteration no earlier than C_j + tail_j; `_after` takes the maximum over j for any
    free time the candidate leaves the stream."""
    st = resume.states[at]
    free = dict(st.free)
    rest = resume.rest[: st.pending]
    last, done = self.phase1(plan, at, m, free, st.last, st.done, rest, self._shared,
                             memo=self._memo(plan))  # fmt: skip
    before = State(dict(free), last, done, len(rest))
    last, done = self.backward(plan.buckets[m], free, last, done)
    update = self._update  # the timeline's: the profile's update and the fixed overhead
    # The plan without the candidate's steps, timed exactly from here: adding the
    # candidate's jobs to the streams' queues can only delay every later job, so each
    # job's readiness here (its bucket's previous step done, backward done where it
    # waits for it) is a release it keeps with any candidate, and this plan's
    # iteration time a bound for all of them.
    base = dict(free)
    later = list(rest)
    queues = _Queues(m, last, update, self._bw)
    now, _ = self.phase1(plan, m + 1, len(plan.buckets), base, last, done, later,
                         self._shared, watch=queues, memo=self._memo(plan))  # fmt: skip
    queues.backward_base = now  # the backward's end without the candidate's steps, exact
    without = self.phase2(base, now, later, queues)  # the plan's time without it
    early, late, pending = queues.early, queues.late, queues.pending
    backward_end = queues.ready  # the backward's earliest end from the backward alone
    streams: dict[str, StreamSums] = {}
    top = max(without, backward_end + update)
    moving = -math.inf
    for stream in {*free, *early, *late} if top <= bar else ():
        jobs = early.get(stream, []) + late.get(stream, [])
        # where the candidate's steps that wait for backward join the stream's order
        own_at = len(early.get(stream, ())) + pending.get(stream, 0)
        a0, a0m, b0, c0, c0m, p0 = _served(jobs[:own_at])
        a2, a2m, b2, _, _, _ = _served(jobs[own_at:])
        streams[stream] = StreamSums(a0, a0m, b0, c0, c0m, p0, a2, a2m, b2)
        v = _after(streams[stream], free.get(stream, 0.0), 0.0, backward_end)
        if v > top:
            top = v
        # from the releases that follow the backward alone: later by a candidate's shift
        v = max(a0m, a2m, c0m + b2)
        if v > moving:
            moving = v
    more = done < len(self.profile.tensors)  # backward runs after the bucket's steps
    return Slot(m, before, rest, last, backward_end, queues.backward_base, more, free,
                streams, top, moving, update)  # fmt: skip


class _Queues(Watch):
    """`slot`'s watch over the plan without bucket `m`'s steps: each job after bucket
    m's backward queued on its stream as (release, a release that follows the backward
    alone, seconds, tail) — in phase one (`early`: backward pieces and steps that need
    not wait) or phase two (`late`), with per stream how many of the late ones belong to
    buckets before m (`pending`: the candidate's deferred steps come after them). The
    release is the job's readiness; the moving one, the backward's earliest end from
    the backward alone (`ready`: later by what a candidate delays the backward) plus the
    chain's seconds since, once a backward job has run after bucket m (a bucket sharing
    bucket m's tensor, a partition, has none); the tail, the rest of its chain and the
    update."""

    chains = True

    def __init__(self, m: int, ready: float, update: float, bw: list[float]):
        self.m, self.ready, self.update_s, self._bw = m, ready, update, bw
        self.early: dict[str, list[tuple[float, float, float, float]]] = {}
        self.late: dict[str, list[tuple[float, float, float, float]]] = {}
        self.pending: dict[str, int] = {}
        self.backward_base = math.inf  # the backward's exact end, set before phase two
        self._moved = False
        self._queue = self.early
        self._moving: dict[int, float] = {}  # per bucket, its chain's after phase one
        self._b, self._at, self._after = -1, -math.inf, 0.0

    def backward(self, lo: int, hi: int, dep: float, start: float) -> None:
        self._moved = True
        piece = self._bw[lo : hi + 1]
        self.early.setdefault("compute", []).append(
            (dep, self.ready, reduce(_plus, piece, 0.0), self.update_s)
        )
        self.ready = reduce(_plus, piece, self.ready)

    def chain(self, b: int, steps: Sequence[Step], cut: int, late: bool) -> None:
        if self._queue is self.early and self._b >= 0:  # the previous chain's, kept
            self._moving[self._b] = self._at
        self._b = b
        if late:
            self._queue = self.late
            at = self._moving.get(b, -math.inf)
            self._at = self.ready if self.ready > at else at
            self._after = sum(s.dur for s in steps[cut:]) + self.update_s
        else:
            self._at = self.ready if self._moved else -math.inf
            self._after = sum(s.dur for s in steps) + self.update_s

    def step(self, b: int, step: Step, dep: float, start: float) -> float:
        dur = step.dur
        self._after -= dur
        self._queue.setdefault(step.stream, []).append((dep, self._at, dur, self._after))
        if self._queue is self.late and b < self.m:
            self.pending[step.stream] = self.pending.get(step.stream, 0) + 1
        self._at += dur
        return start + dur


def bound(self: Kernel, slot: Slot, plan: Plan, option: Any) -> float:
    """A lower bound on the iteration time of `plan` with `option` in the slot's
    bucket (`slot` says how; never above the exact time): the option's steps that
    need not wait for backward timed exactly from the slot's state; then, on each
    stream they use, the stream's jobs in order from those times (`_after`), and the
    option's own chain to the update."""
    b = slot.bucket
    sizes = plan.elements
    if self.ctx.N == 1:
        return slot.top
    steps, cut, chain_post, per_post, _ = self._shared(
        plan.buckets[b], option, b, None if sizes is None else sizes[b]
    )
    free = slot.free
    t = slot.last
    ends: dict[str, float] = {}
    for k in range(cut):
        stream, dur = steps[k].stream, steps[k].dur
        f = free.get(stream, 0.0)
        if f > t:
            t = f
        t += dur
        ends[stream] = t
    low = slot.top
    # the option's steps on the compute stream delay the backward after it, if any,
    # and so every release that follows the backward, by `shift`
    shift = ends.get("compute", 0.0) - slot.last if slot.more_backward else 0.0
    if shift < 0.0:
        shift = 0.0
    backward_end = slot.backward_end + shift
    if slot.backward_base > backward_end:
        backward_end = slot.backward_base
    v = (t if t > backward_end else backward_end) + chain_post + slot.update
    if v > low:
        low = v
    if shift and slot.moving + shift > low:  # every stream's jobs, moved
        low = slot.moving + shift
    post = dict(per_post)
    for stream in ends.keys() | post.keys():
        a = ends.get(stream)
        if a is None:
            a = free.get(stream, 0.0)
        v = _after(slot.streams.get(stream, _IDLE), a, post.get(stream, 0.0), backward_end, shift)
        v = v if v > a + slot.update else a + slot.update
        if v > low:
            low = v
    return low


def screen(self: Kernel, slot: Slot, plan: Plan, space: tuple[Any, ...]) -> np.ndarray:
    """Lower bounds for every option of `space` in the slot's bucket at once, looser
    than `bound` and far cheaper (numpy over a table cached per bucket class). The
    iteration ends no earlier than the slot's `top`; than the option's chain (its
    steps that need not wait for backward from its bucket's backward, the others
    after the whole backward, then the update); and, on each stream, which serves
    the option's early steps, the jobs before its deferred ones (`p0` seconds, done
    no earlier than `c0`), its deferred steps, then the rest (`b2`: their seconds
    and what must follow each): than its free time plus all those seconds, and,
    where the option defers steps there, than max(c0, the backward's end) plus its
    deferred seconds and the rest; the update follows every job. And where backward
    goes on after the bucket, an option's GPU work before its first deferred step
    (on the compute stream, after the bucket's backward) delays the rest of it, and
    every release that follows it, by at least those seconds (`bound`'s `shift`):
    than the slot's bound from those releases (`moving`) plus the column's seconds."""
    b = slot.bucket
    sizes = plan.elements
    columns, pre, post, waits, chain_pre, chain_post = self.option_table(
        plan.buckets[b], space, b, None if sizes is None else sizes[b]
    )
    if self.ctx.N == 1:
        return np.full(len(space), slot.top)
    update, backward = slot.update, slot.backward_base
    serve = np.empty(len(columns))  # free time plus the other jobs' seconds after
    queued = np.empty(len(columns))  # when the option's deferred steps may start, after
    get, free, n = slot.streams.get, slot.free, self.ctx.n
    shift = None
    for j, (s, level, suffix) in enumerate(columns):
        if level is not None:  # this bucket's root's stream
            s = f"root:{level}:{b % n[level]}{suffix}"
        elif s == "compute" and slot.more_backward:
            shift = pre[:, j]  # per option: the least it delays the rest of backward
        st = get(s)
        f = free.get(s, 0.0)
        if st is None:
            serve[j] = f + update
            queued[j] = backward + update
        else:
            rest = st[8] if st[8] > update else update
            serve[j] = f + st[5] + rest
            queued[j] = (st[3] if st[3] > backward else backward) + rest
    low = (pre + post + serve).max(axis=1)
    np.maximum(low, (waits + post + queued).max(axis=1), out=low)
    chain = np.maximum(chain_pre + slot.last, backward) + chain_post + update
    np.maximum(low, chain, out=low)
    np.maximum(low, slot.top, out=low)
    if shift is not None:
        np.maximum(low, slot.moving + shift, out=low)
    return low


def option_table(
    self: Kernel, bucket: list[int], space: tuple[Any, ...], b: int, size: float | None
) -> Table:
    """Per option of `space` for this bucket: its seconds on each stream, before and
    after its first step that waits for backward. Cached per what the lowerings read
    of the bucket: its size (or tensors), and of its index only whether each rooted
    group's root is GPU 0 (whose work shares worker 0's streams) and the CPU core: any
    other root r gives the same steps on streams `root:<level>:<r>`, so the table's column
    of such a stream keeps its level and `screen` names it for its own bucket."""
    x = self.ctx
    sp = self._spaces.get(id(space))
    if sp is None or sp[0] is not space:
        rooted = {p.level for o in space for p in o.phases if p.collective in ROOTED}
        cpu = any(op.where == "cpu" for o in space for op in o.ops)
        sp = self._spaces[id(space)] = (space, tuple(sorted(rooted)), x.cores if cpu else 1)
    _, levels, cores = sp
    lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
    if size is None and self._by_size:
        size = float(self._prefix[hi + 1] - self._prefix[lo])
    roots = tuple(b % x.n[level] for level in levels)
    run = hi - lo + 1 == len(bucket)
    key = (
        id(space),
        None if self._by_size else ("run", lo, hi) if run else tuple(bucket),
        size,
        tuple(r == 0 for r in roots),
        b % cores,
    )
    hit = self._tables.get(key)
    if hit is None:
        named = {f"root:{lv}:{r}": lv for lv, r in zip(levels, roots, strict=True) if r}
        sums: list[tuple[Any, Any]] = []  # per option: (stream, seconds) before its first
        # wait and from it
        for o in space:
            k, at = self._key(bucket, o, b, size)
            got = self.cache.get(k)
            if got is not None:
                sums.append((got.pre, got.post))
            else:
                # only the screen's survivors are timed: their steps kept then
                pre_s, post_s = per_stream(*lower(o, bucket, b, x, at, labels=False))
                sums.append((pre_s.items(), post_s.items()))
        used: dict[str, float] = {}  # every stream an option uses (its seconds unused)
        for before, after in sums:
            used.update(before)
            used.update(after)
        streams = sorted(used)
        col = {s: j for j, s in enumerate(streams)}
        w = len(streams)
        flat_pre, flat_post = [0.0] * (len(sums) * w), [0.0] * (len(sums) * w)
        flat_mask = [-math.inf] * (len(sums) * w)  # 0 where it has deferred steps there
        for i, (before, after) in enumerate(sums):
            row = i * w
            for s, d in before:
                flat_pre[row + col[s]] = d
            for s, d in after:
                flat_post[row + col[s]] = d
                flat_mask[row + col[s]] = 0.0
        shape = (len(sums), w)
        pre = np.array(flat_pre).reshape(shape)
        post = np.array(flat_post).reshape(shape)
        mask = np.array(flat_mask).reshape(shape)
        columns = []
        for s in streams:  # a root's streams by level: `root:<level>:<r>[:cpu]`
            head, _, tail = s.partition(":") if s.startswith("root:") else ("", "", "")
            level, _, rest = tail.partition(":")
            r, _, suffix = rest.partition(":")
            lv = named.get(f"root:{level}:{r}") if head else None
            columns.append((s, lv, ":" + suffix if suffix else ""))
        hit = self._tables[key] = (
            columns,
            pre,
            post,
            mask,
            pre.sum(axis=1),
            post.sum(axis=1),
        )
    return hit


def resume_at(self: Kernel, plan: Plan, slot: Slot, limit: float = math.inf) -> float:
    """The exact iteration time of `plan` (the slot's plan with its bucket's option
    set), from the state before the slot's bucket (above `limit`: maybe a lower bound,
    `Kernel.resume`)."""
    before = slot.before
    return self.resume(plan, before, slot.rest[: before.pending], slot.bucket, limit)


_IDLE = StreamSums(*(-math.inf,) * 5, 0.0, *(-math.inf,) * 3)  # a stream with no jobs


def _after(
    stream: StreamSums,
    free: float,
    own: float,
    backward_end: float,
    shift: float = 0.0,
) -> float:
    """A lower bound on the iteration's end from one stream serving its jobs in order.

    The jobs (release r, seconds d, tail q: what must follow their end) are those before
    the candidate's deferred steps and those after. Served in order from a free time a,
    job j ends no earlier than C_j(a) = max(C_j, a + P_j), C_j from the releases alone and
    P_j the seconds up to j; the iteration no earlier than C_j(a) + q_j. `stream` holds,
    for the two groups, max(C_j + q_j), max(P_j + q_j), and for the first the last C_j and
    P_j: the candidate's deferred seconds (`own`) start after the first group and after
    backward (`backward_end`, already shifted), the second group follows. Where the
    candidate delays the backward by `shift`, the releases that follow the backward are
    later by as much: the same maxima over those releases alone (`m`), shifted, bound too."""
    a0, a0m, b0, c0, c0m, p0, a2, a2m, b2 = stream
    if shift:
        a0 = a0 if a0 > a0m + shift else a0m + shift
        c0 = c0 if c0 > c0m + shift else c0m + shift
        a2 = a2 if a2 > a2m + shift else a2m + shift
    low = a0 if a0 > free + b0 else free + b0
    c = c0 if c0 > free + p0 else free + p0  # the stream free for the candidate's deferred
    if c < free:
        c = free
    if own:
        c = (c if c > backward_end else backward_end) + own
    v = a2 if a2 > c + b2 else c + b2
    return v if v > low else low
