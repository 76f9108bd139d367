"""Compression cost models: seconds to compress and decompress n elements on a device.

Two sources, each stating itself in `CostTable.source`:

- **Measured on this host** (`measure`, `gcbench bench compressors [--torch-device
  cuda]`): compress and decompress timed over sizes 2^10..2^26 (warm-up, median of
  interleaved repeats; on CUDA synchronised around each call), then `fit` turns the points
  into fixed + per-byte segments, with a second segment where the curve bends (caches,
  thread pools). On a GPU the table's `device_key` names the device-table entry the GPU
  is (`h100`, `a100`, ...; None for a GPU the table lacks), so that the simulator can use
  it for that device in place of the roofline; `table_from_json` reads a written table
  (`config.models.read_costs` loads one for a cell).
- **CPU, measured** (`cpu_table`): `gcbench/data/cpu-costs.json`, gcbench's compressors
  timed on this project's 2-core host by `benchmarks/measure_cpu_costs.py` (the median of
  5 runs per point), the costs of CPU compression and of CPU servers'. It replaced the
  device table's `cpu` entry under the GPU roofline, which carried the ByteComp authors'
  V100 kernel factors onto the CPU: 8-30x slower than gcbench's own CPU compressors
  measured here (EFSignSGD, onebit; BENCHMARKS.md).
- **GPU roofline** (`gpu_table`): bytes through device memory / (bandwidth x the device
  table's memory efficiency) + a launch latency per kernel, per compressor from the
  traffic and kernel counts in `ROOFLINE`. For the compressors the ByteComp authors
  profiled on V100 (fp16, randomk, dgc, efsignsgd, onebit: `espresso-v100-profiles.json`,
  encode + decode of 2^20 elements) the model is scaled to their measurement — their
  kernels do several times more passes than the minimum — and that factor is kept for
  other GPUs; the others are pure roofline.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache

SIZES = tuple(2**e for e in range(10, 27, 2))  # 2^10 .. 2^26 elements


@dataclass(frozen=True)
class Segment:
    upto_bytes: float  # this segment covers sizes up to here (inf for the last)
    fixed_s: float
    per_byte_s: float


@dataclass(frozen=True)
class CostModel:
    segments: tuple[Segment, ...]

    def seconds(self, nbytes: float) -> float:
        for s in self.segments:
            if nbytes <= s.upto_bytes:
                return s.fixed_s + s.per_byte_s * nbytes
        last = self.segments[-1]
        return last.fixed_s + last.per_byte_s * nbytes


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of seconds = a + b * bytes, weighted by 1/seconds (relative error),
    clamped to a, b >= 0."""
    w = [1 / max(t, 1e-9) ** 2 for _, t in points]
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, points, strict=True))
    sy = sum(wi * y for wi, (_, y) in zip(w, points, strict=True))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points, strict=True))
    sxy = sum(wi * x * y for wi, (x, y) in zip(w, points, strict=True))
    det = sw * sxx - sx * sx
    b = (sw * sxy - sx * sy) / det if det else 0.0
    a = (sy - b * sx) / sw
    if b < 0:
        a, b = sy / sw, 0.0
    if a < 0:
        a, b = 0.0, max(sxy / sxx if sxx else 0.0, 0.0)
    return a, b


def _rel_error(points: list[tuple[float, float]], model: CostModel) -> float:
    return max(abs(model.seconds(x) / y - 1) for x, y in points if y > 0)


def fit(points: list[tuple[float, float]]) -> CostModel:
    """One fixed + per-byte segment, or two where that halves the worst relative error."""
    points = sorted(points)
    a, b = _line(points)
    best = CostModel((Segment(math.inf, a, b),))
    if len(points) < 4:
        return best
    best_err = _rel_error(points, best)
    for i in range(2, len(points) - 1):
        left, right = points[:i], points[i:]
        la, lb = _line(left)
        ra, rb = _line(right)
        model = CostModel((Segment(left[-1][0], la, lb), Segment(math.inf, ra, rb)))
        err = _rel_error(points, model)
        if err < best_err / 2:
            best, best_err = model, err
    return best


@dataclass
class CostTable:
    """Per compressor, `compress` and `decompress` cost models over *input* fp32 bytes."""

    device: str
    source: str
    compress: dict[str, CostModel] = field(default_factory=dict)
    decompress: dict[str, CostModel] = field(default_factory=dict)
    points: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    device_key: str | None = None  # the device-table entry measured (`cpu`, `h100`, ...)

    def to_json(self) -> dict:
        return {
            "format": "gcbench-compressor-costs",
            "version": 1,
            "device": self.device,
            "device_key": self.device_key,
            "source": self.source,
            "compressors": {
                name: {
                    "compress": [asdict(s) for s in self.compress[name].segments],
                    "decompress": [asdict(s) for s in self.decompress[name].segments],
                    "points": self.points.get(name, {}),
                }
                for name in self.compress
            },
        }


