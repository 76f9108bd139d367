"""The runner's simulate backend: a `Cell` -> its model profile, its `Costs` (machine,
links and compression costs, in seconds and bytes) and a plan of its fusion buckets with
the strategy's option -> one simulated iteration (`gcbench.sim.iteration`).

This adapter is the only part of `gcbench.sim` that reads a `Cell`; the timeline itself
sees plain numbers. On one GPU there is no communication, so every strategy reduces to
the compute time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gcbench.comm import Link, Machine, nvlink_machine, pcie_machine
from gcbench.config.models import STRATEGY_ALIASES, Cell
from gcbench.sim.iteration import Costs, Plan, fuse, simulate
from gcbench.sim.options import PRESETS, Option
from gcbench.sim.trace import Span
from gcbench.zoo.devices import DEVICES
from gcbench.zoo.profile import ModelProfile, model_profile

# gcbench's CPU cost table (`gpu_table("cpu")`) models this project's 2-core reference
# host running torch's intra-op threads on both cores; one core of a pool takes twice that.
CPU_TABLE_CORES = 2


@dataclass
class SimResult:
    metrics: dict[str, Any]
    spans: list[Span] = field(default_factory=list)


__all__ = [
    "SimResult",
    "cast_s",
    "cell_profile",
    "costs_for",
    "machine_for",
    "plan_for",
    "simulate_cell",
    "strategy_option",
]


def cast_s(numel: float, cell: Cell) -> float:
    """fp32 <-> fp16 cast on the GPU: memory-bound, 4 + 2 bytes per element, one kernel."""
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


def machine_for(cell: Cell) -> Machine:
    """One machine of the cell: NVLink (one ring at `intra_gbs` per GPU), or PCIe with two
    switches of G/2 GPUs when G is even (`gcbench.comm.pcie_machine`), else one switch."""
    n, g = cell.network, cell.cluster.gpus_per_machine
    assert n.intra_gbs is not None
    if n.intra == "pcie":
        switches = 2 if g >= 2 and g % 2 == 0 else 1
        return pcie_machine(g, switches, n.intra_gbs, n.intra_latency_us * 1e-6, n.intra_efficiency)
    return nvlink_machine(g, n.intra_gbs, n.intra_latency_us * 1e-6, n.intra_efficiency)


def strategy_option(strategy: str) -> Option:
    """The option a named strategy gives every bucket."""
    return PRESETS[STRATEGY_ALIASES.get(strategy, strategy)]


def costs_for(cell: Cell, option: Option | None = None) -> Costs:
    """The cell's machine, links and — when the option compresses — its compressor's GPU
    costs (the device's roofline table, `gcbench.compress.costs.gpu_table`), CPU costs and
    payload sizes. `inter_gbps` is the machine's total over all its NICs."""
    n = cell.network
    inter = Link(n.inter_gbps * 1e9 / 8, n.inter_latency_us * 1e-6, n.inter_efficiency)
    kw: dict[str, Any] = {"cast_s": lambda numel: cast_s(numel, cell)}
    option = option or strategy_option(cell.strategy)
    if option.compressed:
        kw.update(_compressor_costs(cell))
    pcie = Link(DEVICES[cell.device].pcie_gbs * 1e9, 10e-6, 0.8)
    return Costs(
        cell.cluster.machines,
        cell.cluster.gpus_per_machine,
        machine_for(cell),
        inter,
        nics=n.nics_per_machine,
        pcie=pcie,
        cpu_cores=cell.cluster.cpu_cores,
        **kw,
    )


def _compressor_costs(cell: Cell) -> dict[str, Any]:
    from gcbench.compress import create
    from gcbench.compress.costs import gpu_table

    table, cpu = gpu_table(cell.device), gpu_table("cpu")
    kind = cell.compressor.kind
    compressor = create(kind, **cell.compressor.params())
    comp, dec = table.compress[kind], table.decompress[kind]
    cpu_comp, cpu_dec = cpu.compress[kind], cpu.decompress[kind]

    @lru_cache(maxsize=4096)
    def whole_payload(numel: int) -> float:
        return float(compressor.wire_bytes(numel, 0))

    def payload_bytes(elements: float) -> float:
        """A shard of a bucket may be a fraction of an element on average: round up."""
        return whole_payload(max(1, math.ceil(elements)))

    out: dict[str, Any] = {
        "compress_s": lambda numel: comp.seconds(4 * numel),
        "decompress_s": lambda numel: dec.seconds(4 * numel),
        "cpu_compress_s": lambda numel: cpu_comp.seconds(4 * numel) * CPU_TABLE_CORES,
        "cpu_decompress_s": lambda numel: cpu_dec.seconds(4 * numel) * CPU_TABLE_CORES,
        "payload_bytes": payload_bytes,
        "additive": compressor.additive,
        "splittable": compressor.splittable,
        "compressor": kind,
    }
    if hasattr(compressor, "wire_bytes_for_shape"):  # low-rank: factors follow each shape
        out["tensor_payload_bytes"] = tuple(
            float(compressor.wire_bytes_for_shape(t.shape, 0)) for t in cell_profile(cell).tensors
        )
    return out


def plan_for(cell: Cell, profile: ModelProfile, option: Option | None = None) -> Plan:
    """The cell's fusion buckets, each with the strategy's option (or `option`)."""
    return Plan.uniform(fuse(profile, cell.fusion), option or strategy_option(cell.strategy))


def simulate_cell(cell: Cell, option: Option | None = None) -> SimResult:
    """Simulate one iteration of `cell` (every bucket with `option` when given, else the
    cell's strategy); returns its metrics and the spans of worker 0."""
    profile = cell_profile(cell)
    plan = plan_for(cell, profile, option)
    result = simulate(profile, costs_for(cell, plan.options[0] if plan.options else None), plan)
    metrics = dict(result.metrics)
    metrics["planner_s"] = 0.0
    return SimResult(metrics, result.spans())
