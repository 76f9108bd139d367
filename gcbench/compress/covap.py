"""COVAP (covap.txt §III): a coarse-grained filter over whole communication tensors.

- Selection (§III-A): tensor t is communicated at step k iff (t + k) mod I == 0, so each
  tensor goes once every I steps and one tensor in I goes each step; every worker decides
  alone, from the step number and the tensor's index.
- Interval (§III-B): I = ceil(CCR), the computation-to-communication ratio; a parameter here.
- Sharding (§III-C, `shards`): a tensor with at least twice the median tensor's elements is
  sliced evenly into floor(numel / median) pieces, at most I.
- Error feedback (§III-D): unsent tensors' gradients accumulate in a residual scaled by
  min(init + floor(step / ascend_steps) * range, 1) (`ef_coefficient`), used with
  `create_memory("residual", coefficient=covap.ef_coefficient)`.

A selected tensor is sent uncompressed (fp32) and allreduced, so payloads are additive; an
unselected one sends an empty payload and decompresses to zeros.

Tensor indices: a key that is an integer (or ends in `#<int>`) is its own index; other keys
get indices in the order this compressor first sees them, which is the same on every
worker as long as every worker compresses its tensors in the same order (gradient order).
"""

from __future__ import annotations

import statistics

import torch
from torch import Tensor

from gcbench.compress.base import Compressor, Payload
from gcbench.compress.registry import register


def selected(index: int, step: int, interval: int) -> bool:
    """§III-A: tensor `index` is communicated at `step` iff (index + step) mod I == 0."""
    return (index + step) % interval == 0


def shards(numels: list[int], interval: int, median: float | None = None) -> list[int]:
    """§III-C: how many pieces each tensor is sliced into. `median` defaults to the plain
    median of `numels` (the paper's worked example on VGG-19 uses 5,590,260, which is not
    the median of its Table V sizes; pass it to reproduce the paper's 26 pieces)."""
    if not numels:
        return []
    m = statistics.median(numels) if median is None else median
    out = []
    for n in numels:
        parts = int(n // m) if m > 0 else 1
        out.append(min(parts, interval) if parts >= 2 else 1)
    return out


@register
class Covap(Compressor):
    name = "covap"
    family = "covap"
    additive = True
    splittable = False
    data_dependent = False

    def __init__(
        self,
        interval: int = 4,
        ef_init: float = 0.5,
        ef_ascend_steps: int = 1000,
        ef_ascend_range: float = 0.1,
    ):
        self.interval = interval
        self.ef_init = ef_init
        self.ef_ascend_steps = ef_ascend_steps
        self.ef_ascend_range = ef_ascend_range
        self._index: dict[str, int] = {}

    def ef_coefficient(self, step: int) -> float:
        """§III-D: min(init + floor(step / ascend_steps) * range, 1)."""
        return min(self.ef_init + (step // self.ef_ascend_steps) * self.ef_ascend_range, 1.0)

    def index(self, key: str) -> int:
        tail = key.rsplit("#", 1)[-1]
        if tail.isdigit():
            return int(tail)
        return self._index.setdefault(key, len(self._index))

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        bufs = self.buffers(key, step)
        if selected(self.index(key), step, self.interval):
            x = grad.detach().reshape(-1)
            values = bufs.get("values", x.numel(), torch.float32, x.device).copy_(x)
        else:
            values = bufs.get("empty", 0, torch.float32, grad.device)
        return Payload({"values": values}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        values = payload.tensors["values"]
        if values.numel() != payload.numel:  # not sent this step
            return torch.zeros(payload.shape, dtype=payload.dtype, device=values.device)
        return values.to(payload.dtype, copy=True).reshape(payload.shape)

    def reduce(self, payloads: list[Payload]) -> Payload:
        first = payloads[0]
        total = first.tensors["values"].clone()
        for p in payloads[1:]:
            total += p.tensors["values"]
        return Payload({"values": total}, first.shape, first.dtype)

    def wire_bytes(self, numel: int, step: int) -> int:
        """The mean over one period of I steps (which steps send depends on the key:
        `payload_bytes` is exact per key)."""
        return 4 * numel // self.interval

    def payload_bytes(self, shape: tuple[int, ...], key: str, step: int) -> int:
        n = 1
        for s in shape:
            n *= s
        return 4 * n if selected(self.index(key), step, self.interval) else 0

    def reset(self) -> None:
        super().reset()
        self._index.clear()
