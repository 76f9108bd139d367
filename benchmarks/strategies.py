"""The strategies the papers compare, simulated with gcbench's defaults.

    python benchmarks/strategies.py

1. ACP-SGD Table III's testbed (8 machines x 4 RTX 2080 Ti over PCIe, 10 Gbps):
   S-SGD (fp32), Power-SGD* and ACP-SGD for BERT-base (batch 32, sequence 64, rank 32)
   and ResNet-50 (batch 64, rank 4), beside the paper's measured iteration times.
   What it compares: gcbench's uncalibrated defaults (the rtx2080ti device entry, 70% of
   line rate and 25 us per step on the network) against a measurement on real hardware;
   nothing here was fitted to these numbers.
2. BytePS with as many CPU servers as GPU machines against PS (BERT-base, 4 machines x 1
   V100, 25 Gbps): equal with one partition per server and no pipeline fill, and the gap
   with BytePS's default 4,096,000-byte partitions and the fill counted.
3. Every strategy on ResNet-50 and BERT-base, 4 x 8 V100 (NVLink), 25 Gbps, 4 CPU servers
   for those that use them: iteration time and simulation wall time.
"""

from __future__ import annotations

import time
from dataclasses import replace

from gcbench import strategies
from gcbench.backends.simulate import cell_profile, costs_for, simulate_cell
from gcbench.config import Cell
from gcbench.sim.iteration import Plan, fuse, simulate
from gcbench.sim.options import PRESETS

TABLE_III = {  # ms per iteration, ACP-SGD Table III
    ("bert-base", "fp32"): 805,
    ("bert-base", "powersgd"): 292,
    ("bert-base", "acpsgd"): 193,
    ("resnet50", "fp32"): 266,
}


def table_iii() -> None:
    print("ACP-SGD Table III testbed: 8 x 4 RTX 2080 Ti, PCIe, 10 Gbps (defaults, not fitted)")
    head = f"  {'model':10s} {'strategy':9s} {'gcbench ms':>10s} {'compute ms':>10s}"
    print(f"{head} {'paper ms':>9s}")
    for model, batch, seq, rank in (("bert-base", 32, 64, 32), ("resnet50", 64, None, 4)):
        for strategy in ("fp32", "powersgd", "acpsgd"):
            spec = {"name": model, "batch_size": batch, **({"seq_len": seq} if seq else {})}
            c = Cell.model_validate(
                {
                    "model": spec,
                    "compressor": f"{strategy}:rank={rank}" if strategy != "fp32" else "none",
                    "strategy": strategy,
                    "device": "rtx2080ti",
                    "network": {"intra": "pcie", "inter_gbps": 10},
                    "cluster": {"machines": 8, "gpus_per_machine": 4},
                }
            )
            m = simulate_cell(c).metrics
            paper = TABLE_III.get((model, strategy))
            print(
                f"  {model:10s} {strategy:9s} {m['iteration_s'] * 1e3:10.1f} "
                f"{m['compute_s'] * 1e3:10.1f} {paper if paper else '-':>9}"
            )


def byteps_vs_ps() -> None:
    c = Cell.model_validate(
        {
            "model": "bert-base",
            "compressor": "none",
            "strategy": "ps",
            "network": {"inter_gbps": 25},
            "cluster": {"machines": 4, "gpus_per_machine": 1, "cpu_servers": 4},
        }
    )
    profile = cell_profile(c)
    costs = costs_for(c)
    buckets = fuse(profile, "ddp")
    print("\nBytePS at k = n against PS: bert-base, 4 x 1 V100 + 4 CPU servers, 25 Gbps")

    def comm(plan_costs) -> dict[str, float]:
        out = {}
        for name in ("ps", "byteps"):
            r = simulate(profile, plan_costs, Plan.uniform(buckets, PRESETS[name]))
            out[name] = sum(j.dur_s for j in r.jobs if j.kind == "comm")
        return out

    ps = bp = 0.0
    for b in buckets:  # one partition per server: each bucket's own partition size
        nbytes = 4 * sum(profile.tensors[i].numel for i in b)
        one = [b]
        exact = replace(costs, partition_bytes=nbytes / 4, pipeline_fill=False)
        for name in ("ps", "byteps"):
            r = simulate(profile, exact, Plan(one, [PRESETS[name]]))
            t = sum(j.dur_s for j in r.jobs if j.kind == "comm")
            if name == "ps":
                ps += t
            else:
                bp += t
    print(f"  one partition per server, no fill: PS {ps * 1e3:.3f} ms, BytePS {bp * 1e3:.3f} ms")
    d = comm(costs)
    print(
        f"  defaults (4,096,000-byte partitions, fill): PS {d['ps'] * 1e3:.2f} ms, BytePS "
        f"{d['byteps'] * 1e3:.2f} ms, PS / BytePS {d['ps'] / d['byteps']:.3f}"
    )


def every_strategy() -> None:
    print("\nEvery strategy, 4 x 8 V100 NVLink, 25 Gbps (CPU servers: 4 where used)")
    print(f"  {'strategy':16s} {'compressor':12s} {'resnet50 ms':>11s} {'bert-base ms':>12s} "
          f"{'sim ms':>7s}")  # fmt: skip
    for name, info in strategies.registry().items():
        if name == "brute-force":  # models of at most 10 tensors: benchmarks/planner.py
            continue
        compressor = {"none": "none", "own": info.own, "additive": "randomk-1pct",
                      "any": "dgc-1pct"}[info.compressor]  # fmt: skip
        servers = 4 if info.servers != "none" else 0
        row, wall = [], 0.0
        for model in ("resnet50", "bert-base"):
            c = Cell.model_validate(
                {
                    "model": model,
                    "compressor": compressor,
                    "strategy": name,
                    "network": {"inter_gbps": 25},
                    "cluster": {"machines": 4, "gpus_per_machine": 8, "cpu_servers": servers},
                }
            )
            simulate_cell(c)  # warm the profile and cost caches
            start = time.perf_counter()
            row.append(simulate_cell(c).metrics["iteration_s"] * 1e3)
            wall = max(wall, time.perf_counter() - start)
        print(f"  {name:16s} {compressor:12s} {row[0]:11.1f} {row[1]:12.1f} {wall * 1e3:7.1f}")


if __name__ == "__main__":
    table_iii()
    byteps_vs_ps()
    every_strategy()
