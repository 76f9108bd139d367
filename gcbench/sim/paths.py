"""A candidate's iteration time from longest paths: the planner's tightest bound.

The recurrence (`timeline`) is max-plus: a job starts at the max of its predecessors'
ends (the job before it on its stream, the step before it in its chain, the backward's
end where it waits for it) and ends its seconds later. So the iteration's time is the
longest path through the graph of jobs, and a plan that differs from another in one
bucket's steps differs only in those jobs.

`Graph` records that graph (a `Watch`) while `bounds.slot` times the plan without the
slot bucket's steps (W), from the point P1 just after the bucket's backward. A candidate
adds its bucket's steps: the early ones (before its first that waits for backward) at
P1, the deferred ones at P2, their turn in phase two (after the deferred steps of the
buckets before it). Its time is, exactly:

    T = max(T_W,                       paths that avoid its jobs (its jobs only delay them)
            e_i + U_i,                 from its early steps' ends e_i on stream i
            t_end + update,            its chain's end, to the update
            z_j + V_j)                 from its deferred steps' ends z_j on stream j

with U_i the longest path in W from stream i's free time at P1 to the end, V_j from the
first job of W on stream j after P2; its deferred steps start from each stream's free
time at P2, y_j = max(y_j in W, e_i + A_ij), A_ij the longest path in W from stream i at
P1 to stream j at P2 (and the backward's end likewise). U and V come from one backward
pass over W's graph; A from one forward pass per stream the candidate's early steps use,
cached per slot. So a candidate costs its own steps, not the buckets that follow it
(issue #34: on gpt2-xl at 1,024 GPUs the resumes this replaces were 95% of Algorithm
1). The sums run in another order than the recurrence's: `tight` is the exact time up to
rounding (the planner allows 1e-12 either way, `greedy.TIGHT_SLACK`), and the planner
times the candidates it does not rule out exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gcbench.sim.timeline import Step, Watch

if TYPE_CHECKING:
    from gcbench.sim.bounds import Slot
    from gcbench.sim.iteration import Plan
    from gcbench.sim.kernel import Kernel

_NONE = -1  # no predecessor (a value known in W: a constant)
_NEG = -math.inf


class Graph(Watch):
    """W's jobs from P1 on, in the order issued (every predecessor comes first): each
    job's seconds, end in W, and predecessors on its stream and in its chain (node
    indices, `_NONE`), and whether it waits for the backward's end. A stream's free
    time at P1 is a node of its own (a source, 0 seconds), made when the stream is
    first used. `m` is the slot's bucket, `free` the streams' free times at P1, `bw`
    the tensors' backward seconds, `update_s` the update's."""

    chains = True

    def __init__(self, m: int, free: dict[str, float], bw: list[float], update_s: float):
        self.m, self._free, self._bw, self.update_s = m, free, bw, update_s
        self.total = math.inf  # W's iteration time (`bounds.slot` sets it)
        self.dur: list[float] = []
        self.end: list[float] = []
        self.sp: list[int] = []
        self.cp: list[int] = []
        self.waits: list[bool] = []
        self.src: dict[str, int] = {}  # stream -> its source node
        self.on: dict[str, int] = {}  # stream -> its last node so far
        self.chain_of: dict[int, int] = {}  # bucket -> its chain's last node so far
        self.last = _NONE  # the compute chain's (backward's) last node
        self.backward_end = _NONE  # `last` when phase two starts
        self.p2 = -1  # the first node after P2
        self.at_p2: dict[str, int] = {}  # stream -> its last node before P2
        self.after: dict[str, int] = {}  # stream -> its first node after P2
        self.ahead: dict[str, float] = {}  # stream -> its jobs' seconds before P2
        self.update_preds: tuple[int, ...] = ()
        self._t = _NONE  # the chain being timed: its last node
        self._b = -1  # its bucket (-1: none yet)
        self._late = False
        self._passes: dict[str, list[float]] = {}
        self._tails: list[float] | None = None

    def _node(self, stream: str, dur: float, cp: int, waits: bool, end: float) -> int:
        sp = self.on.get(stream)
        if sp is None:
            sp = self._source(stream)
        n = len(self.dur)
        self.dur.append(dur)
        self.end.append(end)
        self.sp.append(sp)
        self.cp.append(cp)
        self.waits.append(waits)
        self.on[stream] = n
        if self.p2 < 0:
            self.ahead[stream] = self.ahead.get(stream, 0.0) + dur
        elif stream not in self.after:
            self.after[stream] = n
        return n

    def _source(self, stream: str) -> int:
        n = len(self.dur)
        self.dur.append(0.0)
        self.end.append(self._free.get(stream, 0.0))
        self.sp.append(_NONE)
        self.cp.append(_NONE)
        self.waits.append(False)
        self.src[stream] = self.on[stream] = n
        return n

    def backward(self, lo: int, hi: int, dep: float, start: float) -> None:
        bw = self._bw
        end = start
        for i in range(lo, hi + 1):
            end += bw[i]
        self.last = self._node("compute", end - start, self.last, False, end)

    def chain(self, b: int, steps: Sequence[Step], cut: int, late: bool) -> None:
        self._close()
        self._b = b
        if not late:
            self._t = self.last  # a chain starts at its backward's end
            return
        if not self._late:  # phase two begins
            self._late = True
            self.backward_end = self.last
        if b > self.m and self.p2 < 0:
            self._at_p2()
        self._t = self.chain_of.get(b, _NONE)  # a bucket before P1: its chain a constant

    def _at_p2(self) -> None:
        self.p2 = len(self.dur)
        self.at_p2 = dict(self.on)

    def step(self, b: int, step: Step, dep: float, start: float) -> float:
        stream, _, dur, _, _, waits = step
        end = start + dur
        self._t = self._node(stream, dur, self._t, self._late and waits, end)
        return end

    def _close(self) -> None:
        """The chain timed so far ends at its last node."""
        if self._b >= 0:
            self.chain_of[self._b] = self._t

    def update(self, start: float) -> None:
        self._close()
        if not self._late:
            self.backward_end = self.last
        if self.p2 < 0:
            self._at_p2()
        compute = self.on.get("compute")
        if compute is None:
            compute = self._source("compute")
        # the update waits for the compute stream, the backward and every chain's end
        self.update_preds = (compute, self.backward_end, *self.chain_of.values())

    # -- the passes, made once a candidate asks --------------------------------------

    def tails(self) -> list[float]:
        """Per node, the longest path from its end to the iteration's end (-inf: none)."""
        if self._tails is None:
            n = len(self.dur)
            tl = [_NEG] * n
            for p in self.update_preds:
                if p != _NONE:
                    tl[p] = max(tl[p], self.update_s)
            dur, sp, cp, waits, be = self.dur, self.sp, self.cp, self.waits, self.backward_end
            for k in range(n - 1, -1, -1):
                v = tl[k]
                if v == _NEG:
                    continue
                v += dur[k]  # from the node's start
                p = sp[k]
                if p != _NONE and v > tl[p]:
                    tl[p] = v
                p = cp[k]
                if p != _NONE and v > tl[p]:
                    tl[p] = v
                if waits[k] and be != _NONE and v > tl[be]:
                    tl[be] = v
            self._tails = tl
        return self._tails

    def paths_from(self, stream: str) -> tuple[float, float, float, float]:
        """For a candidate's steps on `stream`, what `bounds.screen` reads: its free time
        at P1 plus W's longest path from there to the end (the candidate's early steps
        end no earlier than that free time plus their seconds: `tight`'s e_i + U_i);
        its free time at P2 in W; at P1 plus the seconds of W's jobs on it between P1
        and P2; W's longest path from P2 to the end (V_j); -inf where no job follows."""
        tl = self.tails()
        s = self.src.get(stream)  # (the compute stream's: always, the update's)
        free = self._free.get(stream, 0.0)
        u = tl[s] if s is not None else _NEG
        n = self.at_p2.get(stream)
        a = self.after.get(stream)
        if a is not None:
            v = self.dur[a] + tl[a]
        else:
            v = self.update_s if stream == "compute" else _NEG
        return (free + u, self.end[n] if n is not None else free,
                free + self.ahead.get(stream, 0.0), v)  # fmt: skip

    def backward_s(self, last: float) -> float:
        """The backward's end in W (`last`: the compute chain's end at P1)."""
        be = self.backward_end
        return self.end[be] if be != _NONE else last

    def reach(self, stream: str) -> list[float]:
        """Per node before P2, the longest path from stream's free time at P1 to its end
        (-inf: none), the source's own node 0."""
        got = self._passes.get(stream)
        if got is None:
            stop = self.p2 if self.p2 >= 0 else len(self.dur)
            got = [_NEG] * stop
            s = self.src.get(stream)
            if s is not None and s < stop:
                got[s] = 0.0
                dur, sp, cp, waits, be = self.dur, self.sp, self.cp, self.waits, self.backward_end
                for k in range(s + 1, stop):
                    v = got[sp[k]] if sp[k] != _NONE else _NEG
                    p = cp[k]
                    if p != _NONE and got[p] > v:
                        v = got[p]
                    if waits[k] and be != _NONE and got[be] > v:
                        v = got[be]
                    if v != _NEG:
                        got[k] = v + dur[k]
            self._passes[stream] = got
        return got


