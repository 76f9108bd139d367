"""Trace spans and the metrics every backend derives from them (DESIGN §5 Metrics)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

GPU_WORK = frozenset({"forward", "backward", "update"})
COMPRESSION = frozenset({"compress", "decompress"})


@dataclass(frozen=True)
class Span:
    worker: int
    stream: str  # compute | cpu:<slot> | pcie | intra | inter_tx | inter_rx | ring:<i>
    name: str
    kind: str  # forward | backward | compress | decompress | comm | update | copy (PCIe)
    start_s: float
    dur_s: float
    bytes: float = 0  # mean bytes one GPU sends in this span (comm)

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s

    def to_dict(self) -> dict:
        return asdict(self)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the union `a` not covered by the union `b` (both sorted and disjoint):
    one merge pass, O(len(a) + len(b))."""
    covered = 0.0
    j = 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            covered += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
    return _length(a) - covered


def breakdown(spans: list[Span], iteration_s: float, worker: int = 0) -> dict[str, float]:
    """The sweep rule: an instant is compute if the GPU runs forward/backward/update, else
    compression if the GPU (de)compresses or CPU compression or a PCIe copy is under way
    (the GPU then waits on it), else communication. The three add up to `iteration_s`."""
    mine = [s for s in spans if s.worker == worker]
    compute = _union((s.start_s, s.end_s) for s in mine if s.kind in GPU_WORK)
    compress = _union(
        (s.start_s, s.end_s) for s in mine if s.kind in COMPRESSION or s.stream == "pcie"
    )
    compute_s = _length(compute)
    compress_exposed = _minus(compress, compute)
    comm = [s for s in mine if s.kind == "comm"]
    busiest: dict[str, list[Span]] = {}
    for s in comm:
        busiest.setdefault(s.stream, []).append(s)
    bubbles = 0.0
    if busiest:
        stream = max(busiest.values(), key=lambda ss: sum(x.dur_s for x in ss))
        first = min(x.start_s for x in stream)
        last = max(x.end_s for x in stream)
        bubbles = (last - first) - _length(_union((x.start_s, x.end_s) for x in stream))
    return {
        "compute_s": compute_s,
        "compress_exposed_s": compress_exposed,
        "comm_exposed_s": max(0.0, iteration_s - compute_s - compress_exposed),
        "comm_total_s": sum(s.dur_s for s in comm),
        "compress_total_s": sum(s.dur_s for s in mine if s.kind in COMPRESSION),
        "bubbles_s": bubbles,
    }


def gpu_idle_while_backward_ready(spans: list[Span], worker: int = 0) -> float:
    """Seconds the GPU's compute stream sits idle while a backward job is ready (the
    previous backward job, or the forward pass, has finished and the next backward job
    has not started). DESIGN §7 asks for zero."""
    compute = sorted(
        (s for s in spans if s.worker == worker and s.stream == "compute"),
        key=lambda s: (s.start_s, s.end_s),
    )
    backward_left = sum(1 for s in compute if s.kind == "backward")
    idle, last_end, pending = 0.0, 0.0, False
    for s in compute:
        if pending and s.start_s > last_end:
            idle += s.start_s - last_end
        if s.kind == "backward":
            backward_left -= 1
        if s.kind in ("forward", "backward"):
            pending = backward_left > 0
        last_end = max(last_end, s.end_s)
    return idle
