"""The iteration model: one data-parallel training iteration as jobs on streams.

Worker 0's timeline (all workers are symmetric): the forward pass, then backward tensors
in gradient order on the `compute` stream; gradients fused into buckets (PyTorch DDP by
default); each bucket's *compression option* executed as its phases — GPU
(de)compression on `compute` (it delays later backward work), communication on its
link's stream (`intra`, `inter_tx`, `ring:<i>` for the i-th parallel inter-machine ring)
— and the optimizer update once every aggregated gradient is in. Streams serve their jobs
in the fixed order they are added (bucket index, then phase), never in arrival order
(`gcbench.sim.engine`).

An `Option` is the small data type the ByteComp planner enumerates (bytecomp.txt §4):
compress or not, on the GPU (CPU offload arrives with the planner), flat or two-level
(hierarchical: reduce-scatter inside the machine, the inter-machine collective on 1/G of
the data, allgather inside), and the collective (allreduce for dense or additive data,
allgather for the rest). Named strategies build a plan for every bucket:

- `fp32`: dense ring allreduce over every GPU (flat);
- `fp32-2level`: hierarchical allreduce — intra reduce-scatter, G parallel inter-machine
  ring allreduces of 1/G each sharing the NICs, intra allgather (NCCL's tree/ring
  hierarchy, Horovod's hierarchical allreduce);
- `fp16`: cast on the GPU after backward, fp16 allreduce, cast back at the end;
- `allgather`: the cell's compressor on every bucket, flat allgather of the payloads, then
  n−1 decompressions and the sum on the GPU (ByteComp Table 2's one-level option);
- `allgather-2level`: intra reduce-scatter, compress 1/G, inter-machine allgather over
  the M machines, M−1 decompressions, intra allgather (ByteComp's two-level option).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gcbench.comm import Link, Machine, cost_shape, ring_share_link, slowest_link
from gcbench.sim.engine import Job, Timeline, no_gc
from gcbench.sim.trace import Span, breakdown
from gcbench.zoo.profile import ModelProfile

FIRST_BUCKET_BYTES = 1 * 2**20  # PyTorch DDP: a small first bucket so communication
BUCKET_BYTES = 25 * 2**20  # starts early, then 25 MiB buckets


@dataclass(frozen=True)
class Option:
    """How one bucket is communicated; `where="cpu"` offloads (de)compression to the
    machine's CPU pool after a PCIe copy (flat allgather)."""

    compress: bool = False
    where: Literal["gpu", "cpu"] = "gpu"
    hierarchy: Literal["flat", "two-level"] = "flat"
    collective: Literal["allreduce", "allgather"] = "allreduce"
    cast: bool = False  # fp16: a cast instead of a compressor (additive, allreduced)


FP32 = Option()
FP32_2LEVEL = Option(hierarchy="two-level")
FP16 = Option(compress=True, cast=True)
ALLGATHER = Option(compress=True, collective="allgather")
ALLGATHER_2LEVEL = Option(compress=True, collective="allgather", hierarchy="two-level")
STRATEGIES: dict[str, Option] = {
    "fp32": FP32,
    "fp32-2level": FP32_2LEVEL,
    "fp16": FP16,
    "allgather": ALLGATHER,
    "allgather-2level": ALLGATHER_2LEVEL,
}


@dataclass(frozen=True)
class Costs:
    """Everything the timeline needs besides the profile, as plain numbers/functions."""

    machines: int
    gpus_per_machine: int
    intra: Link
    inter: Link  # one machine's NICs towards the network
    nics: int = 1  # NICs per machine; the two-level option's G rings share them
    cast_s: Any = None  # numel -> seconds for an fp32 <-> fp16 cast (one way)
    compress_s: Any = None  # numel -> seconds to compress on the GPU
    decompress_s: Any = None  # numel -> seconds to decompress one payload on the GPU
    payload_bytes: Any = None  # numel -> bytes of one compressed payload
    cpu_compress_s: Any = None  # numel -> seconds on one CPU core (CPU offload)
    cpu_decompress_s: Any = None
    cpu_cores: int = 16  # the CPU-compression pool of one machine
    pcie: Link | None = None  # GPU <-> host copies for CPU offload

    @property
    def gpus(self) -> int:
        return self.machines * self.gpus_per_machine

    def flat_link(self) -> Link:
        """A ring over every GPU moves at the slower of NVLink/PCIe and the NIC, waiting at
        each step for the larger latency (`gcbench.comm.slowest_link`)."""
        machine = Machine(self.gpus_per_machine, self.intra)
        return slowest_link(machine, self.inter if self.machines > 1 else None)


