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

from gcbench.sim import bounds
from gcbench.sim.bounds import Lowered, State, Table, per_stream
from gcbench.sim.iteration import Costs, Plan, SimContext, lower
from gcbench.sim.options import ROOTED
from gcbench.zoo.profile import ModelProfile

# A bucket's lowering: its steps, the first that waits for backward, for the steps from
# that one on their seconds and each stream's share of them, each stream's share of the
# steps before it, and its number in the compiled resume's arrays (-1: none)
_Lowering = tuple[
    list[Lowered],
    int,
    float,
    tuple[tuple[str, float], ...],
    tuple[tuple[str, float], ...],
    int,
]


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

    states: list[State]
    rest: list[tuple[list[Lowered], int, float, int]]
    arrays: _Arrays | None = None


class Kernel:
    """`iteration_s(plan)` for one profile and one set of costs, caching lowerings; the
    lower bounds of `bounds` (`slot`, `bound`, `screen`, `resume_at`)."""

    slot = bounds.slot
    bound = bounds.bound
    screen = bounds.screen
    option_table = bounds.option_table
    resume_at = bounds.resume_at

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
        self._tables: dict[tuple[Any, ...], Table] = {}
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
            pre, post = per_stream(lowered, cut)
            hit = self.cache[key] = (
                steps,
                cut,
                sum(d for _, d, _, _ in steps[cut:]),
                tuple(post.items()),
                tuple(pre.items()),
                self._register(steps, cut) if self._compiles else -1,
            )
        return hit

    def _register(self, steps: list[Lowered], cut: int) -> int:
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
        rest: list[tuple[list[Lowered], int, float, int]],
        states: list[State] | None = None,
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
                states.append(State(dict(free), last, end, done, len(rest)))
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
        state: State | None,
        rest: list[tuple[list[Lowered], int, float, int]],
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
        rest: list[tuple[list[Lowered], int, float, int]],
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


def _span(spans: dict[int, list[float]], b: int, start: float, end: float) -> None:
    s = spans.get(b)
    if s is None:
        spans[b] = [start, end]
    else:
        if start < s[0]:
            s[0] = start
        if end > s[1]:
            s[1] = end
