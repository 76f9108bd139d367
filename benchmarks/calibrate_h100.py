"""Fit the H100 entry of the device table to the two measured H100 profiles.

    python benchmarks/calibrate_h100.py [PATH/TO/measured/h100]

The folder (default `../shared/data/measured/h100`) holds gcbench profiles of resnet50
(batch 32) and bert-base (batch 32, sequence 64) measured on one H100 80GB HBM3 with
torch's default math (cuDNN convolutions in TF32, matmuls in FP32): per tensor, the time
from the previous gradient becoming ready to its own; the forward and the update from
CUDA events. Tensors that become ready together (a layer's weight and bias) are merged into
one ready point, and consecutive ready points into blocks of at least `MIN_BLOCK_S` of
measured backward (a block's time is robust to which of two adjacent kernels a hook saw
first).

Fitted: the six constants the two models' backward identifies on this GPU: tensor-core
(TF32) efficiencies of 3x3, 1x1 and other convolutions (cuDNN), the FP32-core matmul
efficiency (BERT's linears, cuBLAS), the memory efficiency (batch norm, layer norm,
activations) and the per-kernel overhead. Not identified, so not fitted: cuBLAS on
tensor cores (no model ran matmuls in TF32) and anything under AMP. The loss is
the sum of squared log ratios (predicted / measured) over the blocks of both models; a
coordinate descent over a log grid from 20 seeded random starts.

What it prints, each figure out of sample unless it says otherwise:

- **held-out blocks**: the blocks split in two by alternating them; the constants fitted
  to one half predict the other, and the other way round. Per operation class (the class
  with most of a block's predicted time: convolutions, matmuls, memory-bound), the
  predicted / measured sum and the median |error| of its held-out blocks.
- **forward and update**: never fitted; predicted from the constants fitted to every
  block, against the CUDA-event times.
- **in sample**: each model's whole backward on those constants, every block of which
  but the first was fitted (how well the roofline *can* describe it, not a prediction).

The constants to paste into `gcbench/zoo/devices.py` are those fitted to every block.
"""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gcbench.zoo import devices
from gcbench.zoo.profile import UPDATE_PASSES, cached_trace, forward_seconds, update_seconds
from gcbench.zoo.traces import Op

MEASURED = {  # file -> (zoo model, batch, sequence length)
    "resnet50-b32.json": ("resnet50", 32, None),
    "bert-base-b32-s64.json": ("bert-base", 32, 64),
}
MIN_BLOCK_S = 150e-6
KINDS = ("winograd", "conv1x1", "conv", "matmul", "embedding", "memory")
CLASSES = {"winograd": "convolutions", "conv1x1": "convolutions", "conv": "convolutions",
           "matmul": "matmuls", "embedding": "memory-bound", "memory": "memory-bound"}  # fmt: skip
LOG_GRID = np.exp(np.linspace(np.log(0.02), np.log(2.0), 93))
GRID = {
    "tensor_winograd_efficiency": LOG_GRID,
    "tensor_conv_efficiency": LOG_GRID,
    "tensor_conv1x1_efficiency": LOG_GRID,
    "matmul_efficiency": LOG_GRID,
    "memory_efficiency": LOG_GRID[LOG_GRID <= 1.0],
    "kernel_overhead_us": np.exp(np.linspace(np.log(0.1), np.log(30.0), 99)),
}


