"""The runner's simulate backend: a `Cell` -> its profile, link and compression costs, and a
plan of DDP buckets with the cell's strategy -> one simulated iteration
(`gcbench.sim.iteration`): its metrics and worker 0's spans.

On one GPU there is no communication, so every strategy reduces to the compute time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcbench.comm import Link
from gcbench.config.models import Cell
from gcbench.sim.iteration import STRATEGIES, Costs, Plan, fuse, simulate
from gcbench.sim.trace import Span
from gcbench.zoo.devices import DEVICES
from gcbench.zoo.profile import ModelProfile, model_profile


@dataclass
class SimResult:
    metrics: dict[str, Any]
    spans: list[Span] = field(default_factory=list)


__all__ = ["SimResult", "cast_s", "cell_profile", "costs_for", "simulate_cell"]


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


def costs_for(cell: Cell) -> Costs:
    """The cell's links and, for compressing strategies, its compressor's GPU costs (the
    device's roofline table, `gcbench.compress.costs.gpu_table`) and payload size."""
    n = cell.network
    intra = Link(n.intra_gbs * 1e9, n.intra_latency_us * 1e-6, n.intra_efficiency)  # type: ignore[operator]
    inter = Link(
        n.inter_gbps * n.nics_per_machine * 1e9 / 8, n.inter_latency_us * 1e-6, n.inter_efficiency
    )
    kw: dict[str, Any] = {"cast_s": lambda numel: cast_s(numel, cell)}
    if cell.strategy in ("allgather", "allgather-2level"):
        from gcbench.compress import create
        from gcbench.compress.costs import gpu_table

        table, cpu = gpu_table(cell.device), gpu_table("cpu")
        kind = cell.compressor.kind
        compressor = create(kind, **cell.compressor.params())
        comp, dec = table.compress[kind], table.decompress[kind]
        cpu_comp, cpu_dec = cpu.compress[kind], cpu.decompress[kind]
        cores = cell.cluster.cpu_cores
        kw.update(
            compress_s=lambda numel: comp.seconds(4 * numel),
            decompress_s=lambda numel: dec.seconds(4 * numel),
            payload_bytes=_payload_bytes(cell, compressor),
            # one core of the pool: the `cpu` entry models this host's 2 cores
            cpu_compress_s=lambda numel: cpu_comp.seconds(4 * numel) * 2,
            cpu_decompress_s=lambda numel: cpu_dec.seconds(4 * numel) * 2,
            cpu_cores=cores,
        )
    from gcbench.zoo.devices import DEVICES

    pcie_gbs = DEVICES[cell.device].pcie_gbs
    kw["pcie"] = Link(pcie_gbs * 1e9, 10e-6, 0.8)
    return Costs(
        cell.cluster.machines,
        cell.cluster.gpus_per_machine,
        intra,
        inter,
        nics=n.nics_per_machine,
        **kw,
    )


def _payload_bytes(cell: Cell, compressor: Any) -> Any:
    """numel -> bytes of one payload. Low-rank compressors size their factors from each
    matrix's shape, which a fused bucket does not have: they get the model's overall ratio
    (sum of per-tensor factor bytes / dense bytes) applied to the bucket."""
    if not hasattr(compressor, "wire_bytes_for_shape"):
        return lambda numel: compressor.wire_bytes(numel, 0)
    tensors = cell_profile(cell).tensors
    sent = sum(compressor.wire_bytes_for_shape(t.shape, 0) for t in tensors)
    ratio = sent / max(1, sum(4 * t.numel for t in tensors))
    return lambda numel: int(round(4 * numel * ratio))


def simulate_cell(cell: Cell) -> SimResult:
    """Simulate one iteration of `cell`; returns its metrics and the spans of worker 0."""
    profile = cell_profile(cell)
    buckets = fuse(profile, "ddp")
    option = STRATEGIES[cell.strategy]
    result = simulate(profile, costs_for(cell), Plan(buckets, [option] * len(buckets)))
    metrics = dict(result.metrics)
    metrics["planner_s"] = 0.0
    return SimResult(metrics, result.spans())