def _segments(rows: list[dict]) -> CostModel:
    return CostModel(
        tuple(
            Segment(float(r["upto_bytes"]), float(r["fixed_s"]), float(r["per_byte_s"]))
            for r in rows
        )
    )


def table_from_json(data: dict) -> CostTable:
    """The inverse of `CostTable.to_json` (a missing `device_key` reads as None)."""
    if data.get("format") != "gcbench-compressor-costs" or data.get("version") != 1:
        raise ValueError("not a gcbench compressor cost table (format/version)")
    table = CostTable(str(data["device"]), str(data["source"]), device_key=data.get("device_key"))
    for name, entry in data["compressors"].items():
        table.compress[name] = _segments(entry["compress"])
        table.decompress[name] = _segments(entry["decompress"])
        table.points[name] = {
            k: [(float(b), float(s)) for b, s in v] for k, v in entry.get("points", {}).items()
        }
    return table


# Substrings of torch.cuda.get_device_name() -> device-table entries.
_GPU_NAMES = (
    ("H100", "h100"),
    ("A100", "a100"),
    ("V100", "v100"),
    ("2080 Ti", "rtx2080ti"),
    ("T4", "t4"),
)


def device_key(torch_device: str) -> str | None:
    """The device-table entry of a torch device: `cpu`, the GPU's entry, or None."""
    import torch

    device = torch.device(torch_device)
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((key for part, key in _GPU_NAMES if part in name), None)
    return None


def describe_device(torch_device: str) -> str:
    import platform

    import torch

    device = torch.device(torch_device)
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({torch_device}, torch {torch.__version__})"
    return f"{torch_device} ({platform.machine()}, torch {torch.__version__})"


