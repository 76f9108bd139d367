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
3. For each remaining tensor in that order, `GetBestOption` (Property #3): the candidates
   are S itself and S with this tensor's option replaced by each option of the space;
   keep the one with the smallest simulated iteration time (the first on a tie, S
   itself first, so the result is reproducible), then `Remove` again (a compression can
   open a new bubble).

The space (`C_gpu` in the paper) is given by the caller (`plan.space`, after the cell's
constraints); `DEFAULT_SPACE` holds the strategies inside bytecomp's space that issue #13
names (fp32-2level, fp16, allgather, allgather-2level), with fp32 (flat allreduce) as "no
compression". The whole space (`constraints: {space: all}`: the 174 GPU paths of
`sim.options.enumerate_paths` and fp16) costs 50-60x the planning time
(`benchmarks/planner.py --space`).

Gcbench departs from the paper in one place, measured (`plan/strategies.py`): with
`buckets=True`, GetBestOption also tries each option for the tensor's whole current
bucket, since with fusion a tensor changed alone splits its bucket.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gcbench.plan.space import NAMED
from gcbench.sim.iteration import (
    BUCKET_BYTES,
    FIRST_BUCKET_BYTES,
    Costs,
    Plan,
    parse_fusion,
    simulate,
)
from gcbench.sim.kernel import Kernel
from gcbench.sim.options import Option
from gcbench.zoo.profile import ModelProfile

NONE = NAMED[0]  # "no compression": a flat ring allreduce of fp32
DEFAULT_SPACE: tuple[Option, ...] = NAMED[1:]
BUBBLE_S = 1e-9  # gaps shorter than this (float noise) are not bubbles


def fused_plan(profile: ModelProfile, options: Sequence[Option], fusion: str = "ddp") -> Plan:
    """Buckets of consecutive tensors with the same option under the cell's fusion policy
    (`sim.iteration.fuse`): `ddp` closes a bucket once it holds at least its cap (1 MiB
    for the first, 25 MiB after), `fixed:<bytes>` before it would exceed the cap, `tensor`
    never fuses. One option for every tensor gives exactly `fuse(profile, fusion)`."""
    rule = parse_fusion(fusion)
    buckets: list[list[int]] = []
    chosen: list[Option] = []
    filled = 0
    for i, (t, opt) in enumerate(zip(profile.tensors, options, strict=True)):
        size = t.numel * 4
        if rule == "ddp":
            full = filled >= (FIRST_BUCKET_BYTES if len(buckets) == 1 else BUCKET_BYTES)
        elif rule == "tensor":
            full = True
        else:
            full = filled + size > rule  # type: ignore[operator]
        # `is not` first: most neighbours share the very Option object (cheap to compare)
        if not buckets or (chosen[-1] is not opt and chosen[-1] != opt) or full:
            buckets.append([])
            chosen.append(opt)
            filled = 0
        buckets[-1].append(i)
        filled += size
    return Plan(buckets, list(chosen))


def before_bubbles(plan: Plan, jobs: Sequence[object]) -> set[int]:
    """The tensors of buckets whose communication ends before a bubble of the communication
    timeline (Property #1): buckets in the order their communication starts, a bubble
    where the next one starts after every earlier one has ended."""
    spans: dict[int, list[float]] = {}
    for j in jobs:
        if getattr(j, "kind", None) != "comm":
            continue
        b = int(j.name.split()[1])  # type: ignore[attr-defined]
        start, end = j.start_s, j.end_s  # type: ignore[attr-defined]
        s = spans.setdefault(b, [start, end])
        s[0], s[1] = min(s[0], start), max(s[1], end)
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


def order(profile: ModelProfile) -> list[int]:
    """Lines 2-3: tensors by size descending, equal sizes nearest the output first."""
    return sorted(range(len(profile.tensors)), key=lambda i: (-profile.tensors[i].numel, i))


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
    options = [start] * len(profile.tensors)
    sims = 0
    fast = Kernel(profile, costs) if kernel else None

    def full(opts: list[Option]) -> tuple[float, Plan, list[object]]:
        plan = fused_plan(profile, opts, fusion)
        result = simulate(profile, costs, plan)
        return result.iteration_s, plan, result.jobs  # type: ignore[return-value]

    def run(opts: list[Option]) -> tuple[float, Plan, list[object] | None]:
        nonlocal sims
        sims += 1
        if fast is None:
            return full(opts)
        plan = fused_plan(profile, opts, fusion)
        return fast.iteration_s(plan), plan, None

    best_s, plan, jobs0 = full(options)
    jobs: list[object] | None = jobs0
    sims += 1
    removed: set[int] = set()

    def remove() -> None:  # Remove(S, G): uncompressed tensors before a bubble
        nonlocal jobs
        if jobs is None:  # timed by the kernel: the full simulator gives the timeline
            jobs = list(simulate(profile, costs, plan).jobs)
        for i in before_bubbles(plan, jobs):
            if options[i] == start:
                removed.add(i)

    remove()
    for _ in range(passes):
        changed = False
        for idx in order(profile):
            if idx in removed:
                continue
            group = next(b for b in plan.buckets if idx in b) if buckets else [idx]
            for opt in (start, *space):  # GetBestOption: S first; first minimum wins
                for members in ([idx], group) if len(group) > 1 else ([idx],):
                    if all(options[i] == opt for i in members):
                        continue
                    trial = list(options)
                    for i in members:
                        trial[i] = opt
                    s, p, j = run(trial)
                    if s < best_s:
                        options, best_s, plan, jobs, changed = trial, s, p, j, True
            remove()
        if not changed:
            break
    return Greedy(
        options, plan, best_s, sims, time.perf_counter() - t0, sorted(removed)
    )
