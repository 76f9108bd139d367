"""The iteration model: one data-parallel training iteration as jobs on streams.

Worker 0's timeline (data-parallel workers are symmetric): the forward pass, then the
backward tensors in gradient order on the `compute` stream; gradients fused into buckets
(`fuse`: PyTorch DDP by default); each bucket's *option* (`gcbench.sim.options`) executed
phase by phase, every duration from `gcbench.comm` and the cell's compression costs; the
optimizer update once every aggregated gradient is in.

**Streams** (each serves its jobs in the order they are issued, `gcbench.sim.timeline`):
`compute` (worker 0's GPU), `cpu:<i>` (worker 0's share of its machine's CPU pool),
`pcie:d2h` and `pcie:h2d` (GPU -> host and host -> GPU copies, separate directions),
`intra` (the machine's NVLink or PCIe fabric), `inter_tx` (the machine's NICs: every
phase that crosses machines; the parallel rings of one phase run as one job at the rate
`gcbench.comm.ring_share_link` gives them), and `root:<level>:<r>` for work that the root
of a rooted collective does when that root is not worker 0.

**The GPU rule** (DESIGN §7: GPU compression competes with backward, but never holds the
GPU idle while backward work is ready). The compute stream serves, in this fixed order:
the forward pass; the backward tensors, each bucket's *bucket-fed* GPU work (what runs
before the bucket's first phase: its first compression, its fp16 cast) right after the
bucket's last tensor; then, after the last backward tensor, every other GPU operation
(the ones that wait on communication), bucket by bucket; then the update. Before the last
backward tensor the stream thus holds only work whose input is already computed, so the
GPU is never idle while backward work is ready. The price: a compression that waits on a
first communication phase (two-level schemes) runs after backward, not beside it.
Everything downstream of such an operation is issued after backward too, so each stream's
order is (pass, bucket, phase): pass 1 during backward, pass 2 after.

**The CPU pool** (DESIGN §5: a machine's `cpu_cores` are shared by its G GPUs). Worker 0
gets c = cores / G of them: floor(c) cores when c >= 1, otherwise one core running at
speed c. A bucket's CPU operations run on core b mod floor(c), in (pass, bucket, phase)
order. A CPU operation reads host memory: the bucket is copied device -> host first when
it is on the GPU, and back host -> device before a GPU operation, an intra-machine phase
(GPU-to-GPU copies need device memory), or the end. Phases that cross machines send from
pinned host memory as well as from the GPU (BytePS-style), so they need no copy. The copy
streams serve in (pass, bucket, phase) order like every other.

**Rooted collectives** (reduce, gather, broadcast) rotate their root: in a group of n
ranks, bucket b's root is rank b mod n (HiPress §, BytePS's partition placement). Worker 0
is rank 0 of each of its groups. When it is the root, the aggregation between the first
step and the broadcast runs on its own streams; otherwise on `root:<level>:<r>` (that GPU
runs it after its own backward, like worker 0's deferred work), and worker 0 waits.

**Data and payloads.** A phase's size argument follows `gcbench.comm.collectives`: the
whole array, or one rank's payload. Each rank decompresses every payload it holds except
its own (it still has its own contribution uncompressed); forwarding multiplies the
payloads held. An unsplittable compressor compresses per chunk when an alltoall follows.
A job's `bytes` is the mean bytes one GPU sends in it (all bytes on the wire / GPUs), so
the trace's bytes add up to the `wire_bytes` metric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gcbench.comm import (
    NCCL_AS_IS,
    NCCL_MODELLED,
    PARTITION_BYTES,
    Link,
    Machine,
    NcclProtocols,
    byteps_s,
    byteps_wire_bytes,
    copy_s,
    cost_shape,
    machine_collective_s,
    nccl_fastest,
    nccl_names,
    nccl_pieces,
    ps_pushpull_s,
    ring_share_link,
    slowest_link,
    wire_bytes,
)
from gcbench.errors import ConfigError
from gcbench.sim.options import COLLECTIVE_TABLE, Holding, Op, Option, check, second_steps
from gcbench.sim.timeline import (
    Job,
    Lowering,
    Recorder,
    Step,
    Sync,
    Synced,
    Timeline,
    as_program,
    new_step,
    no_gc,
)
from gcbench.sim.trace import Span, breakdown
from gcbench.zoo.profile import ModelProfile

FIRST_BUCKET_BYTES = 1 * 2**20  # PyTorch DDP: a small first bucket so communication
BUCKET_BYTES = 25 * 2**20  # starts early, then 25 MiB buckets
# GPU <-> host copies when the cell gives none: PCIe 3.0 x16, 10 us, 80% of line rate.
DEFAULT_PCIE = Link(15.75e9, 10e-6, 0.8)


def zero_s(_elements: float) -> float:
    return 0.0


def _dense_fp32(elements: float) -> float:
    return 4 * elements


@dataclass(frozen=True)
class Costs:
    """Everything the timeline needs besides the profile and the plan, with units in the
    names: `*_s` functions take a number of elements and return seconds."""

    machines: int
    gpus_per_machine: int
    machine: Machine  # one machine's GPUs and fabric (NVLink, or two-switch PCIe)
    inter: Link  # one machine's NICs together (their total line rate)
    nics: int = 1  # the parallel inter-machine rings of one phase are spread over them
    pcie: Link = DEFAULT_PCIE  # one GPU's link to host memory
    cpu_cores: int = 16  # the machine's CPU-compression pool, shared by its GPUs
    cast_s: Callable[[float], float] = zero_s  # fp32 <-> fp16 cast on the GPU, one way
    # A fused bucket's gradients copied back out of its flat buffer after its
    # communication (torch DDP's reducer with gradient_as_bucket_view=False, its default;
    # the copy in is each tensor's, in the profile's backward: `backends.simulate`); none
    # for one GPU or per-tensor buckets
    bucket_copy_s: Callable[[float], float] = zero_s
    compress_s: Callable[[float], float] = zero_s  # GPU, one compression
    decompress_s: Callable[[float], float] = zero_s  # GPU, one payload
    cpu_compress_s: Callable[[float], float] = zero_s  # one CPU core
    cpu_decompress_s: Callable[[float], float] = zero_s
    payload_bytes: Callable[[float], float] = _dense_fp32  # one payload of that many elements
    # For compressors whose payload depends on the shape (low-rank): each round's bytes of
    # each tensor compressed alone (round, then gradient order); a bucket then uses its
    # tensors' ratio per round, and each compressed allreduce runs once per round
    # (PowerSGD: P, then Q from the summed P).
    tensor_round_bytes: tuple[tuple[float, ...], ...] | None = None
    # GPU seconds each tensor adds to its bucket's compression beyond the per-byte cost
    # (low-rank: orthogonalising its factor, a QR bound by launches, `compress.costs.qr_s`).
    tensor_compress_s: tuple[float, ...] | None = None
    # Each bucket's communication finishes before backward goes on: PyTorch's
    # powerSGD_hook (Power-SGD*) ends with torch.cuda.synchronize in a callback that runs
    # on the autograd thread (see `strategies.lowrank`), so nothing overlaps its buckets.
    synchronous: bool = False
    # For compressors whose payload depends on the values (3LC, threshold): a bucket's
    # expected payload, given its tensors' indices and how many workers' gradients were
    # summed before it was compressed (`compress.law`: from their sizes; where the
    # gradients are real, observed on held-out backward passes, `cluster.backward`);
    # a shard uses its ratio.
    bucket_bytes: Callable[[tuple[int, ...], int], float] | None = None
    additive: bool = False  # the compressor's payloads sum to a valid payload
    splittable: bool = True  # one payload splits into per-destination chunks
    compressor: str = "none"  # named in error messages
    servers: int = 0  # CPU summation servers (BytePS), each with its own NICs
    server_link: Link | None = None  # one server's NICs (default: like a machine's)
    summation_Bps: float | None = None  # input bytes a server sums per second (None: ample)
    server_cores: int = 16  # cores of a server, for server-side (de)compression
    partition_bytes: float = PARTITION_BYTES  # PS partitions dealt to the servers
    pipeline_fill: bool = True  # PS: count the last partition's fill of the pipeline
    # A network profile's per-collective overrides of the inter-machine link: (collective,
    # efficiency or None, latency in seconds or None); the link's own values otherwise.
    inter_overrides: tuple[tuple[str, float | None, float | None], ...] = ()
    # A fixed cost every iteration pays beyond the profile's layers (the network
    # profile's `iteration_overhead_us`): part of the update, the iteration's last job
    iteration_overhead_s: float = 0.0
    # A fixed cost of each bucket's communication (`bucket_overhead_us`: the hook's or
    # the collective's launch and bookkeeping), added to its first phase
    bucket_overhead_s: float = 0.0
    # How a collective is costed (`Network.collectives`): "ring", the ring of
    # `gcbench.comm.collectives` whatever the size; "nccl", the fastest of NCCL's
    # algorithms and protocols for the size (`gcbench.comm.nccl`)
    collectives: str = "ring"
    # Under "nccl": the network profile's corrections to its LL and LL128 protocols
    nccl_protocols: NcclProtocols = NCCL_AS_IS

    @property
    def gpus(self) -> int:
        return self.machines * self.gpus_per_machine


@dataclass
class Plan:
    """Buckets (tensor indices in gradient order) and each bucket's option (None: not
    communicated this step, as COVAP's unselected shards). `elements`, when given, is each
    bucket's size in elements: a bucket may then be part of a tensor (HiPress's
    partitions, COVAP's shards), consecutive buckets sharing it."""

    buckets: list[list[int]]
    options: list[Option | None]
    elements: list[float] | None = None

    @classmethod
    def uniform(cls, buckets: list[list[int]], option: Option) -> Plan:
        return cls(buckets, [option] * len(buckets))


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


