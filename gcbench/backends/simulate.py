"""The simulate backend: a `Cell` -> its model profile, its `Costs` (machine, links and
compression costs, in seconds and bytes) and its strategy's plans (`gcbench.strategies`)
-> one simulated iteration (`gcbench.sim.iteration`).

The adapter between a `Cell` and the simulator, which sees plain numbers and never a
cell; emulation reads a cell's profile and costs here too. On one GPU there is no
communication, so every strategy reduces to the compute time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from gcbench import strategies
from gcbench.comm import Link, Machine, nvlink_machine, pcie_machine
from gcbench.config.models import Cell
from gcbench.errors import ConfigError
from gcbench.sim.iteration import Costs, Plan, Result, fuse, simulate
from gcbench.sim.options import COLLECTIVE_TABLE, PRESETS, Option
from gcbench.sim.trace import Span
from gcbench.zoo.devices import DEVICES
from gcbench.zoo.profile import ModelProfile, model_profile

# gcbench's CPU cost table (`costs.cpu_table`) was measured on this project's 2-core host
# running torch's intra-op threads on both cores; one core of a pool takes twice that.
CPU_TABLE_CORES = 2
# GB/s of memory bandwidth each of that host's cores streams (the device table's `cpu`
# entry: a 64 MiB copy on both cores, benchmarks/measure_cpu.py)
HOST_CORE_GBS = DEVICES["cpu"].mem_bandwidth_gbs / CPU_TABLE_CORES


def cpu_core_factor(cluster: Any) -> float:
    """How many times the table's time one core of `cluster`'s machines takes: twice (a
    core of the 2-core host), times how much less memory bandwidth each core gets where
    the cluster declares its CPUs' (`cpu_gbs` shared by `cpu_cores`). Compression is
    streaming, memory-bound work; a core is never taken to be faster than the host's."""
    factor = float(CPU_TABLE_CORES)
    if cluster.cpu_gbs is not None:
        factor *= max(1.0, HOST_CORE_GBS / (cluster.cpu_gbs / cluster.cpu_cores))
    return factor


@dataclass
class SimResult:
    metrics: dict[str, Any]
    spans: list[Span] = field(default_factory=list)
    plan: dict[str, Any] | None = None  # a planner strategy's plan (`plan_record`)


__all__ = [
    "SimResult",
    "cast_s",
    "cell_profile",
    "ddp_copies",
    "ddp_copy_s",
    "plan_record",
    "costs_for",
    "machine_for",
    "period_mean",
    "period_of",
    "plan_for",
    "simulate_cell",
    "strategy_option",
]


def _memory_pass_s(numel: float, bytes_per_element: float, device: str) -> float:
    """One memory-bound kernel over `numel` elements on `device`, moving
    `bytes_per_element` each at the device's memory bandwidth, plus its launch."""
    dev = DEVICES[device]
    return numel * bytes_per_element / (dev.mem_bandwidth_gbs * 1e9) + dev.kernel_overhead_us * 1e-6


def cast_s(numel: float, cell: Cell) -> float:
    """fp32 <-> fp16 cast on the GPU: memory-bound, 4 + 2 bytes per element, one kernel."""
    return _memory_pass_s(numel, 6, cell.device)


def ddp_copies(cell: Cell) -> bool:
    """Whether the cell's workers copy gradients between .grad and fused buckets: torch DDP
    does, into the bucket as each gradient is ready and back after the bucket's
    communication, unless `gradient_as_bucket_view=True` ("it avoids the overhead of
    copying between gradients and allreduce communication buckets",
    torch.nn.parallel.DistributedDataParallel's docs). Not on one GPU (no DDP), nor with
    `fusion: tensor` (each gradient sent in place)."""
    return cell.cluster.gpus > 1 and cell.fusion != "tensor"