@dataclass
class Plan:
    """Buckets (tensor indices in gradient order) and each bucket's option."""

    buckets: list[list[int]]
    options: list[Option]


def ddp_buckets(sizes: list[int]) -> list[list[int]]:
    """Tensor indices (gradient order) fused as PyTorch DDP does: a bucket takes tensors
    until it holds at least its cap (1 MiB for the first, 25 MiB after)."""
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


def fuse(profile: ModelProfile, policy: str = "ddp") -> list[list[int]]:
    """Fusion policies: `ddp`, `tensor` (one bucket per tensor), `fixed:<bytes>`."""
    sizes = [t.numel * 4 for t in profile.tensors]
    if policy == "ddp":
        return ddp_buckets(sizes)
    if policy == "tensor":
        return [[i] for i in range(len(sizes))]
    if policy.startswith("fixed:"):
        cap = int(policy.split(":", 1)[1])
        out: list[list[int]] = [[]]
        filled = 0
        for i, s in enumerate(sizes):
            if out[-1] and filled + s > cap:
                out.append([])
                filled = 0
            out[-1].append(i)
            filled += s
        return [b for b in out if b]
    raise ValueError(f"unknown fusion policy {policy!r}; valid: ddp, tensor, fixed:<bytes>")


@dataclass
class Result:
    iteration_s: float
    metrics: dict[str, Any]
    jobs: list[Job] = field(default_factory=list)

    def spans(self, worker: int = 0) -> list[Span]:
        return [
            Span(worker, j.stream, j.name, j.kind, j.start_s, j.dur_s, j.bytes) for j in self.jobs
        ]


def simulate(profile: ModelProfile, costs: Costs, plan: Plan, keep_jobs: bool = True) -> Result:
    """Build and time one iteration; metrics follow DESIGN §5."""
    with no_gc():
        return _simulate(profile, costs, plan, keep_jobs)


class _Cost:
    """A collective's time over a fixed link and rank count: a + b * bytes (the shape
    from `gcbench.comm.cost_shape`, computed once per simulation)."""

    __slots__ = ("a", "b")

    def __init__(self, collective: str, n: int, link: Link):
        steps, factor = cost_shape(collective, n)
        self.a = steps * link.latency_s
        self.b = factor / link.effective_Bps

    def __call__(self, nbytes: float) -> float:
        return self.a + self.b * nbytes if nbytes > 0 and self.b else 0.0


