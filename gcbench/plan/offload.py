"""ByteComp's CPU offloading, Algorithm 2 (`bytecomp.txt` §4.4.3), after Algorithm 1.

The tensors Algorithm 1 compresses (T_gpu) are grouped by (size, option): within a group
the tensors are interchangeable but for their position. Lemma 1 says that if q tensors
of a group are offloaded, the best q are those *farthest* from the output layer (their
CPU compression starts earliest and overlaps most). So a plan is a vector U = (u_1 ..
u_d), u_i of group i's tensors offloaded, taken in the group's order, and Algorithm 2
times every U (Π(|G_i| + 1) plans) and keeps the fastest.

"Offload" moves an option's compression and decompression to the CPU: every `gc`/`gd`
becomes `cc`/`cd` (`offloaded`), the communication path unchanged.

The paper's intuition and the authors' code take the tensors *nearest* the output
instead; `order="nearest"` does that, `order="farthest"` follows Lemma 1, and
`unrestricted` tries all 2^|T_gpu| subsets, the reference both are measured against
(benchmarks/planner.py). The search is capped (`MAX_PLANS`): past the cap, groups are
decided one at a time, largest first, each u_i the best with the others fixed, and the
result says so (`capped`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from gcbench.plan.greedy import Incumbent, candidate_plan, fused_plan
from gcbench.sim.iteration import Costs, Plan, parse_fusion
from gcbench.sim.kernel import Kernel
from gcbench.sim.options import Op, Option
from gcbench.sim.timeline import no_gc
from gcbench.zoo.profile import ModelProfile

MAX_PLANS = 4096  # plans Algorithm 2 times at most before it decides group by group
Order = Literal["farthest", "nearest"]


@lru_cache(maxsize=1024)  # the same object for the same option: cheap kernel-cache keys
def offloaded(option: Option) -> Option:
    """The option with its compression and decompression on the CPU."""
    steps = tuple(Op(s.op, "cpu") if isinstance(s, Op) else s for s in option.steps)
    return Option(steps, option.fp16)


def on_gpu(option: Option) -> bool:
    """Whether the option compresses on the GPU (something to offload)."""
    return any(isinstance(s, Op) and s.where == "gpu" for s in option.steps)


@dataclass
class Offload:
    options: list[Option]
    plan: Plan
    iteration_s: float
    simulations: int
    capped: bool = False  # the Π(|G_i| + 1) search was past MAX_PLANS


def groups(profile: ModelProfile, options: Sequence[Option], order: Order) -> list[list[int]]:
    """T_gpu grouped by (size, option), each group in offload order: farthest from the
    output first (Lemma 1) or nearest first; groups by size descending."""
    found: dict[tuple[int, Option], list[int]] = {}
    for i, opt in enumerate(options):
        if on_gpu(opt):
            found.setdefault((profile.tensors[i].numel, opt), []).append(i)
    out = []
    for _, members in sorted(found.items(), key=lambda kv: (-kv[0][0], kv[1][0])):
        out.append(sorted(members, reverse=order == "farthest"))
    return out


def _timer(profile: ModelProfile, costs: Costs, fusion: str) -> Callable[[list[Option]], float]:
    """Times a strategy with the exact kernel (`sim.kernel`), its lowerings shared."""
    kernel = Kernel(profile, costs)
    return lambda options: kernel.iteration_s(fused_plan(profile, options, fusion))


class _Resumed:
    """Times strategies against a base one (its fused plan and kernel checkpoints): each
    fused anew only around the tensors where it differs from the base
    (`greedy.candidate_plan`) and timed from the first bucket that changes, the same
    floats in the same order as timing it whole, and above `limit` (it cannot win)
    possibly a lower bound instead. `rebase` makes a timed strategy the base."""

    def __init__(self, kernel: Kernel, options: list[Option], fusion: str):
        self.kernel, self.rule = kernel, parse_fusion(fusion)
        self.sizes = [t.numel * 4 for t in kernel.profile.tensors]
        self.rebase(options, fused_plan(kernel.profile, options, fusion))

    def rebase(self, options: list[Option], plan: Plan) -> float:
        self.options, self.plan = options, plan
        self.inc = Incumbent.of(options, plan, self.sizes)
        self.time_s, self.inc.checkpoints = self.kernel.checkpoints(plan)
        return self.time_s

    def __call__(self, options: list[Option], limit: float = math.inf) -> tuple[float, Plan]:
        """The strategy's time and fused plan."""
        changed = [i for i, (a, b) in enumerate(zip(self.options, options, strict=True))
                   if a is not b]  # fmt: skip
        if not changed:
            return self.time_s, self.plan  # the base itself
        plan, at = candidate_plan(self.inc, changed[0], changed[-1], options, self.sizes,
                                  self.rule)  # fmt: skip
        assert self.inc.checkpoints is not None
        return self.kernel.iteration_s(plan, self.inc.checkpoints, at, limit), plan