FUSION_HELP = "ddp (PyTorch DDP buckets: 1 MiB, then 25 MiB), tensor, or fixed:<bytes>"


def parse_fusion(policy: str) -> int | str:
    """`ddp`, `tensor`, or the byte cap of `fixed:<bytes>`; ConfigError otherwise."""
    if policy in ("ddp", "tensor"):
        return policy
    kind, _, cap = policy.partition(":")
    if kind == "fixed" and cap.strip().isdigit() and int(cap) > 0:
        return int(cap)
    raise ConfigError([f"fusion {policy!r}: expected {FUSION_HELP}"])


def fuse(profile: ModelProfile, policy: str = "ddp") -> list[list[int]]:
    """Fusion policies: `ddp`, `tensor` (one bucket per tensor), `fixed:<bytes>` (a bucket
    takes tensors while it stays within the cap; a larger tensor is a bucket alone)."""
    sizes = [t.numel * 4 for t in profile.tensors]
    rule = parse_fusion(policy)
    if rule == "ddp":
        return ddp_buckets(sizes)
    if rule == "tensor":
        return [[i] for i in range(len(sizes))]
    out: list[list[int]] = [[]]
    filled = 0
    for i, s in enumerate(sizes):
        if out[-1] and filled + s > rule:  # type: ignore[operator]
            out.append([])
            filled = 0
        out[-1].append(i)
        filled += s
    return [b for b in out if b]


