"""The planner kernel's lower bounds: methods of `kernel.Kernel` (the first argument is
the kernel; `Kernel` takes them as its own), here so that each module reads in one sitting.

Over a large option space most candidates are ruled out before they are timed, by lower
bounds that never exceed the exact time (tests check them against it): `slot` times the
plan without the candidate bucket's steps (W: no candidate ends earlier) by the one
recurrence (`timeline.Timeline`), watching its jobs as a graph (`paths.Graph`); `screen`
bounds every option of the space at once from numpy tables of each option's seconds per
stream, cached per bucket size, and W's longest paths from each stream; `paths.tight`
gives one option's time from those paths (exact but for rounding); `resume_at` times a
candidate exactly from the slot's state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gcbench.sim.iteration import Plan, lower
from gcbench.sim.options import ROOTED
from gcbench.sim.paths import Graph
from gcbench.sim.timeline import State, Step, Tail

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
    streams' free times then (P1), the update's seconds, the plan without the
    candidate's steps timed exactly (`top`: no candidate ends earlier) and as a graph of
    jobs (`paths.Graph`: `screen` and `tight` read its longest paths)."""

    bucket: int
    before: State
    rest: list[Tail]
    last: float
    free: dict[str, float]
    update: float
    top: float
    graph: Graph


def slot(self: Kernel, plan: Plan, resume: Checkpoints, at: int, m: int) -> Slot:
    """Bucket `m` of `plan` about to take one option or another (the planner's
    candidates for one tensor or bucket, `plan` sharing its first `at` buckets with the
    checkpointed one): the state before it, for `resume_at`, and the plan without the
    bucket's steps (W) timed from just after its backward, watched as a graph: adding a
    candidate's jobs to W can only delay every later job, so W's time bounds every
    candidate's, and W's longest paths give each candidate's time (`paths.tight`)."""
    st = resume.states[at]
    free = dict(st.free)
    rest = resume.rest[: st.pending]
    last, done = self.phase1(plan, at, m, free, st.last, st.done, rest, self._shared,
                             memo=self._memo(plan))  # fmt: skip
    before = State(dict(free), last, done, len(rest))
    last, done = self.backward(plan.buckets[m], free, last, done)
    update = self._update  # the timeline's: the profile's update and the fixed overhead
    base = dict(free)
    later = list(rest)
    graph = Graph(m, free, self._bw, update)
    now, _ = self.phase1(plan, m + 1, len(plan.buckets), base, last, done, later,
                         self._shared, watch=graph, memo=self._memo(plan))  # fmt: skip
    graph.total = self.phase2(base, now, later, graph)  # W's time
    return Slot(m, before, rest, last, free, update, graph.total, graph)


def screen(self: Kernel, slot: Slot, plan: Plan, space: tuple[Any, ...]) -> np.ndarray:
    """Lower bounds for every option of `space` in the slot's bucket at once, looser
    than `tight` and far cheaper (numpy over a table cached per bucket class, and per
    stream the slot's graph's longest paths, `paths.Graph.paths_from`). The iteration
    ends no earlier than W's time (`top`); than the option's chain (its early steps
    from its bucket's backward, the deferred ones after the whole backward, then the
    update); and, on each stream, than its early steps back to back from the stream's
    free time, then W's longest path from that stream on (`tight`'s e_i + U_i); than
    its deferred steps back to back from the stream's free time at P2 (no earlier than
    in W, than its early steps and W's jobs there between, than the backward's end),
    then W's longest path from there (z_j + V_j)."""
    b = slot.bucket
    sizes = plan.elements
    columns, pre, post, waits, chain_pre, chain_post = self.option_table(
        plan.buckets[b], space, b, None if sizes is None else sizes[b]
    )
    if self.ctx.N == 1:
        return np.full(len(space), slot.top)
    graph, n = slot.graph, self.ctx.n
    early, y, ahead, v = (np.empty(len(columns)) for _ in range(4))
    for j, (s, level, suffix) in enumerate(columns):
        if level is not None:  # this bucket's root's stream
            s = f"root:{level}:{b % n[level]}{suffix}"
        early[j], y[j], ahead[j], v[j] = graph.paths_from(s)
    backward = graph.backward_s(slot.last)
    low = (pre + early).max(axis=1)
    start = np.maximum(np.maximum(pre + ahead, y), backward)
    np.maximum(low, (waits + start + post + v).max(axis=1), out=low)
    chain = np.maximum(chain_pre + slot.last, backward) + chain_post + slot.update
    np.maximum(low, chain, out=low)
    np.maximum(low, slot.top, out=low)
    return low


_GRID = 4  # screen tables: bucket sizes rounded down to 2^(k / _GRID) elements


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
    if self._by_size and size is not None and size > 0:
        # every step's seconds grow with the bucket's size (checked for every preset's
        # options: `tests/test_plan.py`), so a table built for a size at or
        # below this one bounds it too: sizes rounded down to 4 steps an octave share one
        size = 2.0 ** (math.floor(math.log2(size) * _GRID) / _GRID)
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