def _apply(options: Sequence[Option], grouped: list[list[int]], u: Sequence[int]) -> list[Option]:
    out = list(options)
    for members, k in zip(grouped, u, strict=True):
        for i in members[:k]:
            out[i] = offloaded(out[i])
    return out


@no_gc()  # as Algorithm 1: thousands of short-lived tuples, collections cost (measured)
def algorithm2(
    profile: ModelProfile,
    costs: Costs,
    options: Sequence[Option],
    order: Order = "farthest",
    fusion: str = "ddp",
    max_plans: int = MAX_PLANS,
) -> Offload:
    """Algorithm 2 from Algorithm 1's options: the fastest U (U = 0 first, so offloading
    nothing wins a tie). Each U's plan is timed from the first bucket it changes, resumed
    from the checkpoints of U = 0's plan (past the cap: of the best U so far), and stops
    as soon as a bound shows it cannot beat the best (`_Resumed`): the same times, so the
    same choice, as timing every plan whole."""
    grouped = groups(profile, options, order)
    sizes = [len(g) + 1 for g in grouped]
    total = math.prod(sizes)
    best_u = [0] * len(grouped)
    timed = _Resumed(Kernel(profile, costs), list(options), fusion)
    best_s, sims = timed.time_s, 1
    capped = total > max_plans
    if not capped:
        for u in itertools.product(*(range(n) for n in sizes)):
            if any(u):
                sims += 1
                s, _ = timed(_apply(options, grouped, u), best_s)
                if s < best_s:
                    best_u, best_s = list(u), s
    else:  # coordinate by coordinate, each group's u_i with the others fixed
        for g in range(len(grouped)):
            for k in range(1, sizes[g]):
                trial = list(best_u)
                trial[g] = k
                sims += 1
                chosen = _apply(options, grouped, trial)
                s, plan = timed(chosen, best_s)
                if s < best_s:
                    best_u, best_s = trial, s
                    timed.rebase(chosen, plan)
    chosen = _apply(options, grouped, best_u)
    return Offload(chosen, fused_plan(profile, chosen, fusion), best_s, sims, capped)


def unrestricted(
    profile: ModelProfile, costs: Costs, options: Sequence[Option], fusion: str = "ddp"
) -> Offload:
    """Every subset of T_gpu offloaded (2^|T_gpu| plans): the reference for Lemma 1."""
    movable = [i for i, o in enumerate(options) if on_gpu(o)]
    time_of = _timer(profile, costs, fusion)
    best_opts, best_s, sims = list(options), time_of(list(options)), 1
    for r in range(1, len(movable) + 1):
        for subset in itertools.combinations(movable, r):
            trial = list(options)
            for i in subset:
                trial[i] = offloaded(trial[i])
            s = time_of(trial)
            sims += 1
            if s < best_s:
                best_opts, best_s = trial, s
    return Offload(best_opts, fused_plan(profile, best_opts, fusion), best_s, sims)