@dataclass
class Result:
    iteration_s: float
    metrics: dict[str, Any]
    jobs: list[Job] = field(default_factory=list)

    def spans(self, worker: int = 0) -> list[Span]:
        return [
            Span(worker, j.stream, j.name, j.kind, j.start_s, j.dur_s, j.bytes) for j in self.jobs
        ]


@lru_cache(maxsize=65536)
def _checked(option: Option, additive: bool, compressor: str) -> tuple[bool, ...]:
    """Check `option` once per compressor kind; for each step, whether it is the second
    step of a divisible pair (`options.second_steps`)."""
    check(option, additive=additive, compressor=compressor)
    return second_steps(option.steps)


# Options' layouts (`SimContext.layout`), by (id(option), what the layout reads of the
# costs): (the option, its layout)
_LAYOUTS: dict[tuple[Any, ...], tuple[Option, tuple[tuple[Any, ...], ...]]] = {}
_LAYOUTS_MAX = 1 << 16


class SimContext:
    """Per-simulation constants: group sizes, links, the CPU share, cost caches."""

    def __init__(self, costs: Costs, numel: list[int]):
        c = costs
        self.c = c
        self.M, self.G = c.machines, c.gpus_per_machine
        self.N = self.M * self.G
        self.n = {"flat": self.N, "intra": self.G, "inter": self.M}
        self.flat_link = slowest_link(c.machine, c.inter if self.M > 1 else None)
        self.ring_links = {r: ring_share_link(c.inter, c.nics, r) for r in {1, self.G}}
        share = c.cpu_cores / self.G
        self.cores = max(1, int(share))
        self.cpu_speed = min(1.0, share)
        self.numel = numel

        self._shapes: dict[tuple[str, str, int], _Shape | None] = {}
        # what an option's layout reads of the costs (`_LAYOUTS` keys by it)
        self._reads = (c.additive, c.compressor, c.splittable, self.M, self.G)

    def layout(self, option: Option) -> tuple[tuple[Any, ...], ...]:
        """`option` checked against the cell's compressor, and what `lower` reads of each
        of its steps that does not depend on the bucket, once per simulation: for an
        operation (True, is a compression, on the GPU, where it needs the data ("gpu" or
        "host"), the chunks it compresses: the product of the alltoall groups ahead of
        it for a compressor that cannot split a payload), for a phase (False, level,
        collective's row of `options.COLLECTIVE_TABLE`, group size, stream, token, second
        step of a divisible pair, needs device memory (inside one machine), crosses
        machines by rings). Shared by every context of the same cluster and compressor
        (`_LAYOUTS`: each simulation builds a context of its own)."""
        key = (id(option), self._reads)
        known = _LAYOUTS.get(key)
        if known is not None and known[0] is option:
            return known[1]
        c = self.c
        second = _checked(option, c.additive, c.compressor)
        out: list[tuple[Any, ...]] = []
        for si, s in enumerate(option.steps):
            if isinstance(s, Op):
                chunks = 1
                if s.op == "c" and not c.splittable:  # compressed per chunk for alltoalls
                    for t in option.steps[si + 1 :]:
                        if isinstance(t, Op):
                            break
                        if t.collective == "alltoall":
                            chunks *= self.n[t.level]
                place = "gpu" if s.where == "gpu" else "host"
                out.append((True, s.op == "c", s.where == "gpu", place, chunks))
                continue
            level = s.level
            out.append((
                False, level, COLLECTIVE_TABLE[s.collective], self.n[level],
                stream_of(level, self.M), s.token,
                second[si], level == "intra" or (level == "flat" and self.M == 1),
                level == "inter",
            ))  # fmt: skip
        got = tuple(out)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = (option, got)  # holds the option: no other can take its id
        return got

    def servers_comm(
        self, name: str, nbytes: float, rings: int, server_work_s: float = 0.0
    ) -> tuple[float, float]:
        """PS push/pull or BytePS across machines: the machine's `rings` GPUs each hold
        `nbytes`, so its NICs carry their sum (`gcbench.comm.byteps`)."""
        c = self.c
        machine_bytes = nbytes * rings
        if name == "byteps":
            seconds = byteps_s(
                machine_bytes, self.M, c.servers, c.inter, summation_Bps=c.summation_Bps
            )
            return seconds, byteps_wire_bytes(machine_bytes, self.M, c.servers) / self.G
        if c.servers < 1:
            raise ConfigError([f"{name}: the cluster has no CPU servers (cpu_servers >= 1)"])
        seconds = ps_pushpull_s(
            machine_bytes,
            self.M,
            c.servers,
            c.inter,
            c.server_link,
            summation_Bps=c.summation_Bps,
            partition_bytes=c.partition_bytes,
            pipeline_fill=c.pipeline_fill,
            server_work_s=server_work_s,
        )
        return seconds, machine_bytes / self.G

    def comm(self, level: str, name: str, nbytes: float, rings: int) -> tuple[float, float]:
        """(seconds, mean bytes one GPU sends) of one phase; the rings of an inter phase
        share the NICs. Both are affine in the size except on two-switch PCIe machines,
        so their coefficients are computed once per simulation."""
        key = (level, name, rings)
        if key not in self._shapes:
            self._shapes[key] = self._shape(level, name, rings)
        shape = self._shapes[key]
        if shape is None:  # two-switch PCIe machine: a two-step collective
            seconds = machine_collective_s(name, nbytes, self.c.machine)
            return seconds, wire_bytes(name, nbytes, self.G)
        a, b, w, more = shape
        if nbytes <= 0 or not b:
            return 0.0, w * nbytes
        seconds = a + b * nbytes
        for a, b in more:  # NCCL's other algorithms and protocols: the fastest runs
            seconds = min(seconds, a + b * nbytes)
        return seconds, w * nbytes

    def named(self, label: str, level: str, name: str, nbytes: float, rings: int) -> str:
        """A phase's label; under `collectives: nccl` followed by what NCCL would run it
        as (`bucket 3 flat:ar (tree/LL)`), so that a trace says."""
        if self.c.collectives != "nccl":
            return label
        return f"{label} ({self.protocol(level, name, nbytes, rings)})"

    def protocol(self, level: str, name: str, nbytes: float, rings: int) -> str:
        """Which of NCCL's algorithm/protocol pairs `comm` costed this phase at (for
        labels; alltoall is NCCL's send/receive, outside its tuning model)."""
        shape = self._shapes.get((level, name, rings))
        if name not in NCCL_MODELLED:
            return "send/receive"
        if shape is None or not shape[3]:  # a two-switch PCIe machine's two-step phase
            return "ring/Simple"
        a, b, _, more = shape
        return nccl_fastest(((a, b), *more), nccl_names(name, self.c.machine.kind == "nvlink"),
                            nbytes)  # fmt: skip

    def _override(self, name: str, link: Link) -> Link:
        """The link a collective crossing machines runs on: `link`, or with the network
        profile's efficiency and latency for that collective."""
        for collective, efficiency, latency_s in self.c.inter_overrides:
            if collective == name:
                return Link(
                    link.bandwidth_Bps,
                    link.latency_s if latency_s is None else latency_s,
                    link.efficiency if efficiency is None else efficiency,
                )
        return link

    def _shape(self, level: str, name: str, rings: int) -> _Shape | None:
        n, machine = self.n[level], self.c.machine
        inter: Link | None = None
        if level == "inter":
            inter = link = self._override(name, self.ring_links[rings])
            share, machines = rings / self.G, n
        elif level == "flat" and self.M > 1:
            inter = self._override(name, self.c.inter)
            link = self.flat_link if inter is self.c.inter else slowest_link(machine, inter)
            share, machines = 1.0, self.M
        elif machine.switches == 1:
            link, share, machines = machine.intra, 1.0, 1
        else:
            return None
        w = wire_bytes(name, 1.0, n) * share
        if self.c.collectives == "nccl" and name in NCCL_MODELLED:
            # every GPU of a level-"inter" ring is on its own machine: no step inside one
            got = nccl_pieces(name, n, machines, machine.intra, inter, link,
                              nvlink=machine.kind == "nvlink",
                              protocols=self.c.nccl_protocols)  # fmt: skip
            return got[0][0], got[0][1], w, got[1:]
        steps, factor = cost_shape(name, n)
        return steps * link.latency_s, factor / link.effective_Bps, w, ()


