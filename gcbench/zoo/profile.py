"""ModelProfile: a model's gradient tensors in ready order with per-tensor compute times.

FLOP-based profiles (this file) turn a traced forward pass (`gcbench.zoo.trace`) into
seconds on a device from the device table: each operation takes

    max(FLOPs / (peak x efficiency of its class), bytes / (memory bandwidth x efficiency))
    + a launch overhead per kernel,

forward and backward alike. Backward runs the operations in reverse; a tensor's
`backward_s` is the time from the previous gradient becoming ready to its own.
Measured profiles (`gcbench.zoo.measure`) and imported files (`gcbench.zoo.profile_io`)
produce the same `ModelProfile`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from gcbench.zoo.catalog import MODELS
from gcbench.zoo.devices import DEVICES, Device

if TYPE_CHECKING:
    from gcbench.zoo.trace import ModelTrace, Op

UPDATE_PASSES = 4  # SGD with momentum, fp32: read grad, read + write momentum, write weight


@dataclass(frozen=True)
class TensorProfile:
    name: str
    shape: tuple[int, ...]
    numel: int
    layer: str
    backward_s: float  # compute time from the previous gradient becoming ready to this one

    @property
    def nbytes(self) -> int:
        return self.numel * 4


@dataclass(frozen=True)
class ModelProfile:
    name: str
    batch_size: int
    seq_len: int | None
    sample_unit: str
    device: str  # a device-table entry, or where a measured/imported profile comes from
    forward_s: float
    update_s: float
    tensors: tuple[TensorProfile, ...]  # gradient-ready order: output layer first
    source: str = "flops"  # "flops" | "measured" | "imported"
    notes: tuple[str, ...] = field(default=())  # what was estimated rather than measured

    @property
    def backward_s(self) -> float:
        return sum(t.backward_s for t in self.tensors)

    @property
    def compute_s(self) -> float:
        """One GPU's iteration with no communication: forward + backward + update."""
        return self.forward_s + self.backward_s + self.update_s

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def samples_per_iteration(self) -> int:
        """Per GPU, in the model's unit (images, tokens or samples)."""
        return (
            self.batch_size * (self.seq_len or 1)
            if self.sample_unit == "tokens"
            else self.batch_size
        )


def op_seconds(flops: float, nbytes: float, kind: str, kernels: int, dev: Device) -> float:
    """Roofline time of one operation's work on `dev` plus its launch overheads."""
    if kernels == 0:
        return 0.0
    compute = flops / dev.flops_per_s(kind) if flops else 0.0
    memory = nbytes / (dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency)
    return max(compute, memory) + kernels * dev.kernel_overhead_us * 1e-6


def forward_seconds(op: Op, dev: Device) -> float:
    return op_seconds(op.flops, op.nbytes, op.kind, 1, dev)


def backward_seconds(op: Op, dev: Device) -> float:
    return op_seconds(op.bwd_flops, op.bwd_nbytes, op.kind, op.bwd_kernels, dev)


def update_seconds(numel: int, tensors: int, dev: Device) -> float:
    """SGD with momentum over every parameter, one kernel per tensor."""
    return (
        UPDATE_PASSES * numel * 4 / (dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency)
        + tensors * dev.kernel_overhead_us * 1e-6
    )


def profile_from_trace(trace: ModelTrace, device: str) -> ModelProfile:
    dev = DEVICES[device]
    info = MODELS[trace.name]
    forward_s = sum(forward_seconds(op, dev) for op in trace.ops)
    # done[i]: backward time elapsed when op i's backward has finished (ops run in reverse).
    done: list[float] = [0.0] * (len(trace.ops) + 1)
    for i in range(len(trace.ops) - 1, -1, -1):
        done[i] = done[i + 1] + backward_seconds(trace.ops[i], dev)
    order = sorted(range(len(trace.params)), key=lambda i: (-trace.params[i].first_use, -i))
    tensors: list[TensorProfile] = []
    previous = 0.0
    for i in order:
        p = trace.params[i]
        ready = done[p.first_use]
        numel = 1
        for s in p.shape:
            numel *= s
        tensors.append(TensorProfile(p.name, p.shape, numel, p.layer, ready - previous))
        previous = ready
    total = sum(t.numel for t in tensors)
    return ModelProfile(
        trace.name,
        trace.batch_size,
        trace.seq_len,
        info.sample_unit,
        device,
        forward_s,
        update_seconds(total, len(tensors), dev),
        tuple(tensors),
    )


@lru_cache(maxsize=64)
def cached_trace(name: str, batch_size: int, seq_len: int | None) -> ModelTrace:
    from gcbench.zoo.trace import trace_model

    return trace_model(name, batch_size, seq_len)


@lru_cache(maxsize=256)
def model_profile(
    name: str, batch_size: int | None = None, device: str = "v100", seq_len: int | None = None
) -> ModelProfile:
    """The FLOP-based profile of a zoo model on a device from the device table."""
    info = MODELS[name]
    batch = batch_size or info.batch_size
    seq = seq_len or info.seq_len
    return profile_from_trace(cached_trace(name, batch, seq), device)
