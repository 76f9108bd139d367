"""Emulate one cell on Ray (issue #14, DESIGN §6): one `Worker` actor per GPU of the
cell, placed per machine (one placement-group bundle per machine: STRICT_SPREAD when the
Ray cluster has a node per machine, PACK otherwise), executing the cell's plan with real
gradients, compressors and collectives for `steps` iterations.

What comes back (`Emulation`): per bucket the bytes each phase moved (counted from the
payloads, per worker), the (de)compression seconds measured in the actors, and the
numerical fidelity: the aggregated gradient against the exact sum of every worker's
gradient (recomputed here in float64 from the same seeds), after one step and summed
over all steps (where error feedback pays back what compression dropped).

Not yet (issue #14, left for later): `mode: emulate` in suites and the runner, the
virtual and wall clocks, summation servers, the phases `execute.NotEmulated` names, and
fault handling beyond a bounded wait.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import torch

from gcbench.cluster.execute import check
from gcbench.cluster.gradients import bucket_gradient
from gcbench.config import Cell
from gcbench.errors import ConfigError


@dataclass
class Emulation:
    """What an emulated cell measured (see the module docstring)."""

    buckets: list[list[int]]
    options: list[str]
    phase_bytes: list[list[list[int]]]  # [rank][bucket][phase] at step 0
    iteration_s: float  # the virtual clock's iteration, step 0 (the slowest worker's)
    metrics: dict[str, Any]  # rank 0's timeline metrics, as `simulate`'s
    aggregates: list[torch.Tensor]  # rank 0's aggregated gradient per bucket, step 0
    compress_s: float  # summed over workers and steps
    decompress_s: float
    error_first: float  # relative L2 error of the aggregate, step 0
    error_total: float  # the same for the sum over all steps
    # largest |aggregate - exact| / ((n - 1) · 2^-23 · Σ|g|) over the elements at step 0:
    # at most 1 for an exact fp32 sum of n workers (its worst-case rounding)
    bound_ratio: float


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous of the process group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan_of(cell: Cell) -> tuple[Any, Any, Any]:
    """The cell's profile, and its plan and costs (its strategy's first step)."""
    from gcbench.sim.costs import cell_profile, costs_for
    from gcbench.sim.strategies import BUILDERS

    profile = cell_profile(cell)
    step = BUILDERS[cell.strategy](cell, profile, costs_for(cell))[0]
    return profile, step.plan, step.costs


def emulate_cell(cell: Cell, steps: int = 2, timeout_s: float = 120.0) -> Emulation:
    """Run `cell` on Ray actors (Ray must be connected: `runner.local.connect`)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from gcbench.cluster.worker import Worker
    from gcbench.compress import create

    if cell.cluster.cpu_servers:
        raise ConfigError(["emulate: summation servers are not emulated yet (cpu_servers: 0)"])
    profile, plan, _ = plan_of(cell)
    buckets, options = plan.buckets, list(plan.options)
    numels = [t.numel for t in profile.tensors]
    compressor = create(cell.compressor.kind, **cell.compressor.params())
    for o in options:
        if o is None:
            raise ConfigError([f"emulate: {cell.strategy} leaves buckets out: not emulated yet"])
        check(o, compressor)
    machines, gpus = cell.cluster.machines, cell.cluster.gpus_per_machine
    world = machines * gpus
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    share = min(1.0, ray.cluster_resources().get("CPU", 1.0) / world)  # fractional CPUs
    pg = placement_group(
        [{"CPU": share * gpus}] * machines,
        strategy="STRICT_SPREAD" if nodes >= machines > 1 else "PACK",
    )
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)
        raise ConfigError(
            [f"emulate: {machines} x {gpus} workers cannot be placed on this Ray cluster"]
        )
    port = free_port()
    actor: Any = ray.remote(Worker)
    workers: list[Any] = [
        actor.options(
            num_cpus=share,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=r // gpus
            ),
        ).remote(r, world, gpus, port)
        for r in range(world)
    ]
    try:
        refs = [w.run.remote(cell, steps) for w in workers]
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if pending:
            raise TimeoutError(
                f"emulate: {len(pending)} of {world} workers did not finish in {timeout_s:.0f} s"
            )
        results = sorted(ray.get(done), key=lambda r: r["rank"])
    finally:
        for w in workers:
            ray.kill(w)
        remove_placement_group(pg)
    return _measure(cell, buckets, options, numels, results, steps, world)


def _measure(
    cell: Cell,
    buckets: list[list[int]],
    options: list[Any],
    numels: list[int],
    results: list[dict[str, Any]],
    steps: int,
    world: int,
) -> Emulation:
    """Compare rank 0's aggregates with the exact sums of every worker's gradients."""
    first, total = results[0]["first"], results[0]["total"]
    err2 = ref2 = tot_err2 = tot_ref2 = 0.0
    ratio = 0.0
    for b, bucket in enumerate(buckets):
        exact = torch.zeros(sum(numels[i] for i in bucket), dtype=torch.float64)
        absum = torch.zeros_like(exact)
        exact_total = torch.zeros_like(exact)
        for step in range(steps):
            s = torch.zeros_like(exact)
            for r in range(world):
                g = bucket_gradient(cell.seed, r, step, bucket, numels).double()
                s += g
                if step == 0:
                    absum += g.abs()
            if step == 0:
                exact = s
            exact_total += s
        d = first[b].double() - exact
        err2 += float(d.square().sum())
        ref2 += float(exact.square().sum())
        allowed = absum * ((world - 1) * 2.0**-23)
        worst = torch.where(allowed > 0, d.abs() / allowed, d.abs() * float("inf"))
        worst = torch.nan_to_num(worst, nan=0.0)  # 0 / 0: an exact zero
        ratio = max(ratio, float(worst.max()) if worst.numel() else 0.0)
        dt = total[b] - exact_total
        tot_err2 += float(dt.square().sum())
        tot_ref2 += float(exact_total.square().sum())
    return Emulation(
        buckets=buckets,
        options=[o.name for o in options],
        phase_bytes=[r["phase_bytes"][0] for r in results],
        iteration_s=max(r["iteration_s"] for r in results),
        metrics=results[0]["metrics"],
        aggregates=first,
        compress_s=sum(r["compress_s"] for r in results),
        decompress_s=sum(r["decompress_s"] for r in results),
        error_first=(err2 / ref2) ** 0.5 if ref2 else 0.0,
        error_total=(tot_err2 / tot_ref2) ** 0.5 if tot_ref2 else 0.0,
        bound_ratio=ratio,
    )