# A phase's cost coefficients for one (level, collective, rings): time = a + b * bytes,
# or the least of that and the other (a, b) pieces (NCCL's algorithms and protocols);
# mean bytes a GPU sends = w * bytes.
_Shape = tuple[float, float, float, tuple[tuple[float, float], ...]]


def simulate(
    profile: ModelProfile,
    costs: Costs,
    plan: Plan,
    keep_jobs: bool = True,
    payloads: Sequence[Sequence[float | None] | None] | None = None,
    sync: Sync | None = None,
) -> Result:
    """Build and time one iteration; metrics follow DESIGN §5. An emulated worker's
    virtual clock (issue #14) passes `payloads`, per bucket the payload bytes each of its
    compressions made as measured (None: the compressor's model), and `sync`, which agrees every
    collective's start and end with the peers it runs with."""
    with no_gc():
        return _simulate(profile, costs, plan, keep_jobs, payloads, sync)


def stream_of(level: str, machines: int) -> str:
    """The stream a phase at `level` occupies: the NICs across machines, else NVLink/PCIe
    inside one (an emulated worker's wall-clock log names its phases the same way)."""
    return "inter_tx" if level == "inter" or (level == "flat" and machines > 1) else "intra"


def estimate_s(
    option: Option, bucket: list[int], b: int, x: SimContext, elements: float | None = None
) -> float:
    """The sum of the durations of bucket `b`'s steps under `option`, as if none
    overlapped (HiPress's estimate of a partition alone, `strategies.baselines`)."""
    steps, _ = lower(option, bucket, b, x, elements)
    return sum(step.dur for step in steps)


