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
    from gcbench.zoo.traces import ModelTrace, Op

# The optimizer step: torch's SGD with momentum, its default multi-tensor ("foreach")
# implementation on CUDA (torch/optim/sgd.py `_multi_tensor_sgd`): momentum *= m
# (`_foreach_mul_`: read + write), momentum += grad (`_foreach_add_`: 3 passes), weight
# -= lr x momentum (3 passes): 8 passes over fp32 values. Each foreach op launches a
# kernel per group of tensors and per 320 chunks of 65,536 elements
# (aten/src/ATen/native/cuda/MultiTensorApply.cuh: `kChunkSize`, `depth_to_max_tensors`
# {110, 64, ...} for 1 and 2 tensor lists, `depth_to_max_blocks` 320).
UPDATE_PASSES = 8
UPDATE_OPS = ((1, 110), (2, 64), (2, 64))  # per foreach op: (tensor lists, tensors a launch)
UPDATE_CHUNK, UPDATE_BLOCKS = 65536, 320
# GradScaler's step under AMP: unscale every gradient and check it for inf/NaN, one fused
# read + write (`torch.amp.GradScaler.unscale_`, `_amp_foreach_non_finite_check_and_unscale_`)
AMP_UPDATE_PASSES = 2


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
    # One GPU's iteration when this profile carries what only a worker among many pays
    # (the slowest worker's jitter, DDP's copies into its buckets: `backends.simulate.
    # cell_profile`); None: `compute_s`. Scaling factors divide by it.
    single_gpu_s: float | None = None

    @property
    def backward_s(self) -> float:
        return sum(t.backward_s for t in self.tensors)

    @property
    def compute_s(self) -> float:
        """One GPU's iteration with no communication: forward + backward + update."""
        return self.forward_s + self.backward_s + self.update_s

    @property
    def one_gpu_s(self) -> float:
        """One GPU's iteration, the scaling factor's baseline (`single_gpu_s`)."""
        return self.compute_s if self.single_gpu_s is None else self.single_gpu_s

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


def op_seconds(
    flops: float, nbytes: float, kind: str, kernels: int, dev: Device, precision: str = "fp32"
) -> float:
    """Roofline time of one operation's work on `dev` at `precision` plus its kernels'
    overheads (launch and tail: at small batches, most of an operation's time)."""
    if kernels == 0:
        return 0.0
    compute = flops / dev.flops_per_s(kind, precision) if flops else 0.0
    memory = nbytes / (dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency)
    return max(compute, memory) + kernels * dev.kernel_overhead_us * 1e-6


# Under autocast, matmuls and convolutions read and write half-precision activations and
# elementwise ops follow their inputs: every operation's traffic is counted at half. (The
# ops autocast keeps in fp32 — softmax, layer_norm, the losses — read half and write fp32;
# counting them at half is optimistic for models rich in them.)
AMP_TRAFFIC = 0.5


def _traffic(precision: str) -> float:
    return AMP_TRAFFIC if precision.startswith("amp-") else 1.0


def forward_seconds(op: Op, dev: Device, precision: str = "fp32") -> float:
    return op_seconds(op.flops, op.nbytes * _traffic(precision), op.kind, 1, dev, precision)


def backward_seconds(op: Op, dev: Device, precision: str = "fp32") -> float:
    return op_seconds(op.bwd_flops, op.bwd_nbytes * _traffic(precision), op.kind,
                      op.bwd_kernels, dev, precision)  # fmt: skip


def update_seconds(numels: list[int], dev: Device, precision: str = "fp32") -> float:
    """The optimizer step over tensors of `numels` elements (`UPDATE_PASSES`, `UPDATE_OPS`);
    under AMP, GradScaler's unscale first (`AMP_UPDATE_PASSES`). Parameters, gradients and
    momentum stay fp32 at every precision (torch.amp keeps fp32 parameters)."""
    chunks = sum(-(-n // UPDATE_CHUNK) for n in numels)
    launches = sum(
        max(-(-len(numels) // per), -(-chunks // UPDATE_BLOCKS)) for _, per in UPDATE_OPS
    )
    passes = UPDATE_PASSES
    if precision.startswith("amp-"):
        passes += AMP_UPDATE_PASSES
        launches += max(-(-len(numels) // 110), -(-chunks // UPDATE_BLOCKS))
    return (
        passes * sum(numels) * 4 / (dev.mem_bandwidth_gbs * 1e9 * dev.memory_efficiency)
        + launches * dev.kernel_overhead_us * 1e-6
    )


def profile_from_trace(trace: ModelTrace, device: str, precision: str = "fp32") -> ModelProfile:
    dev = DEVICES[device]
    info = MODELS[trace.name]
    forward_s = sum(forward_seconds(op, dev, precision) for op in trace.ops)
    # done[i]: backward time elapsed when op i's backward has finished (ops run in reverse).
    done: list[float] = [0.0] * (len(trace.ops) + 1)
    for i in range(len(trace.ops) - 1, -1, -1):
        done[i] = done[i + 1] + backward_seconds(trace.ops[i], dev, precision)
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
    return ModelProfile(
        trace.name,
        trace.batch_size,
        trace.seq_len,
        info.sample_unit,
        device,
        forward_s,
        update_seconds([t.numel for t in tensors], dev, precision),
        tuple(tensors),
        notes=() if precision == "fp32" else (f"precision {precision}",),
    )


@lru_cache(maxsize=64)
def cached_trace(name: str, batch_size: int, seq_len: int | None) -> ModelTrace:
    """The model's trace: from the cache on disk (`zoo.traces`: no torch), else traced
    (torch, the meta device) and kept there."""
    from gcbench.zoo.traces import read_cached, write_cached

    trace = read_cached(name, batch_size, seq_len)
    if trace is None:
        from gcbench.zoo.trace import trace_model

        trace = trace_model(name, batch_size, seq_len)
        write_cached(trace)
    return trace


@lru_cache(maxsize=256)
def model_profile(
    name: str,
    batch_size: int | None = None,
    device: str = "v100",
    seq_len: int | None = None,
    precision: str = "fp32",
) -> ModelProfile:
    """The FLOP-based profile of a zoo model on a device from the device table, trained
    at `precision` (`devices.PRECISIONS`)."""
    info = MODELS[name]
    batch = batch_size or info.batch_size
    seq = seq_len or info.seq_len
    return profile_from_trace(cached_trace(name, batch, seq), device, precision)