def median_pair(
    a: Callable[[], object],
    b: Callable[[], object],
    repeats: int,
    sync: Callable[[], None] = lambda: None,
) -> tuple[float, float]:
    """Medians of `repeats` interleaved runs of a and b, after one warm-up of each;
    `sync` waits for a device (CUDA) before each clock read."""
    a(), b()
    sync()
    ta, tb = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        a()
        sync()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        b()
        sync()
        tb.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def measure(
    names: list[str],
    sizes: tuple[int, ...] = SIZES,
    torch_device: str = "cpu",
    on_point: Callable[[str, int], None] | None = None,
) -> CostTable:
    """Time every compressor's compress and decompress (interleaved) at each size, on
    `torch_device` (cpu, or cuda[:N], synchronised around each call)."""
    import torch

    from gcbench.compress.registry import create

    device = torch.device(torch_device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    params = {"threshold": {"threshold": 2.0}}
    if device.type == "cuda" and not torch.cuda.is_available():
        from gcbench.errors import ConfigError

        raise ConfigError([f"--torch-device {torch_device}: no CUDA device is visible"])
    table = CostTable(
        describe_device(torch_device),
        f"measured by gcbench bench compressors on {time.strftime('%Y-%m-%d')}",
        device_key=device_key(torch_device),
    )
    for name in names:
        c = create(name, **params.get(name, {}))
        comp_pts: list[tuple[float, float]] = []
        dec_pts: list[tuple[float, float]] = []
        for n in sizes:
            side = 2 ** (int(math.log2(n)) // 2)
            shape = (side, n // side) if name in ("powersgd", "acpsgd") else (n,)
            x = torch.randn(shape, device=device)
            repeats = 7 if n <= 2**20 else 3
            state = {"step": 0, "payload": None}

            def comp(c=c, x=x, state=state) -> object:
                state["step"] += 1
                p = c.compress(x, "cost#0", state["step"])
                for _ in range(1, c.rounds):
                    p = c.compress(x, "cost#0", state["step"], prev=p)
                state["payload"] = p
                return p

            def dec(c=c, state=state) -> object:
                return c.aggregate([state["payload"]], "cost#0", state["step"])

            tc, td = median_pair(comp, dec, repeats, sync)
            comp_pts.append((4.0 * n, tc))
            dec_pts.append((4.0 * n, td))
            if on_point:
                on_point(name, n)
        table.compress[name] = fit(comp_pts)
        table.decompress[name] = fit(dec_pts)
        table.points[name] = {"compress": comp_pts, "decompress": dec_pts}
    return table


# Minimum device-memory traffic (bytes per input element) and kernel launches of each
# compressor's compress and decompress on a GPU; decompress includes writing the fp32 output.
ROOFLINE: dict[str, tuple[float, int, float, int]] = {
    #            compress B/elem, kernels, decompress B/elem, kernels
    "none": (0.0, 0, 0.0, 0),
    "fp16": (6.0, 1, 6.0, 1),
    "bf16": (6.0, 1, 6.0, 1),
    "int8": (9.0, 3, 5.0, 1),
    "topk": (12.0, 3, 4.16, 2),
    "randomk": (0.08, 2, 4.04, 2),
    "dgc": (8.16, 4, 4.16, 2),
    "threshold": (8.16, 3, 4.16, 2),
    "signsgd": (4.125, 1, 4.125, 1),
    "efsignsgd": (8.125, 2, 4.125, 1),
    "signum": (16.125, 2, 4.125, 1),
    "onebit": (12.125, 3, 4.125, 1),
    "terngrad": (8.25, 2, 4.25, 1),
    "qsgd": (8.6, 3, 4.6, 1),
    "threelc": (12.4, 4, 4.6, 3),
    "powersgd": (16.0, 6, 8.0, 1),
    "acpsgd": (12.0, 4, 8.0, 1),
    "covap": (0.0, 0, 0.0, 0),
}

# ByteComp/Espresso's V100 times (us) of one-level compression for up to 2^20 elements
# (`gpu_compression_overhead_us`, option 2: encode + decode, and decode alone), and fp16's
# (option 1).
ESPRESSO_V100_US = {  # name: (encode + decode, decode alone)
    "randomk": (88.0, 34.0),
    "dgc": (390.0, 34.0),
    "efsignsgd": (270.0, 140.0),
    "onebit": (620.0, 170.0),
    "fp16": (26.0, 22.0),
}


def _roofline_s(name: str, numel: int, dev: object, which: int) -> float:
    traffic, kernels = ROOFLINE[name][2 * which], ROOFLINE[name][2 * which + 1]
    bw = dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency  # type: ignore[attr-defined]
    return traffic * numel / bw + kernels * dev.kernel_overhead_us * 1e-6  # type: ignore[attr-defined]


@lru_cache(maxsize=1)
def cpu_table() -> CostTable:
    """gcbench's compressors measured on this project's 2-core host (torch's threads on
    both cores): the table CPU compression is simulated with (see the module docstring)."""
    import json
    from importlib import resources

    raw = resources.files("gcbench.data").joinpath("cpu-costs.json").read_text()
    return table_from_json(json.loads(raw))


def gpu_table(device: str) -> CostTable:
    """The roofline table of a device-table GPU, scaled to Espresso's V100 measurements."""
    from gcbench.zoo.devices import DEVICES

    dev, v100 = DEVICES[device], DEVICES["v100"]
    table = CostTable(
        device,
        "roofline (device memory traffic / bandwidth + launches); fp16, randomk, dgc, "
        "efsignsgd and onebit scaled to the ByteComp authors' V100 profile",
    )
    n = 2**20
    for name in ROOFLINE:
        # compress and decompress each scaled to the authors' figure where they have one
        factors = [1.0, 1.0]
        if name in ESPRESSO_V100_US:
            total_us, decode_us = ESPRESSO_V100_US[name]
            for which, us in ((0, total_us - decode_us), (1, decode_us)):
                model = _roofline_s(name, n, v100, which)
                factors[which] = us * 1e-6 / model if model else 1.0
        models = []
        for which in (0, 1):
            traffic, kernels = ROOFLINE[name][2 * which], ROOFLINE[name][2 * which + 1]
            bw = dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency
            factor = factors[which]
            models.append(
                CostModel(
                    (
                        Segment(
                            math.inf,
                            # a compressor's fixed cost is its kernels' launches from the
                            # host, as the authors measured them on V100, on any GPU (the
                            # device table's per-kernel cost of a newer GPU, fitted on a
                            # model's backward, is that model's, not a hook's)
                            factor * kernels * v100.kernel_overhead_us * 1e-6,
                            factor * traffic / 4 / bw,
                        ),
                    )
                )
            )
        table.compress[name], table.decompress[name] = models
    return table


# `torch.linalg.qr` of one tall, thin fp32 matrix on a GPU, the orthogonalisation PowerSGD
# and ACP-SGD run once per matrix (ACP-SGD §IV-C: "torch.linalg.qr ... for efficient
# orthogonalization", and so do its Power-SGD baselines). On CUDA it is cuSOLVER's geqrf
# then orgqr (the default path since pytorch/pytorch#56256), a sequence of small kernels
# per column, so it is bound by launches, not by the matrix's bytes, and the per-byte
# roofline above cannot see it. The H100 cuSOLVER timings published in
# pytorch/pytorch#173788 are 53.2 us (16 x 4), 77.5 (4 x 16), 60.0 (16 x 16) and 189.0
# (128 x 32): tiny square matrices take a faster path, and the factors gcbench
# orthogonalises are tall (hundreds to tens of thousands of rows, r columns), like the
# 128 x 32 point. The cost is a line in the columns through the two tall points, held at
# the 4-column figure below 4 columns; for rank 4 the 16-row point likely understates a
# tall factor, so this leans low. Not fitted to any training figure, and used for every
# GPU (launch costs differ far less between GPUs than bandwidths do; an older stack is
# likely slower).
QR_US_AT = ((4, 53.2), (32, 189.0))  # (columns, microseconds)


def qr_s(columns: int) -> float:
    """Seconds of one GPU `torch.linalg.qr` of a tall matrix with `columns` columns."""
    (c0, t0), (c1, t1) = QR_US_AT
    return (t0 + (t1 - t0) * (max(columns, c0) - c0) / (c1 - c0)) * 1e-6