def ddp_copy_s(numel: float, cell: Cell) -> float:
    """One such copy of `numel` fp32 gradients, one way: memory-bound, 4 + 4 bytes per
    element, one kernel (torch/csrc/distributed/c10d/reducer.cpp: `copy_grad_to_bucket`
    per gradient, `copy_bucket_to_grad` per gradient; a bucket's copy back is costed with
    one launch, not one per gradient)."""
    return _memory_pass_s(numel, 8, cell.device)


def cell_profile(cell: Cell) -> ModelProfile:
    """The cell's model profile: from its profile file if it names one, else the zoo's
    FLOP-based profile on the cell's device; on several GPUs, what each worker computes
    (the slowest's jitter, DDP's copies into its buckets) with one GPU's time kept as the
    scaling factor's baseline. The same object for the same inputs (fits time one model
    under many networks)."""
    m, n = cell.model, cell.network
    assert m.batch_size is not None
    return _cell_profile(
        m.name, m.batch_size, m.seq_len, m.precision, m.profile, m.profile_sha256,
        cell.device, n.compute_scale, n.compute_jitter, cell.cluster.gpus, ddp_copies(cell),
    )  # fmt: skip


@lru_cache(maxsize=256)
def _cell_profile(
    name: str, batch: int, seq_len: int | None, precision: str, path: str | None,
    sha256: str | None, device: str, compute_scale: float, jitter: float, gpus: int,
    copies: bool,
) -> ModelProfile:  # fmt: skip
    if path is not None:
        from gcbench.zoo.profile_io import file_profile

        profile = file_profile(path, sha256, name, batch, seq_len, device)
    else:
        profile = model_profile(name, batch, device, seq_len, precision)
    if compute_scale != 1.0:
        profile = scaled_profile(profile, compute_scale)
    if gpus <= 1:
        return profile
    one = profile.compute_s  # the scaling factor's baseline: what a lone GPU computes
    if jitter:  # the slowest of the workers
        scale = 1 + jitter * expected_max_normal(gpus)
        profile = scaled_profile(profile, scale, "the slowest of the workers' compute")
    if copies:  # each gradient into its bucket as it becomes ready
        profile = replace(profile, tensors=tuple(
            replace(t, backward_s=t.backward_s + _memory_pass_s(t.numel, 8, device))
            for t in profile.tensors
        ), notes=(*profile.notes, "backward: + DDP's copy of each gradient into its bucket"))
    return replace(profile, single_gpu_s=one)


@lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (e_2 = 1/sqrt(pi) = 0.5642, e_8 = 1.4236):
    n times the integral of x phi(x) Phi(x)^(n-1), by the trapezoid rule over [-8, 8]."""
    if n <= 1:
        return 0.0
    h, total = 1e-3, 0.0
    for i in range(-8000, 8001):
        x = i * h
        phi = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * phi * cdf ** (n - 1)
    return n * total * h


def scaled_profile(
    profile: ModelProfile, scale: float, why: str = "network profile compute_scale"
) -> ModelProfile:
    """`profile` with its forward, backward and update times multiplied by `scale` (a
    calibrated network profile's `compute_scale`, for GPUs the device table misjudges)."""
    return replace(
        profile,
        forward_s=profile.forward_s * scale,
        update_s=profile.update_s * scale,
        tensors=tuple(replace(t, backward_s=t.backward_s * scale) for t in profile.tensors),
        notes=(*profile.notes, f"compute times x {scale:g} ({why})"),
    )


# Rounds of `contended`'s fixed point at most; it stops earlier once the iteration moves
# by less than a millionth.
CONTENTION_ROUNDS = 8


def contended(
    profile: ModelProfile,
    costs: Costs,
    plan: Plan,
    contention: float,
    keep_jobs: bool = True,
) -> Result:
    """One iteration with backward slowed where GPU communication runs beside it (the
    network profile's `compute_contention`, issue #31's GPU contention). NCCL's kernels
    take SMs and memory bandwidth from the compute kernels beside them, so a backward
    tensor's work goes at 1 / (1 + c) of its speed while a collective runs on the GPU (a
    phase on the `intra` or `inter_tx` stream; not the CPU servers' push and pull, which
    copy engines and the host do). Its time is then its uncontended work w over
    1 - phi + phi / (1 + c), phi the fraction of it overlapped: a fixed point, since the
    overlap moves as backward stretches; iterated from the uncontended timeline until the
    iteration moves by less than a millionth (`CONTENTION_ROUNDS` at most). Compression
    kernels on the compute stream are not slowed (not modelled)."""
    result = simulate(profile, costs, plan, keep_jobs=keep_jobs or contention > 0)
    if contention <= 0:
        return result
    from dataclasses import replace

    index = {t.name: i for i, t in enumerate(profile.tensors)}
    # the servers' phases by their token in a job's label (`bucket 3 inter:ps*`)
    servers = tuple(f":{c.short}" for c in COLLECTIVE_TABLE.values() if c.servers)
    for _ in range(CONTENTION_ROUNDS):
        busy = sorted((j.start_s, j.end_s) for j in result.jobs if j.kind == "comm"
                      and j.stream in ("intra", "inter_tx")
                      and not any(s in j.name for s in servers))  # fmt: skip
        stretch = [1.0] * len(profile.tensors)
        for j in result.jobs:
            if j.kind == "backward" and j.dur_s > 0 and j.name in index:
                phi = _overlap(busy, j.start_s, j.end_s) / j.dur_s
                stretch[index[j.name]] = 1 / (1 - phi + phi / (1 + contention))
        slowed = replace(profile, tensors=tuple(
            replace(t, backward_s=t.backward_s * s) for t, s in zip(profile.tensors, stretch,
                                                                    strict=True)))  # fmt: skip
        again = simulate(slowed, costs, plan, keep_jobs=True)
        moved = abs(again.iteration_s - result.iteration_s)
        result = again
        if moved <= 1e-6 * result.iteration_s:
            break
    if not keep_jobs:
        result.jobs = []
    return result


def _overlap(busy: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] that the intervals `busy` (sorted by start) cover, each
    second once."""
    covered, reach = 0.0, start
    for s, e in busy:
        if s >= end:
            break
        s, e = max(s, reach), min(e, end)
        if e > s:
            covered += e - s
            reach = e
    return covered


def machine_for(cell: Cell) -> Machine:
    """One machine of the cell: NVLink (one ring at `intra_gbs` per GPU), or PCIe with two
    switches of G/2 GPUs when G is even (`gcbench.comm.pcie_machine`), else one switch."""
    n, g = cell.network, cell.cluster.gpus_per_machine
    rate = n.intra_rate(cell.device)
    if n.intra == "pcie":
        switches = 2 if g >= 2 and g % 2 == 0 else 1
        return pcie_machine(g, switches, rate, n.intra_latency_us * 1e-6, n.intra_efficiency)
    return nvlink_machine(g, rate, n.intra_latency_us * 1e-6, n.intra_efficiency)


def strategy_option(strategy: str) -> Option:
    """The option a named strategy gives every bucket."""
    return PRESETS[strategies.canonical(strategy)]


def costs_for(cell: Cell, option: Option | None = None) -> Costs:
    """The cell's machine, links, CPU servers and — when the strategy (or `option`)
    compresses — its compressor's GPU costs (the device's roofline table,
    `gcbench.compress.costs.gpu_table`), CPU costs and payload sizes. `inter_gbps` is the
    machine's total over all its NICs; a server's NICs default to the same."""
    n, cl = cell.network, cell.cluster
    inter = Link(n.inter_gbps * 1e9 / 8, n.inter_latency_us * 1e-6, n.inter_efficiency)
    server = Link(
        (n.server_gbps or n.inter_gbps) * 1e9 / 8, n.inter_latency_us * 1e-6, n.inter_efficiency
    )
    kw: dict[str, Any] = {"cast_s": lambda numel: cast_s(numel, cell)}
    if ddp_copies(cell):
        kw["bucket_copy_s"] = lambda numel: ddp_copy_s(numel, cell)
    compressed = (
        option.compressed
        if option is not None
        else strategies.get(cell.strategy).compressor != "none"
    )
    if compressed:
        kw.update(_compressor_costs(cell))
    pcie = Link(DEVICES[cell.device].pcie_gbs * 1e9, 10e-6, 0.8)
    return Costs(
        cl.machines,
        cl.gpus_per_machine,
        machine_for(cell),
        inter,
        iteration_overhead_s=n.iteration_overhead_us * 1e-6,
        bucket_overhead_s=n.bucket_overhead_us * 1e-6,
        collectives=n.collectives,
        nccl_protocols=n.protocols(),
        nics=n.nics_per_machine,
        pcie=pcie,
        cpu_cores=cl.cpu_cores,
        servers=cl.cpu_servers,
        server_link=server,
        summation_Bps=None if cl.summation_gbs is None else cl.summation_gbs * 1e9,
        server_cores=cl.cpu_cores,
        inter_overrides=tuple(
            (name, o.inter_efficiency, o.inter_latency_us and o.inter_latency_us * 1e-6)
            for name, o in sorted((n.overrides or {}).items())
        ),
        **kw,
    )


def _compressor_costs(cell: Cell) -> dict[str, Any]:
    from gcbench.compress import create
    from gcbench.compress.costs import cpu_table, gpu_table

    table, cpu = gpu_table(cell.device), cpu_table()
    per_core = cpu_core_factor(cell.cluster)
    kind = cell.compressor.kind
    if cell.compressor_costs is not None:  # measured on this GPU: replaces the roofline
        table = _measured_table(cell.compressor_costs.file, cell.compressor_costs.sha256)
        if kind not in table.compress:
            raise ConfigError(
                [f"compressor_costs: {cell.compressor_costs.file} has no {kind} costs"]
            )
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
        "cpu_compress_s": lambda numel: cpu_comp.seconds(4 * numel) * per_core,
        "cpu_decompress_s": lambda numel: cpu_dec.seconds(4 * numel) * per_core,
        "payload_bytes": payload_bytes,
        "additive": compressor.additive,
        "splittable": compressor.splittable,
        "compressor": kind,
    }
    if hasattr(compressor, "wire_bytes_for_shape"):  # low-rank: factors follow each shape
        profile = cell_profile(cell)
        from gcbench.strategies.lowrank import round_bytes

        out["tensor_round_bytes"] = round_bytes(cell, profile)
        # per compressed matrix; a measured table's line, fitted on one matrix a call,
        # already holds one QR, so it is then counted once more per bucket
        rank = int(compressor.rank)  # type: ignore[attr-defined]  # low-rank kinds
        out["tensor_compress_s"] = orthogonalisation_s(profile, rank)
    elif compressor.law_sized:  # 3LC, threshold: a bucket's expected size on the law
        out["bucket_bytes"] = _bucket_bytes(cell, compressor)
    return out


def orthogonalisation_s(profile: ModelProfile, rank: int) -> tuple[float, ...]:
    """GPU seconds of each tensor's orthogonalisation a step: one `torch.linalg.qr` of its
    rank-`rank` factor per compressed matrix (PowerSGD's P̂, ACP-SGD's alternate factor;
    ACP-SGD §IV-C), none for a tensor sent uncompressed."""
    from gcbench.compress.costs import qr_s
    from gcbench.compress.lowrank import lowrank_view

    qr = qr_s(rank)
    return tuple(0.0 if lowrank_view(t.shape, rank) is None else qr for t in profile.tensors)


# Counters of real gradients' payloads on held-out backward passes, by name ("bytes":
# threshold's kept values, "peaks": 3LC's peaks and encoded streams). They need torch and
# the model, so `gcbench.cluster.backward` registers them here when it is imported (the
# emulator imports it), and this backend never imports the emulator.
HELD_OUT: dict[str, Callable[..., Any]] = {}


def _held_out(name: str) -> Callable[..., Any]:
    counter = HELD_OUT.get(name)
    if counter is None:
        raise RuntimeError(
            "sizes of real gradients (compute_time: measured) are counted by "
            "gcbench.cluster.backward: import it first"
        )
    return counter


def _bucket_bytes(cell: Cell, compressor: Any) -> Any:
    """A bucket's expected payload from its tensors' indices: on the gradient law, or —
    for real gradients (an emulated cell with `compute_time: measured`) — from real
    backward passes that no worker runs, one per worker summed: threshold's kept values
    counted (`cluster.backward.held_out_bytes`), 3LC's peak and each tensor's encoded
    stream at it observed (`cluster.backward.held_out_peaks`); `summed`: compressed
    from the sum of that many workers' gradients. Cached per distinct bucket (of sizes,
    on the law) and sum."""
    profile = cell_profile(cell)
    numels = tuple(t.numel for t in profile.tensors)
    real = cell.measured_compute
    if real and hasattr(compressor, "counted_bytes"):  # threshold: its kept values counted
        held_out_bytes = _held_out("bytes")
        label = cell.compressor.label()

        def counted(bucket: tuple[int, ...], summed: int = 1) -> float:
            per = held_out_bytes(profile, cell.seed, compressor, label, summed)
            return float(sum(per[i] for i in bucket))

        return counted
    if real and hasattr(compressor, "observed_bytes"):  # 3LC: its peak and runs, observed
        held_out_peaks = _held_out("peaks")
        label, sparsity = cell.compressor.label(), float(compressor.sparsity)
        known: dict[tuple[tuple[int, ...], int], float] = {}

        def observed(bucket: tuple[int, ...], summed: int = 1) -> float:
            got = known.get((bucket, summed))
            if got is None:
                peaks, encoded = held_out_peaks(profile, cell.seed, sparsity, label, summed)
                j = max(bucket, key=peaks.__getitem__)  # the bucket's peak is its tensor's
                got = known[bucket, summed] = compressor.observed_bytes(encoded[bucket, j])
            return got

        return observed
    sized = lru_cache(maxsize=65536)(compressor.expected_bytes)

    def bucket_bytes(bucket: tuple[int, ...], summed: int = 1) -> float:
        return float(sized(tuple(numels[i] for i in bucket), None, summed))

    return bucket_bytes


@lru_cache(maxsize=8)
def _measured_table(path: str, sha256: str | None) -> Any:
    """A measured cost table (cached per path and the content the cell was made with)."""
    from pathlib import Path

    from gcbench.config.models import read_costs

    return read_costs(Path(path))[0]


def period_of(cell: Cell, planned: Any = None) -> tuple[Any, list[Any]]:
    """The cell's profile and its strategy's steps (`strategies.Step`: plan, costs,
    weight), one period of them (ACP-SGD: P, then Q); emulated step k runs step k mod
    the period. A planner's plan made already (`planned`, by the task that runs the
    cell) is taken as it is: a planner's step runs with the cell's own costs, so nothing
    is planned again."""
    profile = cell_profile(cell)
    strategy = strategies.get(cell.strategy)
    if planned is not None and strategy.planner:
        return profile, [strategies.Step(planned, costs_for(cell))]
    return profile, strategy.build(cell, profile, costs_for(cell))


def plan_for(cell: Cell, profile: ModelProfile, option: Option | None = None) -> Plan:
    """The cell's fusion buckets, each with the strategy's option (or `option`); for a
    strategy with a period, its first step's plan."""
    if option is None:
        return strategies.get(cell.strategy).build(cell, profile, costs_for(cell))[0].plan
    return Plan.uniform(fuse(profile, cell.fusion), option)


