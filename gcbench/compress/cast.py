"""Casts: none (fp32 on the wire), fp16, bf16, and 3LC's 8-bit baseline (int8).

`none`, `fp16` and `bf16` are additive (payloads sum elementwise; the sum is taken in fp32
and cast back) and splittable (split along the flattened tensor). `int8` is 3LC's 8-bit
quantization (3LC §4.3 baseline): 255 levels, q = round(x / max|x| · 127) in [−127, 127],
with the per-tensor scale max|x| / 127 as an fp32 on the wire; workers' scales differ, so
int8 payloads are not additive.

Payloads are the key's buffers (`base.py`): a cast writes into a preallocated tensor of
the wire dtype, one pass that reads 4 bytes and writes 2 an element for fp16 (a plain copy
writes 4). `decompress` returns a tensor of its own, never the payload's buffer.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from gcbench.compress.base import Compressor, Payload
from gcbench.compress.registry import register


class _Cast(Compressor):
    family = "cast"
    additive = True
    splittable = True
    wire_dtype: ClassVar[torch.dtype]

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.detach().reshape(-1)
        values = self.buffers(key, step).get("values", x.numel(), self.wire_dtype, x.device)
        values.copy_(x)  # never aliases the caller's gradient
        return Payload({"values": values}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        values = payload.tensors["values"]
        return values.to(payload.dtype, copy=True).reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return numel * torch.tensor([], dtype=self.wire_dtype).element_size()

    def reduce(self, payloads: list[Payload]) -> Payload:
        total = payloads[0].tensors["values"].float().clone()
        for p in payloads[1:]:
            total += p.tensors["values"].float()
        first = payloads[0]
        return Payload({"values": total.to(self.wire_dtype)}, first.shape, first.dtype)

    def split(self, payload: Payload, n: int) -> list[Payload]:
        """n payloads holding consecutive pieces (sizes differ by at most one element);
        `info["offset"]` says where each piece starts."""
        values = payload.tensors["values"]
        sizes = [values.numel() // n + (i < values.numel() % n) for i in range(n)]
        out, offset = [], 0
        for piece in torch.split(values, sizes):
            out.append(
                Payload({"values": piece}, piece.shape, payload.dtype, info={"offset": offset})
            )
            offset += piece.numel()
        return out


@register
class NoCompression(_Cast):
    name = "none"
    wire_dtype = torch.float32


@register
class Fp16(_Cast):
    name = "fp16"
    wire_dtype = torch.float16


@register
class Bf16(_Cast):
    name = "bf16"
    wire_dtype = torch.bfloat16


@register
class Int8(Compressor):
    name = "int8"
    family = "cast"

    def __init__(self) -> None:
        self._tmp: Tensor | None = None  # fp32 scratch, consumed within one compress

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.detach().reshape(-1).float()
        n = x.numel()
        bufs = self.buffers(key, step)
        q = bufs.get("values", n, torch.int8, x.device)
        scale = bufs.get("scale", 1, torch.float32, x.device)
        if not n:
            scale.fill_(1.0)
            return Payload({"values": q, "scale": scale}, grad.shape, grad.dtype)
        lo, hi = torch.aminmax(x)  # max|x| without an |x| temporary
        peak = torch.maximum(hi, -lo)
        scale.copy_(torch.where(peak > 0, peak / 127, torch.ones_like(peak)))
        tmp = self._tmp
        if tmp is None or tmp.numel() < n or tmp.device != x.device:
            tmp = self._tmp = torch.empty(n, dtype=torch.float32, device=x.device)
        y = torch.div(x, scale, out=tmp[:n]).round_().clamp_(-127, 127)
        q.copy_(y)  # exact: integers in [-127, 127]
        return Payload({"values": q, "scale": scale}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        t = payload.tensors
        return (t["values"].float() * t["scale"]).to(payload.dtype).reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return numel + 4

    def reset(self) -> None:
        super().reset()
        self._tmp = None
