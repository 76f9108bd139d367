"""Simulator speed: one iteration's timeline, trace recording off, median of many runs.

    python benchmarks/simulator.py

1. bert-base on 64 GPUs (8 x 8, 25 Gbps), the fp32 plan (DDP buckets).
2. The same with a mixed per-tensor plan (every tensor its own bucket, options cycling
   through fp32, fp16, allgather and two-level allgather).
3. Per-tensor cost at 1,000 and 10,000 tensors (a synthetic profile of equal tensors,
   per-tensor mixed plan): the ratio shows whether the engine stays linear.

Targets (issue #5): (1) <= 2 ms, (2) <= 5 ms, (3) ratio <= 1.3.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from _timing import median_s

from gcbench.config import Cell
from gcbench.sim.iteration import STRATEGIES, Plan, fuse, simulate
from gcbench.sim.wfbp import cell_profile, costs_for
from gcbench.zoo.profile import ModelProfile, TensorProfile


def main() -> None:
    cell = Cell.model_validate(
        {
            "model": "bert-base",
            "compressor": "efsignsgd",
            "strategy": "allgather",
            "network": {"inter_gbps": 25},
            "cluster": {"machines": 8, "gpus_per_machine": 8},
        }
    )
    profile = cell_profile(cell)
    costs = costs_for(cell)
    options = list(STRATEGIES.values())
    ddp = fuse(profile, "ddp")
    fp32 = Plan(ddp, [STRATEGIES["fp32"]] * len(ddp))
    per_tensor = fuse(profile, "tensor")
    mixed = Plan(per_tensor, [options[i % len(options)] for i in range(len(per_tensor))])
    a = median_s(lambda: simulate(profile, costs, fp32, keep_jobs=False), 51)
    b = median_s(lambda: simulate(profile, costs, mixed, keep_jobs=False), 51)
    print(f"bert-base, 64 GPUs, {len(profile.tensors)} tensors")
    print(f"  fp32 plan ({len(ddp)} DDP buckets):       {a * 1e3:6.2f} ms   (target 2 ms)")
    print(f"  mixed per-tensor plan:                {b * 1e3:6.2f} ms   (target 5 ms)")

    # 1,000 and 10,000 tensors, interleaved so both see the same machine load.
    plans = {}
    for n in (1_000, 10_000):
        t = TensorProfile("t", (1000,), 1000, "layer", 1e-4)
        synthetic = replace(profile, tensors=tuple(replace(t, name=f"t{i}") for i in range(n)))
        assert isinstance(synthetic, ModelProfile)
        buckets = fuse(synthetic, "tensor")
        plans[n] = (synthetic, Plan(buckets, [options[i % len(options)] for i in range(n)]))
    times: dict[int, list[float]] = {1_000: [], 10_000: []}
    for _ in range(15):
        for n, (synthetic, plan) in plans.items():
            start = time.perf_counter()
            simulate(synthetic, costs, plan, keep_jobs=False)
            times[n].append((time.perf_counter() - start) / n)
    per = {n: statistics.median(ts) for n, ts in times.items()}
    for n in per:
        print(f"  {n:>6,} tensors, mixed per-tensor:     {per[n] * 1e6:6.2f} us per tensor")
    print(
        f"  ratio 10,000 / 1,000:                 {per[10_000] / per[1_000]:6.2f}    (target 1.3)"
    )


if __name__ == "__main__":
    main()