def _simulate(profile: ModelProfile, costs: Costs, plan: Plan, keep_jobs: bool) -> Result:
    tl = Timeline()
    numel = [t.numel for t in profile.tensors]
    last = tl.add("compute", "forward", "forward", profile.forward_s)
    n, m, g = costs.gpus, costs.machines, costs.gpus_per_machine
    flat, ring_link = costs.flat_link(), _ring_link(costs)
    flat_stream = "intra" if m == 1 else "inter_tx"
    ring = "ring:0"  # worker 0 is in ring 0 of the G identical inter-machine rings
    ar_flat = _Cost("allreduce", n, flat)
    ag_payload_flat = _Cost("allgather_payload", n, flat)
    rs_intra = _Cost("reduce_scatter", g, costs.intra)
    ag_intra = _Cost("allgather", g, costs.intra)
    ar_ring = _Cost("allreduce", m, ring_link)
    ag_payload_ring = _Cost("allgather_payload", m, ring_link)
    finals: list[Job] = []
    # decompressions to run after backward: (name, seconds, dependency, bytes of an intra
    # allgather to follow, 0 for none)
    later: list[tuple[str, float, Job, int]] = []
    wire = 0.0
    for b, (bucket, opt) in enumerate(zip(plan.buckets, plan.options, strict=True)):
        for i in bucket:
            t = profile.tensors[i]
            last = tl.add("compute", t.name, "backward", t.backward_s)
        elements = sum(numel[i] for i in bucket)
        dense = 4 * elements
        name = f"bucket {b}"
        if n == 1:
            continue
        two_level = opt.hierarchy == "two-level" and m > 1
        if not opt.compress and two_level:
            rs = tl.add("intra", name, "comm", rs_intra(dense), (last,), dense)
            ar = tl.add(ring, name, "comm", ar_ring(dense / g), (rs,), dense // g)
            finals.append(tl.add("intra", name, "comm", ag_intra(dense), (ar,), dense))
            wire += 2 * (g - 1) / g * dense + 2 * (m - 1) / m * dense / g
        elif not opt.compress:
            finals.append(tl.add(flat_stream, name, "comm", ar_flat(dense), (last,), dense))
            wire += 2 * (n - 1) / n * dense
        elif opt.cast:
            half = 2 * elements
            c = tl.add("compute", name, "compress", costs.cast_s(elements), (last,))
            comm = tl.add(flat_stream, name, "comm", ar_flat(half), (c,), half)
            wire += 2 * (n - 1) / n * half
            later.append((name, costs.cast_s(elements), comm, 0))
        elif opt.where == "cpu":
            # BytePS-style offload (bytecomp.txt §3): copy the bucket to the host, compress
            # on one core of the machine's pool, allgather, decompress on the same core,
            # copy the sum back to the GPU.
            assert costs.pcie is not None and costs.cpu_compress_s is not None
            core = f"cpu:{b % max(costs.cpu_cores, 1)}"
            copy = dense / costs.pcie.effective_Bps + costs.pcie.latency_s
            d2h = tl.add("pcie", name, "copy", copy, (last,), dense)
            c = tl.add(core, name, "compress", costs.cpu_compress_s(elements), (d2h,))
            payload = costs.payload_bytes(elements)
            ag = tl.add(flat_stream, name, "comm", ag_payload_flat(payload), (c,), payload)
            seconds = (n - 1) * costs.cpu_decompress_s(elements)
            dec = tl.add(core, name, "decompress", seconds, (ag,))
            finals.append(tl.add("pcie", name, "copy", copy, (dec,), dense))
            wire += (n - 1) * payload
        elif two_level:
            part = elements // g or elements
            rs = tl.add("intra", name, "comm", rs_intra(dense), (last,), dense)
            c = tl.add("compute", name, "compress", costs.compress_s(part), (rs,))
            payload = costs.payload_bytes(part)
            ag = tl.add(ring, name, "comm", ag_payload_ring(payload), (c,), payload)
            # The M-1 decompressions wait until backward is done (like every decompression
            # here), then the intra allgather spreads the summed 1/G parts.
            later.append((name, (m - 1) * costs.decompress_s(part), ag, dense))
            wire += (g - 1) / g * dense * 2 + (m - 1) * payload
        else:
            c = tl.add("compute", name, "compress", costs.compress_s(elements), (last,))
            payload = costs.payload_bytes(elements)
            ag = tl.add(flat_stream, name, "comm", ag_payload_flat(payload), (c,), payload)
            wire += (n - 1) * payload
            later.append((name, (n - 1) * costs.decompress_s(elements), ag, 0))
    for name, seconds, dep, then_allgather in later:  # after backward, in bucket order
        dec = tl.add("compute", name, "decompress", seconds, (dep,))
        if then_allgather:
            dec = tl.add("intra", name, "comm", ag_intra(then_allgather), (dec,), then_allgather)
        finals.append(dec)
    tl.add("compute", "update", "update", profile.update_s, tuple(finals))
    iteration_s = tl.run()
    result = Result(iteration_s, {}, tl.jobs if keep_jobs else [])
    metrics: dict[str, Any] = breakdown(tl.jobs, iteration_s)  # type: ignore[arg-type]
    samples = profile.samples_per_iteration
    throughput = n * samples / iteration_s if iteration_s > 0 else 0.0
    metrics.update(
        inter_comm_s=sum(
            j.dur_s
            for j in tl.jobs
            if j.kind == "comm" and (j.stream == "inter_tx" or j.stream.startswith("ring:"))
        ),
        iteration_s=iteration_s,
        throughput=throughput,
        scaling_factor=(
            throughput / (n * samples / profile.compute_s) if profile.compute_s > 0 else 1.0
        ),
        wire_bytes=int(round(wire)),
        sample_unit=profile.sample_unit,
        tensors=len(profile.tensors),
        buckets=len(plan.buckets) if n > 1 else 0,
        model_mib=sum(numel) * 4 / 2**20,
    )
    result.metrics = metrics
    return result


def _ring_link(costs: Costs) -> Link:
    """The link of one of the G parallel inter-machine rings of the two-level scheme
    (GPU j of every machine forms ring j, carrying 1/G of each bucket): the rings share
    the machine's NICs (`gcbench.comm.hierarchy.ring_share_link`)."""
    return ring_share_link(costs.inter, costs.nics, costs.gpus_per_machine)
