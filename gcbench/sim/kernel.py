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
`cpu:<b % cores>`) and modulo its rooted phases' group sizes (a reduce or gather over n
GPUs is rooted at `b % n`). The same floats in the same order: the result
equals `simulate(...).iteration_s` exactly (a test checks random plans).

The planner changes one tensor or one bucket at a time, so a candidate shares its first
buckets with the incumbent plan: `checkpoints` records the incumbent's state before each
bucket and `iteration_s(plan, checkpoints, at)` starts the candidate there. That resume
runs compiled (`_kernel_jit.resume`, numba): the checkpoints also as arrays, each cached
lowering's steps in flat arrays, the same float operations in the same order.

Over a large option space most candidates are ruled out before they are timed, by lower
bounds that never exceed the exact time (tests check them against it): `slot` times the
plan without the candidate bucket's steps (no candidate ends earlier); `screen` bounds
every option of the space at once from numpy tables of each option's seconds per stream,
cached per bucket size; `bound` bounds one option more tightly, stream by stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from operator import add as _plus
from typing import Any

import numpy as np

from gcbench.sim.iteration import Costs, Plan, SimContext, lower
from gcbench.sim.options import ROOTED
from gcbench.zoo.profile import ModelProfile

# A stream's remaining jobs summed up for `_after`: before the candidate's deferred steps,
# max(C_j + q_j) over all releases and over those that follow the backward, max(P_j + q_j),
# the last C_j (both ways) and P_j; after them, the first three again
_Stream = tuple[float, float, float, float, float, float, float, float, float]
# A lowered step as the kernel keeps it: (stream, seconds, waits for backward, is comm)
_Lowered = tuple[str, float, bool, bool]
# A bucket's lowering: its steps, the first that waits for backward, for the steps from
# that one on their seconds and each stream's share of them, each stream's share of the
# steps before it, and its number in the compiled resume's arrays (-1: none)
_Lowering = tuple[
    list[_Lowered],
    int,
    float,
    tuple[tuple[str, float], ...],
    tuple[tuple[str, float], ...],
    int,
]


# Per option of a space, for one bucket (`Kernel.screen`): the streams, each option's
# seconds on each, and its chain's seconds before and after the first step that waits
# (columns: each a stream, or for a root's stream (name, level, suffix), named per bucket;
# per option and column its seconds before and from its first step that waits, 0 where
# it has steps from then on there else -inf; per option its chain's seconds before and
# from that step)
_Table = tuple[
    list[tuple[str, str | None, str]],
    "np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray",
]  # fmt: skip


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
class _Arrays:
    """A checkpointed plan as the compiled resume reads it (`_kernel_jit.resume`): per
    bucket the state before it (stream free times by stream id, the compute chain's end,
    the iteration's end so far, the next tensor without backward, the deferred tails
    pending), the deferred tails (lowering, chain end), each bucket's first and last
    tensor, and per shift of the bucket index (a candidate with more or fewer buckets
    before them) each bucket's lowering (-1: none)."""

    plan: Plan
    free: np.ndarray
    last: np.ndarray
    end: np.ndarray
    done: np.ndarray
    pending: np.ndarray
    rest_low: np.ndarray
    rest_t: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    low: dict[int, np.ndarray]
    reads: list[int]  # the buckets whose option reads the bucket's index


@dataclass
class Checkpoints:
    """A plan's state before each of its buckets, and its deferred tails: a plan that
    shares the first `a` buckets resumes at bucket `a` (`Kernel.iteration_s(plan, ck, a)`).
    `arrays`: the same for the compiled resume, where it applies (`Kernel._compiled`)."""

    states: list[_State]
    rest: list[tuple[list[_Lowered], int, float, int]]
    arrays: _Arrays | None = None


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
    before: _State
    rest: list[tuple[list[_Lowered], int, float, int]]
    last: float
    backward_end: float
    backward_base: float
    more_backward: bool
    free: dict[str, float]
    streams: dict[str, _Stream]
    top: float
    moving: float
    update: float
    # for the compiled resume: the checkpoints the slot's plan shares its later buckets
    # with, and `before` as arrays (free times by stream id, tails' lowerings and ends)
    resume: Checkpoints | None = None
    free_ids: np.ndarray | None = None
    rest_low: np.ndarray | None = None
    rest_t: np.ndarray | None = None