@dataclasses.dataclass
class Model:
    """One measured model's backward cut into blocks: per op with a backward, its work and
    its block; per block, the measured seconds."""

    name: str
    flops: np.ndarray
    nbytes: np.ndarray
    kernels: np.ndarray
    kind: np.ndarray  # index into KINDS
    block: np.ndarray
    measured: np.ndarray  # per block, seconds
    ops: Sequence[Op]
    forward_s: float
    update_s: float
    numels: list[int]

    @classmethod
    def load(cls, path: Path) -> Model:
        zoo, batch, seq = MEASURED[path.name]
        data = json.loads(path.read_text())
        trace = cached_trace(zoo, batch, seq)
        first_use = {p.name: p.first_use for p in trace.params}
        ready: dict[int, float] = {}  # first use -> measured ready time (from backward start)
        t = 0.0
        for item in data["tensors"]:
            t += item["backward_s"]
            u = first_use[item["name"]]
            ready[u] = max(ready.get(u, 0.0), t)
        uses = sorted(ready, reverse=True)  # ready order
        bounds = [len(trace.ops), *uses]  # ready point k covers ops [uses[k], bounds[k])
        blocks: list[tuple[int, int]] = []  # (first op, end op) per block
        measured: list[float] = []
        start, previous = bounds[0], 0.0
        for k, u in enumerate(uses):
            if ready[u] - previous >= MIN_BLOCK_S or k == len(uses) - 1:
                blocks.append((u, start))
                measured.append(ready[u] - previous)
                start, previous = u, ready[u]
        block_of = np.full(len(trace.ops), -1)
        for b, (lo, hi) in enumerate(blocks):
            block_of[lo:hi] = b
        keep = [i for i, op in enumerate(trace.ops) if op.bwd_kernels and block_of[i] >= 0]
        ops = [trace.ops[i] for i in keep]
        return cls(
            zoo,
            np.array([op.bwd_flops for op in ops], float),
            np.array([op.bwd_nbytes for op in ops], float),
            np.array([op.bwd_kernels for op in ops], float),
            np.array([KINDS.index(op.kind) for op in ops]),
            block_of[keep],
            np.array(measured),
            trace.ops,
            data["forward_s"],
            data["update_s"],
            [int(np.prod(p.shape)) for p in trace.params],
        )

    @property
    def spanned(self) -> np.ndarray:
        """The blocks from the first gradient on: the first block also holds what runs
        before it (the loss's backward, the autograd engine's start), which the roofline
        does not describe (`calibrate_v100.py` leaves it out the same way)."""
        return np.arange(len(self.measured)) > 0

    def many(self, devs: Sequence[devices.Device]) -> np.ndarray:
        """Per device, per block: the predicted backward seconds (`profile.op_seconds`)."""
        rates = np.array([[d.flops_per_s(k) for k in KINDS] for d in devs])
        mem = np.array([d.mem_bandwidth_gbs * 1e9 * d.memory_efficiency for d in devs])
        overhead = np.array([d.kernel_overhead_us * 1e-6 for d in devs])
        compute = np.where(self.flops > 0, self.flops / rates[:, self.kind], 0.0)
        per_op = np.maximum(compute, self.nbytes / mem[:, None]) + self.kernels * overhead[:, None]
        out = np.zeros((len(devs), len(self.measured)))
        for i in range(len(devs)):
            out[i] = np.bincount(self.block, per_op[i], minlength=len(self.measured))
        return out

    def classes(self, dev: devices.Device) -> list[str]:
        """Per block, the operation class with most of its predicted compute time."""
        rates = np.array([dev.flops_per_s(k) for k in KINDS])
        mem = dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency
        compute = np.where(self.flops > 0, self.flops / rates[self.kind], 0.0)
        memory_bound = compute < self.nbytes / mem
        seconds = np.maximum(compute, self.nbytes / mem)
        names = ["memory-bound" if m else CLASSES[KINDS[k]]
                 for k, m in zip(self.kind, memory_bound, strict=True)]  # fmt: skip
        per: list[dict[str, float]] = [{} for _ in self.measured]
        for b, name, s in zip(self.block, names, seconds, strict=True):
            per[b][name] = per[b].get(name, 0.0) + s
        return [max(p, key=p.__getitem__) if p else "memory-bound" for p in per]

    def forward(self, dev: devices.Device) -> float:
        return sum(forward_seconds(op, dev) for op in self.ops)

    def update(self, dev: devices.Device) -> float:
        return update_seconds(self.numels, dev)


Subset = dict[str, np.ndarray]  # model name -> boolean mask of its blocks to fit


def losses(devs: Sequence[devices.Device], models: Sequence[Model], subset: Subset) -> np.ndarray:
    total = np.zeros(len(devs))
    for m in models:
        mask = subset[m.name]
        logs = np.log(m.many(devs)[:, mask] / m.measured[mask])
        total += (logs * logs).sum(axis=1)
    return total


