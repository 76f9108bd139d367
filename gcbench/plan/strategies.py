"""The planner's strategies (registered in `sim.strategies.BUILDERS`):

- `bytecomp-greedy`: Algorithm 1's plan alone (`greedy.greedy` over `DEFAULT_SPACE`);
- `bytecomp`: the best of that plan and the uniform strategies inside its space (fp32,
  fp32-2level, fp16, allgather, allgather-2level), each timed by the simulator;
- `brute-force`: the fastest assignment of none, fp16, allgather and allgather-2level to
  every tensor (`brute.brute_force`; models of at most 10 tensors, else a PlanError);
- `upper-bound`: what bytecomp could reach if compression cost nothing: the better of
  bytecomp's plan and a re-plan, both timed with zero compress, decompress and cast costs
  (ByteComp Fig. 13's reference).

Bucket candidates. Algorithm 1 as the paper writes it tries each option for one tensor at
a time. With fusion that gets stuck: changing one tensor of a fused bucket splits the
bucket (one more collective, its latency and launches), so no single change gains even
where the whole bucket would (tiny-cnn, randomk, 8x8 V100: every tensor in one bucket,
the one-tensor greedy keeps fp32 at 7.5x the best uniform strategy). The strategies'
GetBestOption also tries, for each option, the tensor's whole current bucket taking it
(`greedy(buckets=True)`). Over 162 cells (9 models x 10/25/100 Gbps x dgc, randomk,
efsignsgd x 2 or 8 machines of 8 V100s), the best uniform strategy inside the space
is matched within 1.02x by: the paper's one-tensor pass in 58% of the cells (worst
7.9x); with bucket candidates in 97.5% (worst 1.09x, 40 s for all 162); repeating
that pass until nothing changes in 99.4% (worst 1.02x, but 140 s) (BENCHMARKS.md).
One pass with bucket candidates is the default (`PASSES`, `BUCKETS`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from gcbench.plan.greedy import DEFAULT_SPACE, NONE, fused_plan, greedy
from gcbench.sim.iteration import Costs, Plan, _zero, simulate

if TYPE_CHECKING:
    from gcbench.config.models import Cell
    from gcbench.sim.strategies import Step
    from gcbench.zoo.profile import ModelProfile

PASSES = 1  # passes over the tensors (1: as the paper)
BUCKETS = True  # also try each option for the tensor's whole bucket
UNIFORM = (NONE, *DEFAULT_SPACE)  # the strategies inside bytecomp's space


def free_compression(costs: Costs) -> Costs:
    """`costs` with compression, decompression and casts taking no time (GPU and CPU)."""
    return replace(
        costs,
        cast_s=_zero,
        compress_s=_zero,
        decompress_s=_zero,
        cpu_compress_s=_zero,
        cpu_decompress_s=_zero,
    )


def _step(plan: Plan, costs: Costs, planner_s: float) -> list[Step]:
    from gcbench.sim.strategies import Step

    return [Step(plan, costs, planner_s=planner_s)]


def _best(profile: ModelProfile, costs: Costs, plans: list[Plan]) -> Plan:
    """The plan with the smallest simulated iteration (the first on a tie)."""
    times = [simulate(profile, costs, p, keep_jobs=False).iteration_s for p in plans]
    return plans[times.index(min(times))]


def bytecomp_greedy(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    t0 = time.perf_counter()
    g = greedy(profile, costs, passes=PASSES, fusion=cell.fusion, buckets=BUCKETS)
    return _step(g.plan, costs, time.perf_counter() - t0)


def _bytecomp_plan(cell: Cell, profile: ModelProfile, costs: Costs) -> Plan:
    g = greedy(profile, costs, passes=PASSES, fusion=cell.fusion, buckets=BUCKETS)
    n = len(profile.tensors)
    uniform = [fused_plan(profile, [o] * n, cell.fusion) for o in UNIFORM]
    return _best(profile, costs, [g.plan, *uniform])


def bytecomp(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    t0 = time.perf_counter()
    plan = _bytecomp_plan(cell, profile, costs)
    return _step(plan, costs, time.perf_counter() - t0)


def upper_bound(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    t0 = time.perf_counter()
    free = free_compression(costs)
    plan = _best(
        profile, free, [_bytecomp_plan(cell, profile, costs), _bytecomp_plan(cell, profile, free)]
    )
    return _step(plan, free, time.perf_counter() - t0)


def brute_force(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    from gcbench.plan.brute import brute_force as search

    t0 = time.perf_counter()
    best = search(profile, costs, fusion=cell.fusion)
    return _step(best.plan, costs, time.perf_counter() - t0)