class Kernel:
    """`iteration_s(plan)` for one profile and one set of costs, caching lowerings."""

    def __init__(self, profile: ModelProfile, costs: Costs):
        self.profile, self.costs = profile, costs
        self.numel = [t.numel for t in profile.tensors]
        self._bw = [t.backward_s if t.backward_s > 0 else 0.0 for t in profile.tensors]
        self.ctx = SimContext(costs, self.numel)
        self.cache: dict[tuple[Any, ...], _Lowering] = {}
        self._seen: dict[tuple[int, int, int], tuple[list[int], Any, _Lowering]] = {}
        self._uses: dict[Any, tuple[int, int]] = {}
        if costs.synchronous:
            raise ValueError("the kernel times asynchronous buckets only (Costs.synchronous)")
        self._by_size = (
            costs.tensor_round_bytes is None
            and costs.bucket_bytes is None
            and costs.tensor_compress_s is None
        )
        self._prefix = [0]
        for n in self.numel:
            self._prefix.append(self._prefix[-1] + n)
        self.evaluations = 0
        self._tables: dict[tuple[Any, ...], _Table] = {}
        # the compiled resume's view of the lowerings (`_register`): stream ids, every
        # cached lowering's steps in flat arrays, and per lowering its range and cut
        self._compiles = self.ctx.N > 1  # one GPU sends nothing: the Python path is as fast
        self._bw_array = np.array(self._bw, dtype=np.float64)
        self._update = profile.update_s if profile.update_s > 0 else 0.0
        self._sid: dict[str, int] = {"compute": 0}
        self._lid: dict[int, int] = {}  # id(a cached lowering's steps) -> its lowering id
        self._step_sid = np.zeros(1024, np.int64)
        self._step_dur = np.zeros(1024)
        self._step_wait = np.zeros(1024, np.bool_)
        self._steps_used = 0
        self._low_off = np.zeros(256, np.int64)
        self._low_len = np.zeros(256, np.int64)
        self._low_cut = np.zeros(256, np.int64)
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

    def _steps(self, bucket: list[int], option: Any, b: int, size: float | None) -> _Lowering:
        """The bucket's lowered steps, the first that waits for backward, and the seconds
        of the steps from that one on, in all and per stream (`bound` reads them)."""
        key, size = self._key(bucket, option, b, size)
        hit = self.cache.get(key)
        if hit is None:
            lowered, cut = lower(option, bucket, b, self.ctx, size, labels=False)
            steps = [(s[0], s[2] if s[2] > 0 else 0.0, s[5], s[1] == "comm") for s in lowered]
            pre, post = _per_stream(lowered, cut)
            hit = self.cache[key] = (
                steps,
                cut,
                sum(d for _, d, _, _ in steps[cut:]),
                tuple(post.items()),
                tuple(pre.items()),
                self._register(steps, cut) if self._compiles else -1,
            )
        return hit

    def _register(self, steps: list[_Lowered], cut: int) -> int:
        """A new cached lowering, written to the compiled resume's arrays: its number."""
        n, at, k = len(steps), self._steps_used, len(self._lid)
        if at + n > len(self._step_sid):
            grow = max(2 * len(self._step_sid), at + n)
            self._step_sid = np.resize(self._step_sid, grow)
            self._step_dur = np.resize(self._step_dur, grow)
            self._step_wait = np.resize(self._step_wait, grow)
        if k >= len(self._low_off):
            self._low_off = np.resize(self._low_off, 2 * k)
            self._low_len = np.resize(self._low_len, 2 * k)
            self._low_cut = np.resize(self._low_cut, 2 * k)
        sid = self._sid
        for j, (stream, dur, waits, _) in enumerate(steps, at):
            q = sid.get(stream)
            if q is None:
                q = sid[stream] = len(sid)
            self._step_sid[j] = q
            self._step_dur[j] = dur
            self._step_wait[j] = waits
        self._low_off[k], self._low_len[k], self._low_cut[k] = at, n, cut
        self._steps_used = at + n
        self._lid[id(steps)] = k  # the cache holds the list: no other can take its id
        return k

    def _shared(self, bucket: list[int], option: Any, b: int, size: float | None) -> _Lowering:
        """`_steps` for a plan resumed from checkpoints: candidate plans share the
        incumbent's bucket lists and options, so a lowering is looked up by their
        identity first, without building its key (the memo holds both objects: no other
        live object can have their ids). Plans fused anew (Algorithm 2, brute force)
        never hit it and time their buckets through `_steps` alone."""
        if size is not None:
            return self._steps(bucket, option, b, size)
        seen = (id(bucket), id(option), b)
        got = self._seen.get(seen)
        if got is not None:
            return got[2]
        hit = self._steps(bucket, option, b, size)
        if len(self._seen) >= _SEEN_MAX:
            self._seen.clear()
        self._seen[seen] = (bucket, option, hit)
        return hit

    def checkpoints(
        self, plan: Plan, spans: dict[int, list[float]] | None = None
    ) -> tuple[float, Checkpoints]:
        """The plan's iteration time and its state before each bucket; with `spans`, fills
        it with each bucket's communication span ([first start, last end], the simulator's
        comm jobs') for the planner's bubbles."""
        ck = Checkpoints([], [])
        s = self._run(plan, None, [], 0, ck, spans)
        if self._compiles and plan.elements is None:
            ck.arrays = self._arrays(plan, ck)
        return s, ck

    def _ids(self, free: dict[str, float]) -> np.ndarray:
        """Stream free times by stream id (streams with none: free at 0, as `free.get`)."""
        out = np.zeros(len(self._sid))
        sid = self._sid
        for stream, t in free.items():
            out[sid[stream]] = t
        return out

    def _arrays(self, plan: Plan, ck: Checkpoints) -> _Arrays | None:
        """`ck` for the compiled resume, where every bucket is a run of tensors."""
        lo, hi, low, reads = [], [], [], []
        uses = self._uses
        for b, (bucket, opt) in enumerate(zip(plan.buckets, plan.options, strict=True)):
            first, last = (bucket[0], bucket[-1]) if bucket else (0, -1)
            if last - first + 1 != len(bucket):
                return None
            lo.append(first)
            hi.append(last)
            low.append(-1 if opt is None else self._shared(bucket, opt, b, None)[5])
            if opt is not None and uses[opt] != (1, 1):
                reads.append(b)
        states = ck.states
        lid = self._lid
        return _Arrays(
            plan,
            np.array([self._ids(st.free) for st in states]),
            np.array([st.last for st in states]),
            np.array([st.end for st in states]),
            np.array([st.done for st in states], np.int64),
            np.array([st.pending for st in states], np.int64),
            np.array([lid[id(r[0])] for r in ck.rest], np.int64),
            np.array([r[2] for r in ck.rest]),
            np.array(lo, np.int64),
            np.array(hi, np.int64),
            {0: np.array(low, np.int64)},
            reads,
        )

    def _lows(self, arrays: _Arrays, d: int) -> np.ndarray:
        """Each checkpointed bucket's lowering when it is bucket `d` places later (an
        option that reads its bucket's index, for a CPU core or a root, lowers anew)."""
        got = arrays.low.get(d)
        if got is None:
            got = arrays.low[0]
            if arrays.reads:
                got = got.copy()
                plan = arrays.plan
                for i in arrays.reads:
                    if i + d >= 0:
                        got[i] = self._shared(plan.buckets[i], plan.options[i], i + d, None)[5]
            arrays.low[d] = got
        return got

    def _compiled(
        self,
        plan: Plan,
        arrays: _Arrays,
        at: int,
        free: np.ndarray,
        last: float,
        end: float,
        done: int,
        rest_low: np.ndarray,
        rest_t: np.ndarray,
        pending: int,
    ) -> float | None:
        """`plan`'s time from the state before its bucket `at` by the compiled resume
        (`_kernel_jit.resume`): its buckets from `at` up to where it follows the
        checkpointed plan's (the same lists and options, shifted by its extra buckets),
        then those. None where a bucket is not a run of tensors (the Python path)."""
        inc = arrays.plan
        pb, po, ib, io = plan.buckets, plan.options, inc.buckets, inc.options
        n = len(pb)
        d = n - len(ib)
        j = at
        while j < n:  # where the plan follows the checkpointed one to its end
            i = j - d
            if i >= 0 and pb[j] is ib[i] and po[j] is io[i] and pb[j:] == ib[i:]:
                if po[j:] == io[i:]:
                    break
            j += 1
        rows = []
        for b in range(at, j):
            bucket, opt = pb[b], po[b]
            lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
            if hi - lo + 1 != len(bucket):
                return None
            rows.append((lo, hi, -1 if opt is None else self._shared(bucket, opt, b, None)[5]))
        changed = np.array(rows, np.int64).reshape(-1, 3)
        low = self._lows(arrays, d)
        self.evaluations += 1
        return float(
            (_RESUME if _RESUME is not None else warm())(
                self._bw_array, self._step_sid, self._step_dur, self._step_wait,
                self._low_off, self._low_len, self._low_cut, len(self._sid),
                free, last, end, done, rest_low, rest_t, pending,
                changed, arrays.lo, arrays.hi, low, j - d, self._update,
            )
        )  # fmt: skip

    def iteration_s(self, plan: Plan, resume: Checkpoints | None = None, at: int = 0) -> float:
        """One iteration's time; with `resume`, the checkpoints of a plan whose first `at`
        buckets equal this plan's, phase one starts at bucket `at` from its state there
        (the same floats in the same order: the same result)."""
        if resume is None:
            return self._run(plan, None, [], 0, None)
        a = resume.arrays
        if a is not None and plan.elements is None:
            got = self._compiled(
                plan, a, at, a.free[at], a.last[at], a.end[at], a.done[at],
                a.rest_low, a.rest_t, a.pending[at],
            )  # fmt: skip
            if got is not None:
                return got
        st = resume.states[at]
        return self._run(plan, st, resume.rest[: st.pending], at, None)

    def slot(self, plan: Plan, resume: Checkpoints, at: int, m: int, bar: float = math.inf) -> Slot:
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
        last, end, done = self._phase1(plan, at, m, free, st.last, st.end, st.done, rest)
        before = _State(dict(free), last, end, done, len(rest))
        last, end, done = self._backward(plan.buckets[m], free, last, end, done)
        bw = self._bw
        update = self.profile.update_s if self.profile.update_s > 0 else 0.0
        # The plan without the candidate's steps, timed exactly from here: adding the
        # candidate's jobs to the streams' queues can only delay every later job, so each
        # job's readiness here (its bucket's previous step done, backward done where it
        # waits for it) is a release it keeps with any candidate, and this plan's
        # iteration time a bound for all of them.
        # Jobs: [release, a release that follows the backward alone (later by a
        # candidate's shift; from the backward's earliest ends), seconds, tail] per
        # stream, in the order the stream serves them.
        early: dict[str, list[tuple[float, float, float, float]]] = {}  # phase one
        late: dict[str, list[tuple[float, float, float, float]]] = {}  # pending, later
        base = dict(free)
        now, ends = last, end  # the compute chain, the iteration's end so far
        ready = last  # the earliest end of the backward so far, for the moving releases
        sizes = plan.elements
        done_at = done
        chains: list[tuple[list[_Lowered], int, float, float]] = []  # phase two, in order
        for steps, cut, t, _ in rest:  # pending: from their steps that wait for backward
            chains.append((steps, cut, t, -math.inf))
        pending = {}
        # a backward job has run since the slot's bucket: only then does a chain's release
        # follow the backward (a bucket sharing the slot's tensor, a partition, has none)
        moved = False
        for b in range(m + 1, len(plan.buckets)):
            bucket, opt = plan.buckets[b], plan.options[b]
            if bucket and bucket[-1] >= done_at:
                moved = True
                piece = bw[max(bucket[0], done_at) : bucket[-1] + 1]
                seconds = reduce(_plus, piece, 0.0)
                early.setdefault("compute", []).append((now, ready, seconds, update))
                t = base.get("compute", 0.0)
                now = reduce(_plus, piece, t if t > now else now)
                base["compute"] = now
                if now > ends:
                    ends = now
                ready = reduce(_plus, piece, ready)
                done_at = bucket[-1] + 1
            if opt is None or self.ctx.N == 1:
                continue
            steps, cut = self._shared(bucket, opt, b, None if sizes is None else sizes[b])[:2]
            after = sum(d for _, d, _, _ in steps) + update
            release = ready if moved else -math.inf
            t, moving, ends = _enqueue(steps, 0, cut, now, release, after, early, base, ends, None)
            chains.append((steps, cut, t, moving))
        backward_base = now  # the backward's end without the candidate's steps, exact
        tails = now
        for n_chain, (steps, cut, t, moving) in enumerate(chains):
            if n_chain == len(rest):
                pending = {s: len(v) for s, v in late.items()}
            after = sum(d for _, d, _, _ in steps[cut:]) + update
            if cut < len(steps):
                moving = ready if ready > moving else moving
            t, moving, ends = _enqueue(
                steps, cut, len(steps), t, moving, after, late, base, ends, backward_base
            )
            if t > tails:
                tails = t
        if len(chains) == len(rest):
            pending = {s: len(v) for s, v in late.items()}
        f = base.get("compute", 0.0)
        without = (f if f > tails else tails) + update  # the plan's time without it
        backward_end = ready  # the backward's earliest end from the backward alone
        streams: dict[str, _Stream] = {}
        top = max(end, without if without > ends else ends, backward_end + update)
        moving = -math.inf
        for stream in {*free, *early, *late} if top <= bar else ():
            jobs = early.get(stream, []) + late.get(stream, [])
            # where the candidate's steps that wait for backward join the stream's order
            own_at = len(early.get(stream, ())) + pending.get(stream, 0)
            parts = []
            for part in (jobs[:own_at], jobs[own_at:]):
                c = cm = most_c = most_cm = most_p = -math.inf
                p = 0.0
                for r, rm, d, q in part:
                    c = (c if c > r else r) + d
                    cm = (cm if cm > rm else rm) + d  # from the releases that move alone
                    p += d
                    if c + q > most_c:
                        most_c = c + q
                    if cm + q > most_cm:
                        most_cm = cm + q
                    if p + q > most_p:
                        most_p = p + q
                parts.append((most_c, most_cm, most_p, c, cm, p))
            (a0, a0m, b0, c0, c0m, p0), (a2, a2m, b2, _, _, _) = parts
            streams[stream] = (a0, a0m, b0, c0, c0m, p0, a2, a2m, b2)
            v = _after(streams[stream], free.get(stream, 0.0), 0.0, backward_end)
            if v > top:
                top = v
            # from the releases that follow the backward alone: later by a candidate's shift
            v = max(a0m, a2m, c0m + b2)
            if v > moving:
                moving = v
        more = done < len(bw)  # tensors whose backward runs after the bucket's steps
        slot = Slot(
            m,
            before,
            rest,
            last,
            backward_end,
            backward_base,
            more,
            free,
            streams,
            top,
            moving,
            update,
        )
        if resume.arrays is not None and top <= bar:  # it may resume candidates: compiled
            slot.resume = resume
            slot.free_ids = self._ids(before.free)
            slot.rest_low = np.array([self._lid[id(r[0])] for r in rest], np.int64)
            slot.rest_t = np.array([r[2] for r in rest])
        return slot

    def bound(self, slot: Slot, plan: Plan, option: Any) -> float:
        """A lower bound on the iteration time of `plan` with `option` in the slot's
        bucket (`slot` says how; never above the exact time): the option's steps that
        need not wait for backward timed exactly from the slot's state; then, on each
        stream they use, the stream's jobs in order from those times (`_after`), and the
        option's own chain to the update."""
        b = slot.bucket
        sizes = plan.elements
        if self.ctx.N == 1:
            return slot.top
        steps, cut, chain_post, per_post, _, _ = self._shared(
            plan.buckets[b], option, b, None if sizes is None else sizes[b]
        )
        free = slot.free
        t = slot.last
        ends: dict[str, float] = {}
        for k in range(cut):
            stream, dur = steps[k][0], steps[k][1]
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
            v = _after(
                slot.streams.get(stream, _IDLE), a, post.get(stream, 0.0), backward_end, shift
            )
            v = v if v > a + slot.update else a + slot.update
            if v > low:
                low = v
        return low

    def screen(self, slot: Slot, plan: Plan, space: tuple[Any, ...]) -> np.ndarray:
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
        columns, pre, post, waits, chain_pre, chain_post = self._table(
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

    def _table(
        self, bucket: list[int], space: tuple[Any, ...], b: int, size: float | None
    ) -> _Table:
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
                    sums.append((got[4], got[3]))
                else:
                    # only the screen's survivors are timed: their steps kept then
                    pre_s, post_s = _per_stream(*lower(o, bucket, b, x, at, labels=False))
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

    def resume_at(self, plan: Plan, slot: Slot) -> float:
        """The exact iteration time of `plan` (the slot's plan with its bucket's option
        set), from the state before the slot's bucket."""
        before = slot.before
        ck = slot.resume
        if ck is not None and ck.arrays is not None and plan.elements is None:
            assert slot.free_ids is not None and slot.rest_low is not None
            assert slot.rest_t is not None
            got = self._compiled(
                plan, ck.arrays, slot.bucket, slot.free_ids, before.last, before.end,
                before.done, slot.rest_low, slot.rest_t, before.pending,
            )  # fmt: skip
            if got is not None:
                return got
        return self._run(plan, before, slot.rest[: before.pending], slot.bucket, None)

    def _backward(
        self, bucket: list[int], free: dict[str, float], last: float, end: float, done: int
    ) -> tuple[float, float, int]:
        """The bucket's tensors' backward not yet run, on the compute stream."""
        backward = self._bw
        lo, hi = (bucket[0], bucket[-1]) if bucket else (0, -1)
        if hi - lo + 1 == len(bucket):  # a run of tensors: its backward is one chain
            if hi >= done:
                t = free.get("compute", 0.0)
                if last > t:
                    t = last
                # left to right, as one job after another: the same float additions
                t = reduce(_plus, backward[max(lo, done) : hi + 1], t)
                free["compute"] = last = t
                if t > end:
                    end = t
                done = hi + 1
            return last, end, done
        for i in bucket:
            if i >= done:
                t = free.get("compute", 0.0)
                if last > t:
                    t = last
                t += backward[i]
                free["compute"] = last = t
                if t > end:
                    end = t
                done = i + 1
        return last, end, done

    def _phase1(
        self,
        plan: Plan,
        first: int,
        stop: int,
        free: dict[str, float],
        last: float,
        end: float,
        done: int,
        rest: list[tuple[list[_Lowered], int, float, int]],
        states: list[_State] | None = None,
        spans: dict[int, list[float]] | None = None,
        shared: bool = True,
    ) -> tuple[float, float, int]:
        """Buckets first..stop-1: each one's backward, then its steps that need not wait
        for backward (`free` and `rest` updated in place); `shared`: the plan shares its
        buckets with checkpointed ones (`_shared`)."""
        single = self.ctx.N == 1
        sizes = plan.elements
        buckets, options = plan.buckets, plan.options
        lower = self._shared if shared else self._steps
        get, keep, backward, bw = free.get, rest.append, self._backward, self._bw
        seen = self._seen.get if shared and sizes is None else None
        for b in range(first, stop):
            bucket, opt = buckets[b], options[b]
            if states is not None:
                states.append(_State(dict(free), last, end, done, len(rest)))
            # `_backward`, inline for a run of tensors (the hot path: every plan gcbench
            # builds), the same additions
            lo = bucket[0] if bucket else 0
            hi = bucket[-1] if bucket else -1
            if hi - lo + 1 != len(bucket):
                last, end, done = backward(bucket, free, last, end, done)
            elif hi >= done:
                t = get("compute", 0.0)
                t = reduce(_plus, bw[lo if lo > done else done : hi + 1], t if t > last else last)
                free["compute"] = last = t
                if t > end:
                    end = t
                done = hi + 1
            if single or opt is None:
                continue
            got = None if seen is None else seen((id(bucket), id(opt), b))
            if got is not None:  # `_shared`'s memo, looked up inline
                hit = got[2]
            else:
                hit = lower(bucket, opt, b, None if sizes is None else sizes[b])
            steps, cut = hit[0], hit[1]
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
        return last, end, done

    def _run(
        self,
        plan: Plan,
        state: _State | None,
        rest: list[tuple[list[_Lowered], int, float, int]],
        at: int,
        record: Checkpoints | None,
        spans: dict[int, list[float]] | None = None,
    ) -> float:
        self.evaluations += 1
        profile = self.profile
        if state is None:
            at = 0
            fwd = profile.forward_s if profile.forward_s > 0 else 0.0
            free: dict[str, float] = {"compute": fwd}
            end = last = fwd
            done = 0
        else:
            free = dict(state.free)
            last, end, done = state.last, state.end, state.done
        states = None if record is None else record.states
        n = len(plan.buckets)
        # a plan timed whole and not recorded shares nothing with a checkpointed one
        shared = state is not None or record is not None
        last, end, done = self._phase1(
            plan, at, n, free, last, end, done, rest, states, spans, shared
        )
        if record is not None:
            record.rest = rest
        return self._phase2(free, last, end, rest, spans)

    def _phase2(
        self,
        free: dict[str, float],
        last: float,
        end: float,
        rest: list[tuple[list[_Lowered], int, float, int]],
        spans: dict[int, list[float]] | None,
    ) -> float:
        """After backward: each bucket's steps that wait for it, in bucket order; the
        update."""
        profile = self.profile
        get = free.get
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


def _per_stream(steps: list[Any], cut: int) -> tuple[dict[str, float], dict[str, float]]:
    """A lowering's seconds per stream before its first step that waits for backward, and
    from that one on (`iteration.lower`'s steps; negative seconds count as none)."""
    pre: dict[str, float] = {}
    post: dict[str, float] = {}
    for j, s in enumerate(steps):
        part = pre if j < cut else post
        d = s[2]
        part[s[0]] = part.get(s[0], 0.0) + (d if d > 0 else 0.0)
    return pre, post


def _enqueue(
    steps: list[_Lowered],
    lo: int,
    hi: int,
    t: float,
    moving: float,
    after: float,
    queue: dict[str, list[tuple[float, float, float, float]]],
    base: dict[str, float],
    ends: float,
    backward: float | None,
) -> tuple[float, float, float]:
    """`Kernel.slot`'s walk of steps lo..hi-1 of one bucket's chain (its end so far `t`):
    each step queued on its stream as (release, release following the backward alone,
    seconds, tail) and timed on `base`; with `backward`, a step that waits for it starts
    no earlier. The chain's end, the moving release and the iteration's end so far."""
    for k in range(lo, hi):
        stream, dur = steps[k][0], steps[k][1]
        dep = t if backward is None or not steps[k][2] or t >= backward else backward
        after -= dur
        queue.setdefault(stream, []).append((dep, moving, dur, after))
        f = base.get(stream, 0.0)
        t = (f if f > dep else dep) + dur
        base[stream] = t
        if t > ends:
            ends = t
        moving += dur
    return t, moving, ends


def _span(spans: dict[int, list[float]], b: int, start: float, end: float) -> None:
    s = spans.get(b)
    if s is None:
        spans[b] = [start, end]
    else:
        if start < s[0]:
            s[0] = start
        if end > s[1]:
            s[1] = end


_SEEN_MAX = 1 << 16  # entries of `Kernel._shared`'s identity memo before it starts afresh
_RESUME: Any = None  # `_kernel_jit.resume`, once loaded


def warm() -> Any:
    """The compiled resume (`_kernel_jit.resume`), imported and run once on the first
    call: numba compiles it in the first process after an install (about 5 s) and loads
    it from its disk cache after (about 0.4 s with numba's import). The planner's entry
    points call this before they start timing, so that a plan's time is the plan's."""
    global _RESUME
    if _RESUME is None:
        from gcbench.sim._kernel_jit import resume

        z, i = np.zeros(1), np.zeros(1, np.int64)
        resume(z, i, z, np.zeros(1, np.bool_), i, i, i, 1, z, 0.0, 0.0, 0, i, z, 0,
               np.zeros((0, 3), np.int64), i, i, i, 1, 0.0)  # fmt: skip
        _RESUME = resume
    return _RESUME


_IDLE: _Stream = (-math.inf,) * 5 + (0.0,) + (-math.inf,) * 3  # a stream with no jobs


def _after(
    stream: _Stream,
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