def _ratio_payload(ratio: float) -> Callable[[float], float]:
    return lambda e: 4 * e * ratio


def lower(
    option: Option,
    bucket: list[int],
    b: int,
    x: SimContext,
    elements: float | None = None,
    fed: Sequence[float | None] | None = None,
    labels: bool = True,
) -> tuple[list[Step], int]:
    """One bucket's option as a chain of steps, and the index of the first step that must
    wait for backward to end (len(steps) when none). `fed`: the payload each compression
    (`c`, in order) made as measured, one chunk's bytes (None: the size model's).
    `labels=False` leaves the steps' labels empty (the kernel never reads them)."""
    c = x.c
    layout = x.layout(option)
    if elements is None:
        elements = float(sum(x.numel[i] for i in bucket))
    payloads = _bucket_payloads(c, bucket, x, elements)
    payload, rounds = payloads[0], len(payloads)
    # per-tensor GPU seconds of each compression of this bucket (low-rank QRs: bound by
    # launches, so a shard of every matrix costs as many as the whole)
    extra = 0.0 if c.tensor_compress_s is None else sum(c.tensor_compress_s[i] for i in bucket)
    bpe = 2 if option.fp16 else 4  # bytes per dense element on the wire
    G, loc, actor, core = x.G, "gpu", "w0", f"cpu:{b % x.cores}"
    steps: list[Step] = []
    defer_at = -1  # first step that waits for backward
    tag = f"bucket {b}" if labels else ""  # labels `tag and f"{tag} <what>"`: "" untagged
    started = False  # a phase has run: later GPU work waits on communication
    h = Holding(elements, G)  # what worker 0 holds (`options.Holding`)
    compressions = 0  # the `c`s so far, for `fed`
    frames: list[list[Any]] = []  # rooted sections: [level, actor, changed]
    last_compress = ("compute", 0.0, True)
    launch = c.bucket_overhead_s  # paid once, by the bucket's first phase
    defer_at = _bucket_edge(steps, defer_at, False, False, c, option, elements, tag)
    for step in layout:
        if step[0]:  # an operation (`SimContext.layout` says what each field is)
            _, compress, on_gpu, place, chunks = step
            if loc != place:
                steps.append(_copy_step(c, actor, place, _bytes(h, bpe), tag))
                loc = place
            if actor == "w0":
                stream = "compute" if on_gpu else core
            else:
                stream = actor if on_gpu else actor + ":cpu"
            speed = 1.0 if on_gpu else x.cpu_speed
            if compress:  # per chunk for the alltoalls ahead, where it cannot split
                per = h.e / chunks
                f = c.compress_s if on_gpu else c.cpu_compress_s
                seconds = chunks * f(per) / speed / rounds  # the first round's share
                if on_gpu:
                    seconds += extra / rounds
                defer_at = _gpu_step(steps, defer_at, started, stream, "compress", seconds,
                                     tag and f"{tag} compress", on_gpu)  # fmt: skip
                h.summed *= h.k  # the pieces an uncompressed alltoall brought, summed first
                h.psum = h.summed
                if h.summed > 1 and c.bucket_bytes is not None:
                    payload = _summed_payload(c.bucket_bytes, bucket, x, h.summed)
                # (a multi-round compressor's phase carries every round: low-rank sizes
                # follow the shapes alone, the model's are exact)
                measured = None
                if fed is not None and rounds == 1 and compressions < len(fed):
                    measured = fed[compressions]
                compressions += 1
                made = payload(per) if measured is None else measured
                h.held, h.k, h.own, h.comp = chunks * made, 1, True, True
                last_compress = (stream, seconds, on_gpu)
                if frames:
                    frames[-1][2] = True
            else:
                count = h.slices * h.k - (1 if h.own else 0)
                if count > 0:
                    f = c.decompress_s if on_gpu else c.cpu_decompress_s
                    defer_at = _gpu_step(steps, defer_at, started, stream, "decompress",
                                         count * f(h.e) / speed, tag and f"{tag} decompress",
                                         on_gpu)  # fmt: skip
                h.summed = h.psum * h.k
                h.e, h.slices, h.k, h.held, h.comp = h.e * h.slices, 1, 1, 0.0, False
            continue
        # a phase: its row of the collective table says what it does
        _, level, row, n, stream, token, second, device, inter = step
        started = True
        if loc == "host" and device:  # GPU-to-GPU inside a machine needs device memory
            steps.append(_copy_step(c, actor, "gpu", _bytes(h, bpe), tag))
            loc = "gpu"
        if row.opens and n > 1:  # a rooted section: the root runs it for the group
            root = b % n
            frames.append([level, actor, False])
            if root:
                actor = f"root:{level}:{root}"
        if n <= 1:
            continue  # a group of one: nothing to send (a rooted pair pushed no section)
        # the phase's size argument and link collective (`Collective.size`, `link`, inline)
        size = h.held if h.comp else (bpe * h.e * n if row.whole else bpe * h.e)
        name = row.payload_link if h.comp else row.name
        label = tag and f"{tag} {token}"
        if row.servers:
            dur, sent = _servers_phase(x, row.name, h, n, size)
            steps.append(new_step((stream, "comm", dur + launch, sent, label, False)))
            launch = 0.0
            row.after(h, n, second, level == "intra", G)  # the servers sum every push
            continue
        if h.comp and rounds > 1 and not row.rounds:
            raise _rounds_error(c.compressor, rounds, token)
        dur, sent = x.comm(level, name, size, h.rings if inter else G)
        label = label and x.named(label, level, name, size, h.rings if inter else G)
        steps.append(new_step((stream, "comm", dur + launch, sent, label, False)))  # waits for none
        launch = 0.0
        for r in range(1, rounds if h.comp else 1):  # later rounds: compress, then send
            cstream, cseconds, cgpu = last_compress
            defer_at = _gpu_step(steps, defer_at, started, cstream, "compress", cseconds,
                                 tag and f"{tag} compress round {r}", cgpu)  # fmt: skip
            more = payloads[r](h.e)
            dur, sent = x.comm(level, name, more, h.rings if inter else G)
            label = tag and f"{tag} {token} round {r}"
            steps.append(new_step((stream, "comm", dur, sent, label, False)))
        row.after(h, n, second, level == "intra", G)
        if row.closes and frames and frames[-1][0] == level:
            _, outer, changed = frames.pop()
            if actor != "w0" and changed:
                h.own = False  # worker 0 receives the root's recompressed aggregate
            actor = outer
    if loc == "host":
        steps.append(_copy_step(c, actor, "gpu", _bytes(h, bpe), tag))
    defer_at = _bucket_edge(steps, defer_at, started, True, c, option, elements, tag)
    return steps, (defer_at if defer_at >= 0 else len(steps))


