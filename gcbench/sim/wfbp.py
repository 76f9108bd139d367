"""First simulate backend: data-parallel SGD with wait-free backprop (WFBP) and tensor
fusion into PyTorch DDP buckets, one ring allreduce per bucket (ACP-SGD §II-A; DESIGN §7).

Streams of one worker (all workers are symmetric): `compute` runs forward, backward in
gradient order, GPU (de)compression and the update; one communication stream serves
tensors in gradient order (NCCL launches collectives in the same order on every rank).
Strategies:

- fp32: every bucket is allreduced as is.
- fp16: each gradient is cast to half on the GPU right after its backward (delaying later
  backward work), allreduced at 2 bytes per element, and cast back once backward is done.

On one GPU there is no communication, so both strategies reduce to the compute time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcbench.comm import Link, ring_allreduce_s, ring_allreduce_wire_bytes
from gcbench.config.models import Cell
from gcbench.sim.trace import Span, breakdown
from gcbench.zoo.devices import DEVICES
from gcbench.zoo.profile import ModelProfile, model_profile

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2}


@dataclass
class SimResult:
    metrics: dict[str, Any]
    spans: list[Span] = field(default_factory=list)


def ring_link(cell: Cell) -> Link:
    """The bottleneck link of a flat ring over every GPU of the cluster.

    On one machine the ring runs over NVLink/PCIe. Across machines each machine boundary
    is crossed by one ring edge, so the ring moves at min(intra, inter-per-machine) and
    each step waits for the slower latency.
    """
    n = cell.network
    intra = Link(n.intra_gbs * 1e9, n.intra_latency_us * 1e-6, n.intra_efficiency)  # type: ignore[operator]
    if cell.cluster.machines == 1:
        return intra
    inter = Link(
        n.inter_gbps * n.nics_per_machine * 1e9 / 8, n.inter_latency_us * 1e-6, n.inter_efficiency
    )
    return (
        inter
        if inter.effective_Bps <= intra.effective_Bps
        else Link(intra.bandwidth_Bps, max(intra.latency_s, inter.latency_s), intra.efficiency)
    )


FIRST_BUCKET_BYTES = 1 * 2**20  # PyTorch DDP: the first bucket is small, so that
BUCKET_BYTES = 25 * 2**20  # communication starts early; later buckets are 25 MiB


def ddp_buckets(sizes: list[int]) -> list[list[int]]:
    """Tensor indices (gradient order) fused into buckets as PyTorch DDP does: a bucket
    takes tensors until it holds at least its cap (1 MiB for the first, 25 MiB after)."""
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, size in enumerate(sizes):
        current.append(i)
        filled += size
        if filled >= (FIRST_BUCKET_BYTES if not buckets else BUCKET_BYTES):
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def cast_s(numel: int, cell: Cell) -> float:
    """fp32 <-> fp16 cast: memory-bound, 4 + 2 bytes per element, one kernel."""
    dev = DEVICES[cell.device]
    return numel * 6 / (dev.mem_bandwidth_gbs * 1e9) + dev.kernel_overhead_us * 1e-6


def cell_profile(cell: Cell) -> ModelProfile:
    """The cell's model profile: from its profile file if it names one, else the zoo's
    FLOP-based profile on the cell's device."""
    m = cell.model
    assert m.batch_size is not None
    if m.profile is not None:
        from gcbench.zoo.profile_io import file_profile

        return file_profile(
            m.profile, m.profile_sha256, m.name, m.batch_size, m.seq_len, cell.device
        )
    return model_profile(m.name, m.batch_size, cell.device, m.seq_len)


def simulate_cell(cell: Cell) -> SimResult:
    """Simulate one iteration of `cell`; returns its metrics and the spans of worker 0."""
    profile = cell_profile(cell)
    gpus = cell.cluster.gpus
    link = ring_link(cell)
    compress = cell.strategy == "fp16" and gpus > 1
    elem_bytes = BYTES_PER_ELEMENT[cell.strategy]
    stream = "intra" if cell.cluster.machines == 1 else "inter_tx"

    spans: list[Span] = [Span(0, "compute", "forward", "forward", 0.0, profile.forward_s)]
    gpu_free = profile.forward_s
    comm_free = 0.0
    comm_end: list[float] = []  # per tensor: when its bucket's allreduce ends
    wire = 0.0
    buckets = ddp_buckets([t.numel * 4 for t in profile.tensors])
    for b, bucket in enumerate(buckets):
        for i in bucket:
            t = profile.tensors[i]
            spans.append(Span(0, "compute", t.name, "backward", gpu_free, t.backward_s))
            gpu_free += t.backward_s
            if compress:
                dur = cast_s(t.numel, cell)
                spans.append(Span(0, "compute", t.name, "compress", gpu_free, dur))
                gpu_free += dur
        if gpus == 1:
            continue
        nbytes = sum(profile.tensors[i].numel for i in bucket) * elem_bytes
        start = max(gpu_free, comm_free)  # a bucket goes when its last gradient is ready
        dur = ring_allreduce_s(nbytes, gpus, link)
        spans.append(Span(0, stream, f"bucket {b}", "comm", start, dur, nbytes))
        comm_free = start + dur
        comm_end += [comm_free] * len(bucket)
        wire += ring_allreduce_wire_bytes(nbytes, gpus)
    ready = gpu_free
    if compress:
        for t, end in zip(profile.tensors, comm_end, strict=True):
            start = max(ready, end)
            dur = cast_s(t.numel, cell)
            spans.append(Span(0, "compute", t.name, "decompress", start, dur))
            ready = start + dur
    else:
        ready = max([ready, *comm_end])
    spans.append(Span(0, "compute", "update", "update", ready, profile.update_s))
    iteration_s = ready + profile.update_s

    metrics: dict[str, Any] = breakdown(spans, iteration_s)
    samples = profile.samples_per_iteration
    throughput = gpus * samples / iteration_s
    metrics.update(
        iteration_s=iteration_s,
        throughput=throughput,
        scaling_factor=throughput / (gpus * samples / profile.compute_s),
        wire_bytes=int(round(wire)),
        planner_s=0.0,
        sample_unit=profile.sample_unit,
        tensors=len(profile.tensors),
        buckets=len(buckets) if gpus > 1 else 0,
        model_mib=profile.numel * 4 / 2**20,
    )
    return SimResult(metrics, spans)
