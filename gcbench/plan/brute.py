"""Brute force: every assignment of a small option set to every tensor (issue #13), to
measure how far Algorithm 1 lands from the optimum. |space|^tensors simulations: for
small models only (`MAX_CANDIDATES`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from gcbench.errors import PlanError
from gcbench.plan.greedy import fused_plan
from gcbench.plan.space import BRUTE
from gcbench.sim.iteration import Costs, Plan
from gcbench.sim.kernel import Kernel
from gcbench.sim.options import Option
from gcbench.zoo.profile import ModelProfile

BRUTE_SPACE = BRUTE  # none, fp16, allgather, HiTopKComm (`plan.space`)
MAX_CANDIDATES = 2**20  # assignments simulated at most (4 options: 10 tensors)


@dataclass
class Optimum:
    options: list[Option]
    plan: Plan
    iteration_s: float
    simulations: int


def brute_force(
    profile: ModelProfile,
    costs: Costs,
    space: Sequence[Option] = BRUTE_SPACE,
    fusion: str = "ddp",
) -> Optimum:
    """The fastest assignment of `space`'s options to the tensors (the first in
    `itertools.product` order on a tie)."""
    n = len(profile.tensors)
    check_size(n, len(space))
    total = len(space) ** n
    best: Optimum | None = None
    kernel = Kernel(profile, costs)  # exact, and its lowerings are shared
    for combo in itertools.product(space, repeat=n):
        options = list(combo)
        plan = fused_plan(profile, options, fusion)
        s = kernel.iteration_s(plan)
        if best is None or s < best.iteration_s:
            best = Optimum(options, plan, s, 0)
    assert best is not None
    best.simulations = total
    return best


def check_size(tensors: int, options: int) -> None:
    """PlanError unless brute force over `options` options for `tensors` tensors stays
    within `MAX_CANDIDATES` plans (`gcbench run` and `validate` check a suite's cells with
    it before anything runs)."""
    most = _max_tensors(options)
    if tensors > most:
        raise PlanError(
            f"brute force over {options} options and {tensors} tensors is more than "
            f"{MAX_CANDIDATES:,} plans; it takes a model of at most {most} tensors"
        )


def _max_tensors(options: int) -> int:
    n = 0
    while options ** (n + 1) <= MAX_CANDIDATES:
        n += 1
    return n