def _bucket_edge(steps: list[Step], defer_at: int, started: bool, end: bool, c: Costs,
                 option: Option, elements: float, tag: str) -> int:  # fmt: skip
    """The GPU work that opens a bucket (`end` False) or closes it (once a phase has run,
    `started`, it waits for backward): fp16's casts, and last DDP's copy of the gradients
    back out of the bucket's flat buffer once its future completes, in finalize_backward
    (torch/csrc/distributed/c10d/reducer.cpp: finalize_bucket_dense; the copy in, each
    gradient's as it becomes ready, is in the profile's backward)."""
    if option.fp16:
        kind, what = ("decompress", "cast fp32") if end else ("compress", "cast fp16")
        defer_at = _gpu_step(steps, defer_at, started, "compute", kind, c.cast_s(elements),
                             tag and f"{tag} {what}", True)  # fmt: skip
    copy = c.bucket_copy_s(elements) if end else 0.0
    if copy:
        defer_at = _gpu_step(steps, defer_at, started, "compute", "copy", copy,
                             tag and f"{tag} copy out of bucket", True)  # fmt: skip
    return defer_at


def _rounds_error(compressor: str, rounds: int, token: str) -> ConfigError:
    return ConfigError(
        [f"{compressor} has {rounds} rounds, each summed before the next: its payloads are "
         f"allreduced or reduce-scattered, not {token}"]
    )  # fmt: skip


