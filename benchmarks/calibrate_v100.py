"""Fit the V100 entry of the device table to the V100 profiles the ByteComp authors published.

    python benchmarks/calibrate_v100.py [PATH/TO/espresso-v100-profiles.json]

The reference file (default `../shared/data/espresso-v100-profiles.json`) gives, per model,
the microseconds between consecutive gradients becoming ready during backward on a V100.
Their sum runs from the first gradient to the last, so it leaves out the work before the
first gradient (the output layer); we compare it with the same span of the zoo's profile:
the sum of `backward_s` over every tensor but the first (`measured_span` below).

The fit minimises the worst model's |log ratio| (simulated / measured), then the sum of
squared log ratios, by coordinate descent (40 seeded random starts) over a grid of winograd, conv, matmul and memory efficiencies and the
per-kernel overhead, then prints the constants to paste into `gcbench/zoo/devices.py` and
each model's ratio.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from pathlib import Path

import numpy as np

from gcbench.zoo import devices
from gcbench.zoo.catalog import ESPRESSO_MODELS, MODELS
from gcbench.zoo.profile import cached_trace, profile_from_trace
from gcbench.zoo.trace import Op

REFERENCE_MODELS = ESPRESSO_MODELS  # reference file name -> zoo model

GRID = {
    "winograd_efficiency": [x / 20 for x in range(10, 61)],
    "conv_efficiency": [x / 100 for x in range(10, 101, 2)],
    "matmul_efficiency": [x / 100 for x in range(20, 101, 2)],
    "memory_efficiency": [x / 100 for x in range(30, 101, 5)],
    "kernel_overhead_us": [float(x) for x in range(1, 16)],
}


def measured_spans(path: Path) -> dict[str, float]:
    data = json.loads(path.read_text())["models"]
    return {zoo: sum(data[ref]["ready_gap_us"]) * 1e-6 for ref, zoo in REFERENCE_MODELS.items()}


def span_ops(zoo: str) -> list[Op]:
    """The ops whose backward runs between the first and the last gradient becoming ready
    (the span the reference measures)."""
    info = MODELS[zoo]
    trace = cached_trace(zoo, info.batch_size, info.seq_len)
    uses = sorted({p.first_use for p in trace.params})
    return list(trace.ops[uses[0] : uses[-1]])


def simulated_span(zoo: str, dev: devices.Device) -> float:
    """The zoo profile's time from the first gradient becoming ready to the last."""
    info = MODELS[zoo]
    devices.DEVICES[dev.name] = dev
    profile = profile_from_trace(cached_trace(zoo, info.batch_size, info.seq_len), dev.name)
    return sum(t.backward_s for t in profile.tensors[1:])


class FastSpan:
    """`simulated_span` for many devices at once: the same roofline sum, in numpy."""

    KINDS = ("winograd", "conv1x1", "conv", "matmul", "embedding", "memory")

    def __init__(self, zoo: str):
        ops = [op for op in span_ops(zoo) if op.bwd_kernels]
        self.flops = np.array([op.bwd_flops for op in ops])
        self.nbytes = np.array([op.bwd_nbytes for op in ops])
        self.kernels = float(sum(op.bwd_kernels for op in ops))
        self.kind = np.array([self.KINDS.index(op.kind) for op in ops])

    def __call__(self, dev: devices.Device) -> float:
        rates = np.array(
            [dev.flops_per_s(k) if k not in ("embedding", "memory") else 1.0 for k in self.KINDS]
        )
        compute = np.where(self.flops > 0, self.flops / rates[self.kind], 0.0)
        memory = self.nbytes / (dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency)
        return float(
            np.maximum(compute, memory).sum() + self.kernels * dev.kernel_overhead_us * 1e-6
        )


def loss(
    dev: devices.Device, spans: dict[str, FastSpan], measured: dict[str, float]
) -> tuple[float, float]:
    """(worst |log ratio|, sum of squared log ratios): the acceptance bound is per model,
    so the fit minimises the worst model first and the overall spread second."""
    logs = [math.log(spans[m](dev) / measured[m]) for m in measured]
    return round(max(abs(x) for x in logs), 3), sum(x * x for x in logs)


def descend(dev: devices.Device, spans: dict[str, FastSpan], measured: dict[str, float]):
    best = loss(dev, spans, measured)
    while True:
        improved = False
        for field, values in GRID.items():
            for v in values:
                trial = dataclasses.replace(dev, **{field: v})
                value = loss(trial, spans, measured)
                if value < best:
                    best, dev, improved = value, trial, True
        if not improved:
            return best, dev


def fit(measured: dict[str, float]) -> devices.Device:
    """Coordinate descent from 40 seeded random starts on the grid; the best end point."""
    spans = {m: FastSpan(m) for m in measured}
    rng = random.Random(0)
    base = dataclasses.replace(devices.DEVICES["v100"], name="fit")
    results = []
    for _ in range(40):
        start = dataclasses.replace(base, **{f: rng.choice(v) for f, v in GRID.items()})
        results.append(descend(start, spans, measured))
    return min(results, key=lambda r: r[0])[1]


def main() -> None:
    default = Path(__file__).resolve().parents[2] / "shared/data/espresso-v100-profiles.json"
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    measured = measured_spans(path)
    dev = fit(measured)
    for field in GRID:
        print(f"V100_{field.upper()} = {getattr(dev, field)}")
    print(f"\n{'model':18s} {'measured ms':>12s} {'flops ms':>10s} {'ratio':>7s}")
    for m in measured:
        sim = simulated_span(m, dev)
        print(f"{m:18s} {measured[m] * 1e3:12.1f} {sim * 1e3:10.1f} {sim / measured[m]:7.3f}")


if __name__ == "__main__":
    main()
