"""Named strategies as plans: what the papers compare, over the options of
`gcbench.sim.options`.

A builder turns a cell's profile and costs into the steps of one period: a plan (buckets
and an option each) and the costs it runs with. Most strategies give every fusion bucket
the same option and have a period of one step; ACP-SGD alternates P and Q (two steps),
COVAP selects a different subset of shards each step (I steps). Periodic strategies report
the mean over one period (DESIGN §5 Metrics).

- `fp32`, `fp32-2level`, `fp16`, `allgather`, `allgather-2level` (HiTopKComm),
  `allreduce` (additive compressors), `ps`, `byteps`, `byteps-compress`: one option on
  every bucket (`options.PRESETS`).
- `powersgd`: Power-SGD* (ACP-SGD §V-A: PowerSGD with wait-free backpropagation and
  tensor fusion, "implemented on PyTorch's communication hook"), as torch's
  `powerSGD_hook` runs each bucket: orthogonalise every reused Q and compute P = M Q;
  allreduce the bucket's uncompressed tensors (vectors), then the Ps; orthogonalise every
  P, compute Q = Mᵀ P and allreduce the Qs; decompress. Three allreduces and two QRs per
  matrix a step. Its last callback calls `torch.cuda.synchronize`, and a NCCL future is
  marked complete as soon as its collective is enqueued (ProcessGroupNCCL's
  `collective`), so `then` runs its callbacks inline (pytorch/pytorch#48499, #48561) on
  the thread that attaches them, the autograd thread calling the hook: backward stops
  until the bucket is synchronised, so no bucket overlaps the backward
  (`Costs.synchronous`). ACP-SGD §IV-A: in Power-SGD "the communication tasks will block
  the subsequent back-propagation operations"; §V-C calls it Power-SGD*'s "performance
  interference" on large models. The emulator runs the same order
  (`cluster.fused.HookFused`) and, on the wall clock, holds backward for each bucket;
  its PowerSGD orthogonalises P only (the reused Q's QR leaves the aggregate unchanged),
  so its wall clock lacks the hook's second QR.
- `acpsgd`: ACP-SGD (Algorithm 2): one allreduce per step, P on even steps, Q on odd ones.
- `covap`: COVAP (§III): the fusion buckets cut into shards (§III-C), shard t
  allreduced uncompressed at step k iff (t + k) mod I == 0 (§III-A).
- `hipress`: HiPress (SOSP'21): tensors cut into partitions of at most 4,096,000 bytes
  (small tensors fused up to that), each synchronised by gather and broadcast with
  rotating roots (partition i's root is worker i mod n), compressed only when its
  compressed synchronisation — compress, gather, the root's n-1 decompressions and
  recompression, broadcast, decompress — is estimated faster than the uncompressed
  reduce and broadcast (the cost model on the partition alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gcbench.comm import PARTITION_BYTES
from gcbench.config.models import Cell
from gcbench.config.strategies import PLANNERS
from gcbench.sim.iteration import Costs, Plan, _Ctx, _lower, fuse
from gcbench.sim.options import PRESETS, Option
from gcbench.zoo.profile import ModelProfile


@dataclass(frozen=True)
class Step:
    """One step of a strategy's period."""

    plan: Plan
    costs: Costs
    weight: float = 1.0
    planner_s: float = 0.0  # wall time of the planner that made this plan (gcbench.plan)
    planner_parts: dict[str, float] = field(default_factory=dict)  # planner_s by stage


Builder = Callable[[Cell, ModelProfile, Costs], list[Step]]
BUILDERS: dict[str, Builder] = {}

ALLREDUCE_PAYLOADS = Option.parse("gc flat:ar* gd")
HIPRESS_COMPRESSED = Option.parse("gc flat:ga* gd gc flat:bc* gd")
HIPRESS_DENSE = Option.parse("flat:red flat:bc")


def register(name: str) -> Callable[[Builder], Builder]:
    def wrap(builder: Builder) -> Builder:
        if name in BUILDERS:
            raise ValueError(f"strategy {name!r} registered twice")
        BUILDERS[name] = builder
        return builder

    return wrap