def simulate_cell(
    cell: Cell, option: Option | None = None, plan: Plan | None = None
) -> SimResult:
    """Simulate one iteration of `cell` (every bucket with `option` when given, or `plan`
    when given, else the cell's strategy, `gcbench.strategies`); a periodic strategy's
    metrics are the weighted mean over its period and its spans those of the first
    step."""
    from gcbench.strategies import Step

    profile = cell_profile(cell)
    if plan is not None:
        option = next((o for o in plan.options if o is not None and o.compressed), None)
        option = option or PRESETS["fp32"]
    costs = costs_for(cell, option)
    if plan is not None:
        steps = [Step(plan, costs)]
    elif option is not None:
        steps = [Step(Plan.uniform(fuse(profile, cell.fusion), option), costs)]
    else:
        steps = strategies.get(cell.strategy).build(cell, profile, costs)
    results = [contended(profile, s.costs, s.plan, cell.network.compute_contention, i == 0)
               for i, s in enumerate(steps)]  # fmt: skip
    metrics = period_mean(profile, [r.metrics for r in results], [s.weight for s in steps])
    metrics["planner_s"] = steps[0].planner_s
    record = None
    metrics["plan_file"] = ""
    if plan is None and option is None and strategies.get(cell.strategy).planner:
        record = plan_record(cell, profile, steps[0].plan, metrics)
        record["planner_parts"] = dict(steps[0].planner_parts)
        metrics["plan_file"] = f"plans/{cell.id}.json.gz"
    return SimResult(metrics, results[0].spans(), record)