def tight(self: Kernel, slot: Slot, plan: Plan, option: Any) -> float:
    """The iteration time of `plan` with `option` in the slot's bucket, from W's longest
    paths (the module's formula): exact but for the order of its sums."""
    g = slot.graph
    if self.ctx.N == 1:
        return slot.top
    b = slot.bucket
    sizes = plan.elements
    steps, cut, _, _, _ = self._shared(
        plan.buckets[b], option, b, None if sizes is None else sizes[b]
    )
    free = slot.free
    t = slot.last
    ends: dict[str, float] = {}
    for k in range(cut):
        stream, dur = steps[k].stream, steps[k].dur
        f = ends.get(stream)
        if f is None:
            f = free.get(stream, 0.0)
        if f > t:
            t = f
        t += dur
        ends[stream] = t
    tl = g.tails()
    low = g.total
    for stream, e in ends.items():  # (the compute stream's source: always, the update's)
        src = g.src.get(stream)
        if src is not None and e + tl[src] > low:
            low = e + tl[src]
    if cut < len(steps):
        reach = {s: g.reach(s) for s in ends}
        be = g.backward_end
        backward = g.backward_s(slot.last)
        for s, e in ends.items():
            r = reach[s]
            if be != _NONE and r[be] != _NEG and e + r[be] > backward:
                backward = e + r[be]
        y: dict[str, float] = {}
        for k in range(cut, len(steps)):
            stream, dur, waits = steps[k].stream, steps[k].dur, steps[k].waits
            f = y.get(stream)
            if f is None:
                f = _free_at_p2(g, stream, ends, reach, free)
            dep = t if not waits or t >= backward else backward
            start = f if f > dep else dep
            t = start + dur
            y[stream] = t
        for stream, z in y.items():
            n = g.after.get(stream)
            if n is not None:
                v = z + g.dur[n] + tl[n]
            elif stream == "compute":
                v = z + g.update_s
            else:
                continue
            if v > low:
                low = v
    if t + g.update_s > low:
        low = t + g.update_s
    return low


def _free_at_p2(
    g: Graph, stream: str, ends: dict[str, float], reach: dict[str, list[float]],
    free: dict[str, float],
) -> float:  # fmt: skip
    """Stream's free time at P2 with the candidate's early steps' ends `ends`."""
    n = g.at_p2.get(stream)
    if n is None:  # no job of W on it before P2: as the candidate left it, or at P1
        return ends.get(stream, free.get(stream, 0.0))
    v = g.end[n]
    for s, e in ends.items():
        r = reach[s][n]
        if r != _NEG and e + r > v:
            v = e + r
    return v