def _bucket_payloads(
    c: Costs, bucket: list[int], x: SimContext, elements: float
) -> list[Callable[[float], float]]:
    """A bucket's payload bytes by elements compressed, one function per round: the
    compressor's, or at this bucket's own ratio (low-rank: its tensors' factors; 3LC and
    threshold: its expected size)."""
    if c.tensor_round_bytes is not None:  # low-rank: this bucket's tensors' own ratio
        return [
            _ratio_payload(sum(r[i] for i in bucket) / max(4 * elements, 1.0))
            for r in c.tensor_round_bytes
        ]
    if c.bucket_bytes is not None:  # 3LC, threshold: this bucket's expected ratio
        return [_summed_payload(c.bucket_bytes, bucket, x, 1)]
    return [c.payload_bytes]


def _servers_phase(
    x: SimContext, name: str, h: Holding, n: int, size: float
) -> tuple[float, float]:
    """(seconds, bytes sent) of a phase through the CPU summation servers; compressed,
    the servers decompress every machine's payloads and recompress."""
    c = x.c
    work = 0.0
    if h.comp:
        core_s = h.rings * (n * c.cpu_decompress_s(h.e) + c.cpu_compress_s(h.e))
        work = core_s / (max(c.servers, 1) * c.server_cores)
    return x.servers_comm(name, size, h.rings, work)


