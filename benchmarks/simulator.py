"""Simulator speed: one iteration's timeline (build, time, metrics), median of many runs.

    python benchmarks/simulator.py

1. bert-base on 64 GPUs (8 x 8, 25 Gbps), the fp32 plan (DDP buckets).
2. The same, every tensor its own bucket, options assigned round-robin over dgc's
   enumeration (4,341 options; tensor i gets option i mod 4,341, so the first options of
   the enumeration: the flat ones and the first hierarchical ones).
3. The same with the options spread over the whole enumeration (tensor i gets option
   i * 4,341 // tensors): more hierarchical options, more phases and operations each.
4. Per-tensor cost at 1,000 and 10,000 tensors (a synthetic profile of equal tensors, the
   same mix of options at both sizes: spread evenly over the enumeration), the two sizes
   timed interleaved so both see the same machine load: the ratio shows whether the
   timeline stays linear. (Round-robin would give the 1,000 tensors only the first, simpler
   options: the two sides would do different work.)

Targets (issue #9): (2) <= 5 ms, (4) ratio <= 1.3.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from _timing import median_s

from gcbench.backends.simulate import cell_profile, costs_for
from gcbench.config import Cell
from gcbench.sim.iteration import Plan, fuse, simulate
from gcbench.sim.options import PRESETS, enumerate_options
from gcbench.zoo.profile import ModelProfile, TensorProfile


def main() -> None:
    cell = Cell.model_validate(
        {
            "model": "bert-base",
            "compressor": "dgc-1pct",
            "strategy": "allgather",
            "network": {"inter_gbps": 25},
            "cluster": {"machines": 8, "gpus_per_machine": 8},
        }
    )
    profile = cell_profile(cell)
    costs = costs_for(cell, PRESETS["allgather"])
    options = enumerate_options(additive=costs.additive)
    ddp = fuse(profile, "ddp")
    fp32 = Plan.uniform(ddp, PRESETS["fp32"])
    per_tensor = fuse(profile, "tensor")
    n = len(per_tensor)
    round_robin = Plan(per_tensor, [options[i % len(options)] for i in range(n)])
    spread = Plan(per_tensor, [options[i * len(options) // n] for i in range(n)])
    for plan in (fp32, round_robin, spread):  # warm the option checks and cost caches
        simulate(profile, costs, plan)
    a = median_s(lambda: simulate(profile, costs, fp32, keep_jobs=False), 51)
    b = median_s(lambda: simulate(profile, costs, round_robin, keep_jobs=False), 51)
    c = median_s(lambda: simulate(profile, costs, spread, keep_jobs=False), 51)
    jobs = {
        name: len(simulate(profile, costs, plan).jobs)
        for name, plan in (("rr", round_robin), ("spread", spread))
    }
    print(f"bert-base, 64 GPUs, {n} tensors, dgc's {len(options):,} options")
    print(f"  fp32 plan ({len(ddp)} DDP buckets):              {a * 1e3:6.2f} ms")
    print(
        f"  per tensor, round-robin options ({jobs['rr']:,} jobs):  {b * 1e3:6.2f} ms"
        "   (target 5 ms)"
    )
    print(f"  per tensor, spread options ({jobs['spread']:,} jobs):     {c * 1e3:6.2f} ms")

    plans = {}
    for size in (1_000, 10_000):
        t = TensorProfile("t", (1000,), 1000, "layer", 1e-4)
        synthetic = replace(profile, tensors=tuple(replace(t, name=f"t{i}") for i in range(size)))
        assert isinstance(synthetic, ModelProfile)
        buckets = fuse(synthetic, "tensor")
        # the same mix of options at both sizes: evenly spread over the enumeration
        mix = [options[i * len(options) // size] for i in range(size)]
        plans[size] = (synthetic, Plan(buckets, mix))
    times: dict[int, list[float]] = {1_000: [], 10_000: []}
    for _ in range(15):
        for size, (synthetic, plan) in plans.items():
            start = time.perf_counter()
            simulate(synthetic, costs, plan, keep_jobs=False)
            times[size].append((time.perf_counter() - start) / size)
    per = {size: statistics.median(ts) for size, ts in times.items()}
    for size in per:
        us = per[size] * 1e6
        print(f"  {size:>6,} tensors, spread options:             {us:6.2f} us per tensor")
    print(
        f"  ratio 10,000 / 1,000:                         {per[10_000] / per[1_000]:6.2f}"
        "    (target 1.3)"
    )


if __name__ == "__main__":
    main()