def _uniform(option: Option) -> Builder:
    def build(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
        return [Step(Plan.uniform(fuse(profile, cell.fusion), option), costs)]

    return build


for _name, _option in PRESETS.items():
    register(_name)(_uniform(_option))


@register("powersgd")
def _powersgd(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    plan = Plan.uniform(fuse(profile, cell.fusion), ALLREDUCE_PAYLOADS)
    # the hook synchronises only where CUDA is (its `torch.cuda.is_available()` guard);
    # on CPU workers (gloo) its callbacks run as each allreduce ends, off the autograd thread
    return [Step(plan, torch_hook_costs(costs, synchronous=cell.device != "cpu"))]


def torch_hook_costs(costs: Costs, synchronous: bool = True) -> Costs:
    """PowerSGD's costs as torch's `powerSGD_hook` incurs them: a first allreduce of the
    bucket's uncompressed tensors, then P's, then Q's (the compressor's two rounds carry
    P, then Q with the uncompressed tensors); each matrix's reused Q orthogonalised as
    well as its P (warm start); on GPUs the hook synchronous (module docstring)."""
    assert costs.tensor_round_bytes is not None and len(costs.tensor_round_bytes) == 2
    p, q = costs.tensor_round_bytes
    raw = tuple(b if a == 0 else 0.0 for a, b in zip(p, q, strict=True))
    factors = tuple(0.0 if a == 0 else b for a, b in zip(p, q, strict=True))
    extra = costs.tensor_compress_s
    return replace(
        costs,
        tensor_round_bytes=(raw, p, factors),
        tensor_compress_s=None if extra is None else tuple(2 * s for s in extra),
        synchronous=synchronous,
    )


@register("acpsgd")
def _acpsgd(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    from gcbench.sim.costs import round_bytes

    plan = Plan.uniform(fuse(profile, cell.fusion), ALLREDUCE_PAYLOADS)
    return [
        Step(plan, replace(costs, tensor_round_bytes=round_bytes(cell, profile, step)), 0.5)
        for step in (0, 1)  # P, then Q
    ]


@register("covap")
def _covap(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    from gcbench.compress.covap import selected, shards

    interval = int(cell.compressor.params()["interval"])
    buckets, elements = [], []
    fused = fuse(profile, cell.fusion)
    sizes = [sum(profile.tensors[i].numel for i in b) for b in fused]
    for bucket, size, pieces in zip(fused, sizes, shards(sizes, interval), strict=True):
        for _ in range(pieces):
            buckets.append(bucket)
            elements.append(size / pieces)
    fp32 = PRESETS["fp32"]
    return [
        Step(
            Plan(
                buckets,
                [fp32 if selected(t, step, interval) else None for t in range(len(buckets))],
                elements,
            ),
            costs,
            1 / interval,
        )
        for step in range(interval)
    ]


def hipress_partitions(
    profile: ModelProfile, partition_bytes: float = PARTITION_BYTES
) -> tuple[list[list[int]], list[float]]:
    """HiPress's partitions in gradient order: a tensor larger than a partition is cut
    into equal pieces of at most `partition_bytes`; smaller ones are fused up to it."""
    buckets: list[list[int]] = []
    elements: list[float] = []
    current: list[int] = []
    filled = 0.0
    for i, t in enumerate(profile.tensors):
        size = 4.0 * t.numel
        if size > partition_bytes:
            if current:
                buckets.append(current)
                elements.append(filled / 4)
                current, filled = [], 0.0
            pieces = math.ceil(size / partition_bytes)
            buckets += [[i]] * pieces
            elements += [t.numel / pieces] * pieces
            continue
        if current and filled + size > partition_bytes:
            buckets.append(current)
            elements.append(filled / 4)
            current, filled = [], 0.0
        current.append(i)
        filled += size
    if current:
        buckets.append(current)
        elements.append(filled / 4)
    return buckets, elements


@register("hipress")
def _hipress(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
    buckets, elements = hipress_partitions(profile)
    ctx = _Ctx(costs, [t.numel for t in profile.tensors])
    options: list[Option | None] = []
    for b, (bucket, e) in enumerate(zip(buckets, elements, strict=True)):
        estimate = {
            o: sum(step[2] for step in _lower(o, bucket, b, ctx, e)[0])
            for o in (HIPRESS_DENSE, HIPRESS_COMPRESSED)
        }
        options.append(min(estimate, key=lambda o: (estimate[o], o is HIPRESS_COMPRESSED)))
    return [Step(Plan(buckets, options, elements), costs)]


# The planner's strategies (`gcbench.plan.strategies`: bytecomp, bytecomp-greedy,
# upper-bound, brute-force), imported when first used.
def _planned(name: str) -> Builder:
    def build(cell: Cell, profile: ModelProfile, costs: Costs) -> list[Step]:
        from gcbench.plan import strategies as planned

        builder: Builder = getattr(planned, name.replace("-", "_"))
        return builder(cell, profile, costs)

    return build


for _name in sorted(PLANNERS):
    register(_name)(_planned(_name))