def _bytes(h: Holding, bpe: int) -> float:
    """The bytes a rank holds: its payloads, or its dense slices."""
    return h.held if h.comp else bpe * h.e * h.slices


def _gpu_step(
    steps: list[Step],
    defer_at: int,
    started: bool,
    stream: str,
    kind: str,
    dur: float,
    label: str,
    gpu: bool,
) -> int:
    """Append a compression, decompression or cast to `steps`; the first step that waits
    for backward, updated: GPU work waits once a phase has run (`started`) or when it is
    not on the compute stream (a root's)."""
    deferred = gpu and (started or stream != "compute")
    if deferred and defer_at < 0:
        defer_at = len(steps)
    steps.append(new_step((stream, kind, dur, 0, label, deferred and stream != "compute")))
    return defer_at


def _copy_step(c: Costs, actor: str, to: str, nbytes: float, tag: str) -> Step:
    """A copy of `nbytes` between GPU and host memory (`to` the one it goes to), on worker
    0's PCIe direction or on a root's own stream."""
    stream = ("pcie:h2d" if to == "gpu" else "pcie:d2h") if actor == "w0" else actor
    label = f"{tag} copy" if tag else ""
    return new_step((stream, "copy", copy_s(nbytes, c.pcie), 0, label, False))


def _summed_payload(
    bucket_bytes: Callable[[tuple[int, ...], int], float],
    bucket: list[int],
    x: SimContext,
    summed: int,
) -> Callable[[float], float]:
    """A data-dependent compressor's payload at the expected ratio of this bucket, compressed
    from the sum of `summed` workers' gradients."""
    whole = bucket_bytes(tuple(bucket), summed)
    return _ratio_payload(whole / max(4 * float(sum(x.numel[i] for i in bucket)), 1.0))


def timeline_metrics(
    jobs: list[Job], iteration_s: float, profile: ModelProfile, n: int, buckets: int
) -> dict[str, Any]:
    """A Record's metrics (DESIGN §5) from one worker's jobs: the simulator's timeline, or
    an emulated worker's iteration as the wall clock timed it (`cluster.worker`)."""
    metrics: dict[str, Any] = breakdown(jobs, iteration_s)  # type: ignore[arg-type]
    samples = profile.samples_per_iteration
    throughput = n * samples / iteration_s if iteration_s > 0 else 0.0
    metrics.update(
        inter_comm_s=sum(j.dur_s for j in jobs if j.kind == "comm" and j.stream == "inter_tx"),
        iteration_s=iteration_s,
        throughput=throughput,
        scaling_factor=(
            throughput / (n * samples / profile.one_gpu_s) if profile.one_gpu_s > 0 else 1.0
        ),
        wire_bytes=int(round(sum(j.bytes for j in jobs))),
        sample_unit=profile.sample_unit,
        tensors=len(profile.tensors),
        buckets=buckets if n > 1 else 0,
        model_mib=sum(t.numel for t in profile.tensors) * 4 / 2**20,
    )
    return metrics


def _simulate(
    profile: ModelProfile,
    costs: Costs,
    plan: Plan,
    keep_jobs: bool,
    payloads: Sequence[Sequence[float | None] | None] | None = None,
    sync: Sync | None = None,
) -> Result:
    x = SimContext(costs, [t.numel for t in profile.tensors])

    def lowering(bucket: list[int], option: Any, b: int, size: float | None) -> Lowering:
        # this bucket's payloads as they were on the wire, in place of the size model's
        steps, cut = lower(option, bucket, b, x, size, None if payloads is None else payloads[b])
        return as_program(steps, cut)

    extra = costs.iteration_overhead_s
    watch = Recorder(profile, extra) if sync is None else Synced(profile, sync, extra)
    iteration_s = Timeline(profile, costs).run(plan, lowering, watch)
    jobs = watch.jobs
    metrics = timeline_metrics(jobs, iteration_s, profile, costs.gpus, len(plan.buckets))
    return Result(iteration_s, metrics, jobs if keep_jobs else [])