def fit(models: Sequence[Model], subset: Subset, seeds: int = 20) -> devices.Device:
    """Coordinate descent on the grid from `seeds` random starts; the best end point."""
    base = dataclasses.replace(devices.DEVICES["h100"], name="fit")
    rng = random.Random(0)
    best: tuple[float, devices.Device] | None = None
    for _ in range(seeds):
        dev = dataclasses.replace(
            base, **{f: float(rng.choice(list(v))) for f, v in GRID.items()}
        )
        value = float(losses([dev], models, subset)[0])
        improved = True
        while improved:
            improved = False
            for field, grid in GRID.items():
                trials = [dataclasses.replace(dev, **{field: float(v)}) for v in grid]
                got = losses(trials, models, subset)
                i = int(np.argmin(got))
                if got[i] < value - 1e-12:
                    value, dev, improved = float(got[i]), trials[i], True
        if best is None or value < best[0]:
            best = (value, dev)
    assert best is not None
    return best[1]


def held_out(models: Sequence[Model]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per model and operation class, (predicted, measured) of every block, each predicted
    by the constants fitted to the other half of the blocks (alternate blocks)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {m.name: {} for m in models}
    for half in (0, 1):
        train = {m.name: (np.arange(len(m.measured)) % 2 != half) & m.spanned for m in models}
        dev = fit(models, train)
        for m in models:
            pred = m.many([dev])[0]
            for b, name in enumerate(m.classes(dev)):
                if b % 2 == half and m.spanned[b]:
                    out[m.name].setdefault(name, []).append((pred[b], m.measured[b]))
    return out


def main() -> None:
    default = Path(__file__).resolve().parents[2] / "shared/data/measured/h100"
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    if not folder.exists():  # the calibration data are not shipped with the project
        sys.exit(f"{folder}: not found; give the folder of the measured H100 profiles "
                 "(resnet50-b32.json, bert-base-b32-s64.json) as the argument (the "
                 "maintainers keep them beside the project, in ../shared/data)")
    models = [Model.load(folder / f) for f in MEASURED]
    every = {m.name: m.spanned for m in models}
    dev = fit(models, every)
    print("fitted to every block from the first gradient on, both models "
          "(paste into gcbench/zoo/devices.py):")  # fmt: skip
    for field in GRID:
        print(f"H100_{field.upper()} = {getattr(dev, field):.3g}")
    print(f"\nheld-out blocks (alternate halves; blocks of >= {MIN_BLOCK_S * 1e6:.0f} us):")
    print(f"  {'model':10s} {'class':13s} {'blocks':>6s} {'pred/meas':>9s} {'median |err|':>12s}")
    for name, per in held_out(models).items():
        for cls, pairs in sorted(per.items()):
            p, m = sum(a for a, _ in pairs), sum(b for _, b in pairs)
            err = statistics.median(abs(a / b - 1) for a, b in pairs)
            print(f"  {name:10s} {cls:13s} {len(pairs):6d} {p / m:9.3f} {err:12.1%}")
    print("\nnever fitted (the constants fitted to every block):")
    for m in models:
        per = m.many([dev])[0]
        first, bwd = float(per[0]), float(per[m.spanned].sum())
        print(f"  {m.name:10s} before the first gradient {first * 1e3:5.2f} ms vs "
              f"{m.measured[0] * 1e3:5.2f} ({first / m.measured[0] - 1:+.1%})")
    for m in models:
        fwd, upd, bwd = m.forward(dev), m.update(dev), float(m.many([dev])[0].sum())
        print(f"  {m.name:10s} forward {fwd * 1e3:6.2f} ms vs {m.forward_s * 1e3:6.2f} "
              f"({fwd / m.forward_s - 1:+.1%}), update {upd * 1e3:5.2f} vs "
              f"{m.update_s * 1e3:5.2f} ({upd / m.update_s - 1:+.1%}); whole backward "
              f"(fitted, less the first block) {bwd * 1e3:6.2f} vs "
              f"{m.measured.sum() * 1e3:6.2f} ms "
              f"({bwd / m.measured.sum() - 1:+.1%})")  # fmt: skip
    print(f"  (update: torch's foreach SGD, {UPDATE_PASSES} passes over the parameters)")


if __name__ == "__main__":
    main()
