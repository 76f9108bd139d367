"""COVAP (covap.txt §III): the fusion buckets cut into shards (§III-C), shard t
allreduced uncompressed at step k iff (t + k) mod I == 0 (§III-A); a period of I steps,
reported as their mean (DESIGN §5 Metrics)."""

from __future__ import annotations

from typing import Any

from gcbench.sim.iteration import Costs, Plan, fuse
from gcbench.sim.options import PRESETS, Option
from gcbench.strategies.base import Step, Strategy, register
from gcbench.zoo.profile import ModelProfile

# COVAP as the workers run it: every shard through the compressor's filter and an
# allreduce of what it lets through. A selected shard (index + step ≡ 0 mod I) sends its
# values plus the residual (§III-D), the others an empty payload (no collective) and
# keep theirs: the plan's fp32 allreduce of the selected shards and nothing for the rest
# (`None`), with COVAP's error feedback
EXECUTED = Option.parse("gc flat:ar* gd")


@register
class COVAP(Strategy):
    name = "covap"
    description = "COVAP: each step allreduces the shards its interval selects"
    source = "COVAP §III"
    compressor = "own"
    own = "covap"

    def build(self, cell: Any, profile: ModelProfile, costs: Costs) -> list[Step]:
        from gcbench.compress.covap import selected, shards

        interval = int(cell.compressor.params()["interval"])
        buckets, elements = [], []
        fused = fuse(profile, cell.fusion)
        sizes = [sum(profile.tensors[i].numel for i in b) for b in fused]
        for bucket, size, pieces in zip(fused, sizes, shards(sizes, interval), strict=True):
            for _ in range(pieces):
                buckets.append(bucket)
                elements.append(size / pieces)
        fp32 = PRESETS["fp32"]
        return [
            Step(
                Plan(
                    buckets,
                    [fp32 if selected(t, step, interval) else None for t in range(len(buckets))],
                    elements,
                ),
                costs,
                1 / interval,
            )
            for step in range(interval)
        ]

    def executed(self, options: list[Option | None]) -> list[Option | None]:
        """The compressor's filter and an allreduce on every shard (`EXECUTED`)."""
        return [EXECUTED] * len(options)