def plan_record(
    cell: Cell, profile: ModelProfile, plan: Plan, metrics: dict[str, Any]
) -> dict[str, Any]:
    """A planner's plan as stored (`results/<suite>/<run-id>/plans/<cell-id>.json.gz`) and
    printed by `gcbench plan --json`: each tensor's option, the buckets, the predicted
    iteration and the planner's time."""
    option_of: dict[int, str] = {}
    for bucket, opt in zip(plan.buckets, plan.options, strict=True):
        for i in bucket:
            option_of[i] = "" if opt is None else opt.name
    return {
        "format": "gcbench-plan",
        "version": 1,
        "cell_id": cell.id,
        "strategy": cell.strategy,
        "constraints": "" if cell.constraints is None else cell.constraints.label(),
        "predicted_iteration_s": metrics["iteration_s"],
        "planner_s": metrics["planner_s"],
        "tensors": [
            {"name": t.name, "numel": t.numel, "option": option_of[i]}
            for i, t in enumerate(profile.tensors)
        ],
        "buckets": [
            {"tensors": list(b), "option": "" if o is None else o.name}
            for b, o in zip(plan.buckets, plan.options, strict=True)
        ],
    }


# Metrics that are averaged over a period; throughput and scaling factor follow the mean
# iteration; the rest describe the model or the plan.
_AVERAGED = (
    "iteration_s",
    "compute_s",
    "compress_exposed_s",
    "comm_exposed_s",
    "comm_total_s",
    "compress_total_s",
    "inter_comm_s",
    "wire_bytes",
    "bubbles_s",
)


def period_mean(
    profile: ModelProfile, metrics: list[dict[str, Any]], weights: list[float]
) -> dict[str, Any]:
    """The mean of one period's metrics (DESIGN §5: periodic strategies report the mean
    over one period); the breakdown still adds up to the mean iteration."""
    out = dict(metrics[0])
    if len(metrics) == 1:
        return out
    total = sum(weights)
    for key in _AVERAGED:
        out[key] = sum(w * m[key] for w, m in zip(weights, metrics, strict=True)) / total
    out["wire_bytes"] = int(round(out["wire_bytes"]))
    gpus_samples = metrics[0]["throughput"] * metrics[0]["iteration_s"]
    out["throughput"] = gpus_samples / out["iteration_s"] if out["iteration_s"] > 0 else 0.0
    out["scaling_factor"] = (
        profile.one_gpu_s / out["iteration_s"] if out["iteration_s"] > 0 else 1.0
    )
    return out
