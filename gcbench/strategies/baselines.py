"""The strategies the papers compare that give every bucket a fixed option, over the
options of `gcbench.sim.options`, and HiPress.

- `fp32`, `fp32-2level`, `fp16`, `allgather`, `allgather-2level` (HiTopKComm),
  `allreduce` (additive compressors), `ps`, `byteps`, `byteps-compress`: one option on
  every fusion bucket (`options.PRESETS`), a period of one step.
- `hipress`: HiPress (SOSP'21): tensors cut into partitions of at most 4,096,000 bytes
  (small tensors fused up to that), each synchronised by gather and broadcast with
  rotating roots (partition i's root is worker i mod n), compressed only when its
  compressed synchronisation — compress, gather, the root's n-1 decompressions and
  recompression, broadcast, decompress — is estimated faster than the uncompressed
  reduce and broadcast (the cost model on the partition alone).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from gcbench.comm import PARTITION_BYTES
from gcbench.sim.iteration import Costs, Plan, SimContext, estimate_s, fuse
from gcbench.sim.options import PRESETS, Option
from gcbench.strategies.base import Step, Strategy, register
from gcbench.zoo.profile import ModelProfile


class Uniform(Strategy):
    """One option (`option`, a preset of `sim.options.PRESETS` by default: the name's)
    on every fusion bucket."""

    preset: ClassVar[str | None] = None  # the PRESETS entry; default: the strategy's name

    @property
    def option(self) -> Option:
        return PRESETS[self.preset or self.name]

    def build(self, cell: Any, profile: ModelProfile, costs: Costs) -> list[Step]:
        return [Step(Plan.uniform(fuse(profile, cell.fusion), self.option), costs)]


@register
class Fp32(Uniform):
    name = "fp32"
    description = "ring allreduce over every GPU (PyTorch DDP, Horovod)"
    source = "ByteComp §5.1 (the FP32 baseline), Table 2"


@register
class Fp32TwoLevel(Uniform):
    name = "fp32-2level"
    description = (
        "hierarchical allreduce: intra reduce-scatter, inter allreduce on G rings, intra "
        "allgather"
    )
    source = "ByteComp §4.2.1, Dimension 3 (hierarchical communication)"


@register
class Fp16(Uniform):
    name = "fp16"
    description = "fp16 cast after backward, allreduce, cast back"
    source = "COVAP §II-C, Table III (FP16)"


@register
class Allgather(Uniform):
    name = "allgather"
    description = "the compressor's payloads allgathered over every GPU (ByteComp Table 2)"
    source = "ByteComp Table 2"
    compressor = "any"


@register
class AllgatherTwoLevel(Uniform):
    name = "allgather-2level"
    description = (
        "HiTopKComm: intra reduce-scatter, compress 1/G, inter allgather, intra allgather"
    )
    source = "HiTopKComm, as ByteComp §5.1 compares it"
    compressor = "any"
    aliases = ("hitopkcomm",)


@register
class Allreduce(Uniform):
    name = "allreduce"
    description = "the compressor's payloads allreduced over every GPU (additive compressors)"
    source = "ByteComp §4.2.1, Dimension 3 (for additive payloads: gcbench's addition)"
    compressor = "additive"


@register
class ParameterServer(Uniform):
    name = "ps"
    description = (
        "parameter server: intra reduce-scatter, push/pull to the CPU servers, intra "
        "allgather"
    )
    source = "BytePS slides (PS baseline)"
    servers = "required"


@register
class BytePS(Uniform):
    name = "byteps"
    description = (
        "BytePS: traffic split between the CPU servers and an allreduce among the GPU "
        "machines (k = 0: allreduce, k = n: PS)"
    )
    source = "BytePS slides (the optimal split)"
    servers = "optional"


@register
class BytePSCompress(Uniform):
    name = "byteps-compress"
    description = "BytePS with compression at the summation servers, inter-machine only"
    source = "ByteComp §5.1 (the BytePS-Compress baseline)"
    compressor = "any"
    servers = "required"


HIPRESS_COMPRESSED = Option.parse("gc flat:ga* gd gc flat:bc* gd")
HIPRESS_DENSE = Option.parse("flat:red flat:bc")


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


@register
class HiPress(Strategy):
    name = "hipress"
    description = (
        "HiPress: partitions of at most 4,096,000 bytes, each compressed only when that is "
        "estimated faster; gather + broadcast with rotating roots"
    )
    source = "HiPress (SOSP'21), as ByteComp §5.1 compares it"
    compressor = "any"

    def build(self, cell: Any, profile: ModelProfile, costs: Costs) -> list[Step]:
        buckets, elements = hipress_partitions(profile)
        ctx = SimContext(costs, [t.numel for t in profile.tensors])  # its caches shared
        options: list[Option | None] = []
        for b, (bucket, e) in enumerate(zip(buckets, elements, strict=True)):
            estimate = {
                o: estimate_s(o, bucket, b, ctx, e)
                for o in (HIPRESS_DENSE, HIPRESS_COMPRESSED)
            }
            options.append(min(estimate, key=lambda o: (estimate[o], o is HIPRESS_COMPRESSED)))
        return [Step(Plan(buckets, options, elements), costs)]
