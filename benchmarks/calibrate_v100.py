"""Fit the V100 entry of the device table to the V100 profiles the ByteComp authors published.

    python benchmarks/calibrate_v100.py [PATH/TO/espresso-v100-profiles.json]

The reference file (default `../shared/data/espresso-v100-profiles.json`) gives, per model,
the microseconds between consecutive gradients becoming ready during backward on a V100.
Their sum runs from the first gradient to the last, so it leaves out the work before the
first gradient (the output layer); we compare it with the same span of the zoo's profile:
the sum of `backward_s` over every tensor but the first (`measured_span` below).

The fit minimises the worst model's |log ratio| (simulated / measured), then the sum of
squared log ratios, by coordinate descent (40 seeded random starts) over a grid of
Winograd, conv, matmul and memory efficiencies and the per-kernel overhead. It prints the
constants to paste into `gcbench/zoo/devices.py` and, per model, two ratios:

- in sample: the constants fitted to all eight models, this one included. Five constants
  fitted to eight points under a minimax loss; these ratios show how well the roofline
  *can* describe the set, not how well it predicts a model.
- held out (leave one model out, `leave_one_model_out`): the constants refitted to the
  other seven with the same procedure, and this model predicted from them. This is the
  out-of-sample figure: how far the FLOP-based time of a model the constants have not
  seen can be off on the V100 they were fitted on (it says nothing about other GPUs,
  whose entries reuse the V100 fractions).

`tests/test_calibration.py` asserts the held-out ratios. The fit takes about 0.25 s (the
roofline is evaluated for all grid values of a field at once), the eight refits about
2 s, building the eight models' traces about 1 s.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gcbench.zoo import devices
from gcbench.zoo.catalog import ESPRESSO_MODELS, MODELS
from gcbench.zoo.profile import cached_trace, profile_from_trace
from gcbench.zoo.traces import Op

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
        # Ops without FLOPs (elementwise, embedding) are memory-bound on every device:
        # their bytes are summed once; the roofline max is taken over the others only.
        self.memory_only_nbytes = float(sum(op.bwd_nbytes for op in ops if not op.bwd_flops))
        ops_c = [op for op in ops if op.bwd_flops]
        self.flops = np.array([op.bwd_flops for op in ops_c], dtype=float)
        self.nbytes = np.array([op.bwd_nbytes for op in ops_c], dtype=float)
        self.kernels = float(sum(op.bwd_kernels for op in ops))
        self.kind = np.array([self.KINDS.index(op.kind) for op in ops_c], dtype=int)

    @classmethod
    def rates(cls, devs: Sequence[devices.Device]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per device: FLOP/s per kind (1 where only memory counts), memory bytes/s, and
        seconds per kernel."""
        flops = np.array(
            [
                [d.flops_per_s(k) if k not in ("embedding", "memory") else 1.0 for k in cls.KINDS]
                for d in devs
            ]
        )
        mem_Bps = np.array([d.mem_bandwidth_gbs * 1e9 * d.memory_efficiency for d in devs])
        overhead_s = np.array([d.kernel_overhead_us for d in devs]) * 1e-6
        return flops, mem_Bps, overhead_s

    def many(self, rates: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """The span on each device of `rates` (`FastSpan.rates`)."""
        flops_per_s, mem_Bps, overhead_s = rates
        compute = self.flops / flops_per_s[:, self.kind]
        memory = self.nbytes / mem_Bps[:, None]
        return (
            np.maximum(compute, memory).sum(axis=1)
            + self.memory_only_nbytes / mem_Bps
            + self.kernels * overhead_s
        )

    def __call__(self, dev: devices.Device) -> float:
        return float(self.many(self.rates([dev]))[0])


Loss = tuple[float, float]


def losses(
    devs: Sequence[devices.Device], spans: dict[str, FastSpan], measured: dict[str, float]
) -> list[Loss]:
    """Per device: (worst |log ratio|, sum of squared log ratios) over the `measured`
    models. The acceptance bound is per model, so the fit minimises the worst model first
    and the overall spread second."""
    rates = FastSpan.rates(devs)
    logs = np.array([np.log(spans[m].many(rates) / measured[m]) for m in measured])
    worst = np.abs(logs).max(axis=0)
    spread = (logs * logs).sum(axis=0)
    return [(round(float(w), 3), float(s)) for w, s in zip(worst, spread, strict=True)]


def loss(dev: devices.Device, spans: dict[str, FastSpan], measured: dict[str, float]) -> Loss:
    return losses([dev], spans, measured)[0]


def descend(
    dev: devices.Device, spans: dict[str, FastSpan], measured: dict[str, float]
) -> tuple[Loss, devices.Device]:
    """Coordinate descent on the grid: per field in turn, the first value with the lowest
    loss, if lower than the current one; until no field improves."""
    best = loss(dev, spans, measured)
    while True:
        improved = False
        for field, values in GRID.items():
            trials = [dataclasses.replace(dev, **{field: v}) for v in values]
            value, i = min((v, i) for i, v in enumerate(losses(trials, spans, measured)))
            if value < best:
                best, dev, improved = value, trials[i], True
        if not improved:
            return best, dev


def fit(measured: dict[str, float], spans: dict[str, FastSpan] | None = None) -> devices.Device:
    """Coordinate descent from 40 seeded random starts on the grid; the best end point.
    Only the models in `measured` are fitted (`spans` may hold more)."""
    spans = spans if spans is not None else {m: FastSpan(m) for m in measured}
    rng = random.Random(0)
    base = dataclasses.replace(devices.DEVICES["v100"], name="fit")
    results = []
    for _ in range(40):
        start = dataclasses.replace(base, **{f: rng.choice(v) for f, v in GRID.items()})
        results.append(descend(start, spans, measured))
    return min(results, key=lambda r: r[0])[1]


def leave_one_model_out(
    measured: dict[str, float], spans: dict[str, FastSpan] | None = None
) -> dict[str, tuple[devices.Device, float]]:
    """Per model: the constants fitted to the other models, and the held-out model's
    span on them over its measured span."""
    spans = spans if spans is not None else {m: FastSpan(m) for m in measured}
    out = {}
    for m in measured:
        dev = fit({k: v for k, v in measured.items() if k != m}, spans)
        out[m] = (dev, spans[m](dev) / measured[m])
    return out


def main() -> None:
    default = Path(__file__).resolve().parents[2] / "shared/data/espresso-v100-profiles.json"
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    if not path.exists():  # the calibration data are not shipped with the project
        sys.exit(f"{path}: not found; give the ByteComp authors' V100 profiles "
                 "(espresso-v100-profiles.json) as the argument (the maintainers keep "
                 "them beside the project, in ../shared/data)")
    measured = measured_spans(path)
    spans = {m: FastSpan(m) for m in measured}
    dev = fit(measured, spans)
    print("fitted to all models (paste into gcbench/zoo/devices.py):")
    for field in GRID:
        print(f"V100_{field.upper()} = {getattr(dev, field)}")
    held = leave_one_model_out(measured, spans)
    print(
        "\nin sample: the constants above, fitted to every model including this one;"
        "\nheld out: constants refitted to the other models, this one predicted"
    )
    print(
        f"\n{'model':18s} {'measured ms':>12s} {'in-sample ms':>13s} {'ratio':>7s} "
        f"{'held-out ms':>12s} {'ratio':>7s}   held-out fit (wino conv matmul mem us)"
    )
    for m in measured:
        sim = simulated_span(m, dev)
        d, r = held[m]
        consts = " ".join(f"{getattr(d, f):g}" for f in GRID)
        print(
            f"{m:18s} {measured[m] * 1e3:12.1f} {sim * 1e3:13.1f} {sim / measured[m]:7.3f} "
            f"{r * measured[m] * 1e3:12.1f} {r:7.3f}   {consts}"
        )


if __name__ == "__main__":
    main()
