"""ByteComp's GPU compression decision, Algorithm 1 (`bytecomp.txt` §4.4.2), over a given
option space, each candidate timed by the exact timeline kernel (`sim.kernel`).

A *strategy* S is one `Option` per tensor (gradient order: index 0 is the tensor nearest
the output layer, the first ready in backward). It becomes a `Plan` by fusion
(`fused_plan`): consecutive tensors with the same option share a bucket under PyTorch
DDP's caps (1 MiB, then 25 MiB), so a candidate is scored as it would run: per-tensor
plans lose to DDP buckets by their per-collective latency (issue #13, "Fusion in the
plan").

Algorithm 1 as written:

1. Tensors sorted by size, descending; equal sizes nearest the output first (Property #2:
   compressing larger tensors amortises the kernel launches, and a tensor nearer the
   output overlaps its compression with communication, not with computation).
2. `Remove` (Property #1): simulate S, find the bubbles of its communication timeline
   (gaps where the link waits for the next bucket) and drop from the work list every
   uncompressed tensor communicated before a bubble: shortening its communication only
   widens the gap.
3. For each remaining tensor in that order, `GetBestOption` (Property #3, lines 14-21):
   the candidates are S itself and S with this tensor's option replaced by each option
   of the space, all against the same S; keep the one with the smallest simulated
   iteration time (the first on a tie, S itself first, so the result is reproducible: a
   candidate must beat S by more than float noise, a relative 1e-9, `BETTER`, and of
   those the first within that noise of the fastest wins), then `Remove` again (a
   compression can open a new bubble).

The space (`C_gpu` in the paper) is given by the caller (`plan.space`, after the cell's
constraints: by default the whole tree, the 174 GPU paths of
`sim.options.enumerate_paths` and fp16); this function's default, `DEFAULT_SPACE`, holds
the strategies inside bytecomp's space that issue #13 names (fp32-2level, fp16,
allgather, allgather-2level), with fp32 (flat allreduce) as "no compression".

Every candidate's time is exact, but not every candidate is timed from scratch: it
resumes from the incumbent's kernel checkpoints at its first changed bucket
(`candidate_plan` re-fuses only around the change), and lower bounds first rule out
those that cannot win: per run of tensors,
the plan without the run's steps (`Kernel.slot`'s `top`: when it is no better than the
incumbent, no option of the run can be), then every option at once in numpy
(`Kernel.screen`), then the survivors one by one in the order of their screen bounds by
their time from the longest paths of the plan without them (`Kernel.tight`, exact but
for rounding: issue #34, a candidate's cost no longer grows with the buckets after it);
those within noise of the fastest are then timed exactly, the fastest first. A run's
slot and screen are built only once the candidates timed before (those that join a
neighbour's bucket, the other run's) leave the run a chance.
The naive planner (`kernel=False`) fuses and simulates every candidate whole; tests
check both return the same plan.

Gcbench departs from the paper in one place, measured (`strategies/planners.py`): with
`buckets=True`, GetBestOption also tries each option for the tensor's whole current
bucket, since with fusion a tensor changed alone splits its bucket.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gcbench.plan.space import NAMED
from gcbench.sim.bounds import Slot
from gcbench.sim.iteration import (
    BUCKET_BYTES,
    FIRST_BUCKET_BYTES,
    Costs,
    Plan,
    parse_fusion,
    simulate,
)
from gcbench.sim.kernel import COPY_BACK, Checkpoints, Kernel
from gcbench.sim.options import Option
from gcbench.sim.timeline import no_gc
from gcbench.zoo.profile import ModelProfile

NONE = NAMED[0]  # "no compression": a flat ring allreduce of fp32
DEFAULT_SPACE: tuple[Option, ...] = NAMED[1:]
BUBBLE_S = 1e-9  # gaps shorter than this (float noise) are not bubbles
# A candidate replaces the incumbent when it is faster by more than float noise: its time
# below the best's times BETTER. Without the margin a candidate whose bucket is off the
# critical path could "win" by a rounding of the same seconds summed in another order.
BETTER = 1 - 1e-9
# A candidate is pruned when its lower bound passes that threshold by more than rounding
# could (the bound sums the same seconds in another order).
PRUNE_MARGIN = 1 + 1e-12
# `Kernel.tight` sums the same seconds as the exact time in another order: it rules a
# candidate out only past the limit by more than that rounding could
TIGHT_SLACK = 1 - 1e-12
TIGHT_OVER = 1 + 1e-12  # nor above it by more
_HOLE = object()  # the option of the candidate's bucket while it is fused


def closes(rule: int | str, filled: int, size: int, buckets: int) -> bool:
    """Whether the fusion rule closes the current bucket (`filled` bytes, the `buckets`-th)
    before a tensor of `size` bytes: `ddp` once it holds its cap (1 MiB for the first,
    25 MiB after), `tensor` always, `fixed:<bytes>` before it would pass the cap."""
    if rule == "ddp":
        return filled >= (FIRST_BUCKET_BYTES if buckets == 1 else BUCKET_BYTES)
    if rule == "tensor":
        return True
    return filled + size > rule  # type: ignore[operator]


def fused_plan(profile: ModelProfile, options: Sequence[Option], fusion: str = "ddp") -> Plan:
    """Buckets of consecutive tensors with the same option under the cell's fusion policy
    (`sim.iteration.fuse`): `ddp` closes a bucket once it holds at least its cap (1 MiB
    for the first, 25 MiB after), `fixed:<bytes>` before it would exceed the cap, `tensor`
    never fuses. One option for every tensor gives exactly `fuse(profile, fusion)`."""
    rule = parse_fusion(fusion)
    buckets: list[list[int]] = []
    chosen: list[Option] = []
    filled = 0
    ddp = rule == "ddp"  # (`closes` inline for DDP's caps: Algorithm 2 fuses hundreds)
    for i, (t, opt) in enumerate(zip(profile.tensors, options, strict=True)):
        size = t.numel * 4
        if ddp:
            full = filled >= (FIRST_BUCKET_BYTES if len(buckets) == 1 else BUCKET_BYTES)
        else:
            full = closes(rule, filled, size, len(buckets))
        # `is not` first: most neighbours share the very Option object (cheap to compare)
        if not buckets or (chosen[-1] is not opt and chosen[-1] != opt) or full:
            buckets.append([])
            chosen.append(opt)
            filled = 0
        buckets[-1].append(i)
        filled += size
    return Plan(buckets, list(chosen))


@dataclass
class Incumbent:
    """The accepted strategy, as a candidate is built from it: its options and fused plan,
    each tensor's bucket, whether a bucket starts at each tensor, each bucket's fill in
    bytes (the fusion rule's state), and the kernel's checkpoints."""

    options: list[Option]
    plan: Plan
    bucket_of: list[int]
    starts: list[bool]
    fill: list[int]
    checkpoints: Checkpoints | None = None
    spans: dict[int, list[float]] = field(default_factory=dict)  # comm span per bucket

    @classmethod
    def of(cls, options: list[Option], plan: Plan, sizes: Sequence[int]) -> Incumbent:
        bucket_of = [0] * len(options)
        starts = [False] * len(options)
        fill = []
        for b, bucket in enumerate(plan.buckets):
            starts[bucket[0]] = True
            for i in bucket:
                bucket_of[i] = b
            fill.append(sum(sizes[i] for i in bucket))
        return cls(options, plan, bucket_of, starts, fill)


def candidate_plan(
    inc: Incumbent,
    lo: int,
    hi: int,
    option: Option | Sequence[Option],
    sizes: Sequence[int],
    rule: int | str,
) -> tuple[Plan, int]:
    """`fused_plan` of the incumbent's options with tensors lo..hi set to `option` (or,
    given a list of every tensor's options, to theirs), and the number of leading
    buckets it shares with the incumbent's plan, built by re-fusing only from the bucket
    before the change to the first tensor past it where both plans start a bucket (from
    there the fusion rule sees the same state, and the incumbent's buckets follow; a test
    checks the result equals `fused_plan`)."""
    a = inc.bucket_of[lo - 1] if lo > 0 else 0
    old = inc.plan
    buckets = old.buckets[:a]
    chosen = old.options[:a]
    filled = inc.fill[a - 1] if a else 0
    opts, starts = inc.options, inc.starts
    each = option if isinstance(option, list) else None  # (the planner's hole: an object)
    ddp = rule == "ddp"  # (`closes` inline for DDP's caps, as in `fused_plan`)
    for i in range(old.buckets[a][0], len(opts)):
        o: Any = (option if each is None else each[i]) if lo <= i <= hi else opts[i]
        size = sizes[i]
        if ddp:
            full = filled >= (FIRST_BUCKET_BYTES if len(buckets) == 1 else BUCKET_BYTES)
        else:
            full = closes(rule, filled, size, len(buckets))
        if not buckets or (chosen[-1] is not o and chosen[-1] != o) or full:
            if i > hi and starts[i]:  # in step with the incumbent again: its buckets follow
                k = inc.bucket_of[i]
                buckets.extend(old.buckets[k:])
                chosen.extend(old.options[k:])
                break
            buckets.append([i])  # a new list: the incumbent's are shared, never changed
            chosen.append(o)
            filled = size
        else:
            buckets[-1].append(i)
            filled += size
    return Plan(buckets, chosen), a


def before_bubbles(plan: Plan, jobs: Sequence[object]) -> set[int]:
    """The tensors of buckets whose communication ends before a bubble of the communication
    timeline (Property #1), from the simulator's jobs (`bubble_cut` says how)."""
    spans: dict[int, list[float]] = {}
    for j in jobs:
        if getattr(j, "kind", None) != "comm":
            continue
        b = int(j.name.split()[1])  # type: ignore[attr-defined]
        start, end = j.start_s, j.end_s  # type: ignore[attr-defined]
        s = spans.setdefault(b, [start, end])
        s[0], s[1] = min(s[0], start), max(s[1], end)
    return bubble_cut(plan, spans)


def bubble_cut(plan: Plan, spans: dict[int, list[float]]) -> set[int]:
    """The tensors of buckets whose communication ends before a bubble, given each
    bucket's communication span ([first start, last end]): buckets in the order their
    communication starts, a bubble where the next one starts after every earlier one has
    ended."""
    order = sorted(spans, key=lambda b: (spans[b][0], b))
    last_bubble = -1  # position in `order` of the last bucket before a bubble
    end = -float("inf")
    for k, b in enumerate(order):
        if k and spans[b][0] > end + BUBBLE_S:
            last_bubble = k - 1
        end = max(end, spans[b][1])
    return {i for b in order[: last_bubble + 1] for i in plan.buckets[b]}


@dataclass
class Greedy:
    """Algorithm 1's result: the option of each tensor, its fused plan and iteration time,
    and what it cost (`simulations`, `seconds`)."""

    options: list[Option]
    plan: Plan
    iteration_s: float
    simulations: int = 0
    seconds: float = 0.0
    removed: list[int] = field(default_factory=list)  # tensors ruled out by Remove
    pruned: int = 0  # candidates not timed: a lower bound showed they could not win


def order(profile: ModelProfile) -> list[int]:
    """Lines 2-3: tensors by size descending, equal sizes nearest the output first."""
    return sorted(range(len(profile.tensors)), key=lambda i: (-profile.tensors[i].numel, i))


class _Search:
    """Algorithm 1's state while it runs (`greedy`): the incumbent S (options, fused
    plan, time, the kernel's checkpoints), the candidates' slots per run of tensors, and
    the counts of candidates timed and pruned."""

    def __init__(
        self,
        profile: ModelProfile,
        costs: Costs,
        space: Sequence[Option],
        start: Option,
        fusion: str,
        kernel: bool,
    ):
        self.profile, self.costs, self.fusion, self.start = profile, costs, fusion, start
        self.fast = Kernel(profile, costs) if kernel else None
        self.sizes = [t.numel * 4 for t in profile.tensors]
        self.rule = parse_fusion(fusion)
        self.n = len(profile.tensors)
        self.choices = (start, *space)  # GetBestOption's order: S itself first
        # bounds pay off even over the 5 named options, now that a resume runs in Python
        # (measured: kernel A1 on resnet101 12.2 -> 6.4 ms, bert-base 29.9 -> 27.4 ms)
        self.prune = self.fast is not None
        self.where_in: dict[Option, list[int]] = {}
        for k, o in enumerate(self.choices):
            self.where_in.setdefault(o, []).append(k)
        self.sims = 0
        self.pruned = 0
        # per (lo, hi), for this incumbent: the candidates' shape, its slot (None where
        # the run is off the critical path) and a lower bound on each option there
        self.slots: dict[tuple[int, int], tuple[Plan, Slot | None, np.ndarray | float]] = {}
        self.options = [start] * self.n
        self.best_s, self.plan, jobs = self.full(self.options)
        self.jobs: list[object] | None = jobs
        self.sims += 1
        self.inc = self.incumbent()

    def full(self, opts: list[Option]) -> tuple[float, Plan, list[object]]:
        plan = fused_plan(self.profile, opts, self.fusion)
        result = simulate(self.profile, self.costs, plan)
        return result.iteration_s, plan, result.jobs  # type: ignore[return-value]

    def incumbent(self) -> Incumbent:
        inc = Incumbent.of(self.options, self.plan, self.sizes)
        if self.fast is not None:
            _, inc.checkpoints = self.fast.checkpoints(self.plan, inc.spans)
        return inc

    def accept(
        self, lo: int, hi: int, k: int, got: tuple[float, Plan, list[object] | None]
    ) -> None:
        """S becomes S with tensors lo..hi set to option `k`, timed as `got`."""
        self.options = list(self.options)
        self.options[lo : hi + 1] = [self.choices[k]] * (hi + 1 - lo)
        self.best_s, self.plan, self.jobs = got
        self.inc = self.incumbent()
        self.slots.clear()

    def shaped(
        self, lo: int, hi: int, limit: float
    ) -> tuple[Plan, Slot | None, np.ndarray | float]:
        """The incumbent with tensors lo..hi in a bucket of their own whatever its option
        (a placeholder there), its slot, and a lower bound per option (`Kernel.screen`),
        or one for all. First the shape without the run's steps is timed from the
        checkpoint (a plain resume, a fifth of a slot's cost): no candidate of this shape
        ends earlier, so where that passes `limit` (the run is off the critical path)
        there is no slot. Cached for the incumbent: the bounds hold whatever the limit;
        a single bound (no option can win) only while it passes the limit (a guard: a
        limit falls below S's bar only in a visit that accepts, which clears the cache)."""
        got = self.slots.get((lo, hi))
        if got is not None and isinstance(got[2], float) and not got[2] > limit:
            got = None
        if got is None:
            inc, fast = self.inc, self.fast
            shape, at = candidate_plan(inc, lo, hi, _HOLE, self.sizes, self.rule)  # type: ignore[arg-type]
            m = shape.options.index(_HOLE, at)  # type: ignore[arg-type]
            assert fast is not None and inc.checkpoints is not None
            empty: list[Any] = list(shape.options)
            empty[m] = COPY_BACK if fast.copies else None  # what every option ends with
            without = fast.iteration_s(Plan(shape.buckets, empty), inc.checkpoints, at, limit)
            if without > limit:
                got = (shape, None, without)
            else:
                where = fast.slot(shape, inc.checkpoints, at, m)
                # past `top` (a bound that holds whatever the option) no option can win
                low = where.top if where.top > limit else fast.screen(where, shape, self.choices)
                got = (shape, where, low)
            self.slots[lo, hi] = got
        return got

    def timed(
        self, lo: int, hi: int, k: int, limit: float = math.inf
    ) -> tuple[float, Plan, list[object] | None]:
        """The incumbent with tensors lo..hi set to option `k` of `choices`, timed exactly:
        by the kernel from the first bucket it changes, or (naive) fused and simulated
        whole. Above `limit` (it cannot win) the kernel may give a lower bound instead."""
        self.sims += 1
        if self.fast is None:
            trial = list(self.options)
            trial[lo : hi + 1] = [self.choices[k]] * (hi + 1 - lo)
            return self.full(trial)
        plan, at = candidate_plan(self.inc, lo, hi, self.choices[k], self.sizes, self.rule)
        return self.fast.iteration_s(plan, self.inc.checkpoints, at, limit), plan, None

    def sort_runs(
        self, runs: list[tuple[int, int]]
    ) -> tuple[int, list[int], list[tuple[int, int, int, set[int]]]]:
        """The candidates of `runs`: how many there are, the positions (2k + r) to time
        whole (every one where the kernel does not prune; else those that join a
        neighbour's bucket, a plan of another shape, no bound) and the runs that get a
        slot with the options they leave out (the run's own: S itself)."""
        total = 0
        exact: list[int] = []
        slotted: list[tuple[int, int, int, set[int]]] = []
        options = self.options
        for r, (lo, hi) in enumerate(runs):
            # the run's option when it has one: S itself, not a candidate
            same: Option | None = options[lo]
            if any(options[i] != same for i in range(lo + 1, hi + 1)):
                same = None
            skip = set(self.where_in.get(same, ())) if same is not None else set()
            total += len(self.choices) - len(skip)
            if not self.prune:
                exact.extend(2 * k + r for k in range(len(self.choices)) if k not in skip)
                continue
            joined: set[int] = set()
            for i in (lo - 1, hi + 1):
                if 0 <= i < self.n:
                    joined.update(self.where_in.get(options[i], ()))
            joined -= skip
            exact.extend(2 * k + r for k in joined)
            slotted.append((r, lo, hi, skip | joined))
        return total, exact, slotted

    def get_best(self, runs: list[tuple[int, int]]) -> tuple[int, float, Plan, list[object] | None]:
        """GetBestOption (lines 14-21) against the incumbent S: the candidates are S with
        run r of `runs` set to option k of `choices`, in the order 2k + r (S itself
        first). The winner is the first candidate that beats S by more than float noise
        (time < S's x BETTER) and is within noise of the fastest (time <= fastest /
        BETTER); S (position -1) where none beats it. Over a large space the candidates
        that join a neighbour's bucket (no bound) are timed first, then run by run (the
        whole bucket first) the run's slot and screen are built under the bar those
        times have set, often past the run's own bound: then none is built. A run's
        candidates are timed in the order of their screen bounds; one whose bound passes
        `limit` is never timed. The rule does not depend on that order."""
        best_s = self.best_s
        low = math.inf  # the fastest candidate timed so far
        guess = math.inf  # the fastest by `Kernel.tight` (exact but for rounding)

        def limit() -> float:
            """A candidate whose lower bound passes this cannot win: it does not beat S by
            more than noise, or it is not within noise of the fastest so far. It never
            rises, so what it ruled out stays ruled out."""
            return min(best_s * BETTER, low / BETTER) * PRUNE_MARGIN

        def bar() -> float:
            """`limit`, and not within noise of the fastest by `tight` either (that one
            is timed exactly below, so the rule sees it)."""
            return min(limit(), guess * TIGHT_OVER / BETTER * PRUNE_MARGIN)

        found: list[tuple[int, float, Plan, list[object] | None]] = []

        def take(pos: int, got: tuple[float, Plan, list[object] | None]) -> None:
            nonlocal low
            found.append((pos, *got))
            if got[0] < low:
                low = got[0]

        total, exact, slotted = self.sort_runs(runs)
        for pos in sorted(exact):
            lo, hi = runs[pos % 2]
            take(pos, self.timed(lo, hi, pos // 2, limit()))
        # run by run, the whole bucket first (measured: 4% faster on bert-base than the
        # tensor first), so that a run's slot and screen are built under the bar the
        # candidates timed so far have set (often past the run's bound: none built)
        fast = self.fast
        for r, lo, hi, out in reversed(slotted):
            assert fast is not None  # runs are slotted where the kernel prunes
            shape, where, bounds = self.shaped(lo, hi, bar())
            if where is None or isinstance(bounds, float):  # no option can win
                continue
            todo = sorted(
                (bounds[k], k) for k in np.flatnonzero(bounds <= bar()).tolist() if k not in out
            )
            close: list[tuple[float, int]] = []
            for bound, k in todo:
                if bound > bar():
                    break  # and so do the rest: sorted by their bounds
                # the time from the longest paths of the slot's plan without it: exact
                # but for the order of its sums (`sim.paths`)
                v = fast.tight(where, shape, self.choices[k])
                if v * TIGHT_SLACK > bar():
                    continue
                close.append((v, k))
                if v < guess:
                    guess = v
            # those left, timed exactly, the fastest first: it sets the bar for the rest
            for v, k in sorted(close):
                if v * TIGHT_SLACK > bar():
                    break
                chosen = list(shape.options)
                chosen[where.bucket] = self.choices[k]
                trial = Plan(shape.buckets, chosen)
                self.sims += 1
                take(2 * k + r, (fast.resume_at(trial, where, limit()), trial, None))
        self.pruned += total - len(found)
        if not low < best_s * BETTER:
            return -1, best_s, self.plan, self.jobs
        near = low / BETTER  # within noise of the fastest
        winners = (f for f in found if f[1] < best_s * BETTER and f[1] <= near)
        return min(winners, key=lambda f: f[0])


@no_gc()  # thousands of short-lived tuples: collections would cost 5-10% (measured)
def greedy(
    profile: ModelProfile,
    costs: Costs,
    space: Sequence[Option] = DEFAULT_SPACE,
    start: Option = NONE,
    passes: int = 1,
    fusion: str = "ddp",
    buckets: bool = False,
    kernel: bool = True,
) -> Greedy:
    """Algorithm 1 over `space`, every tensor starting at `start` (no compression);
    `passes` > 1 repeats the loop over the tensors while a pass changes something;
    `buckets` adds, for each option, the candidate where the tensor's whole current
    bucket takes it (a tensor alone would split its bucket). Candidates are timed by the
    exact kernel (`sim.kernel`), or with `kernel=False` each by the full simulator (the
    naive planner the tests compare with); the full simulator also times each accepted
    strategy, for the bubbles of its timeline."""
    t0 = time.perf_counter()
    search = _Search(profile, costs, space, start, fusion, kernel)
    removed: set[int] = set()
    seen: Plan | None = None  # the plan Remove last looked at

    def remove() -> None:  # Remove(S, G): uncompressed tensors before a bubble
        nonlocal seen
        plan, jobs = search.plan, search.jobs
        if plan is seen:  # nothing accepted since: the same tensors
            return
        seen = plan
        # the kernel's communication spans where it timed the plan, else the simulator's
        cut = bubble_cut(plan, search.inc.spans) if jobs is None else before_bubbles(plan, jobs)
        for i in cut:
            if search.options[i] == start:
                removed.add(i)

    remove()
    for _ in range(passes):
        changed = False
        for idx in order(profile):
            if idx in removed:
                continue
            inc = search.inc
            group = search.plan.buckets[inc.bucket_of[idx]] if buckets else [idx]
            # a bucket is a run of tensors
            runs = [(idx, idx), (group[0], group[-1])] if len(group) > 1 else [(idx, idx)]
            pos, s, p, j = search.get_best(runs)
            if pos >= 0:  # S with one run's option replaced
                lo, hi = runs[pos % 2]
                search.accept(lo, hi, pos // 2, (s, p, j))
                changed = True
            remove()
        if not changed:
            break
    return Greedy(
        search.options, search.plan, search.best_s, search.sims, time.perf_counter() - t0,
        sorted(removed), search.pruned,
    )  # fmt: skip
