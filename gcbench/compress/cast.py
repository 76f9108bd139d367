"""Casts: none (fp32 on the wire), fp16, bf16, and 3LC's 8-bit baseline (int8).

`none`, `fp16` and `bf16` are additive (payloads sum elementwise; the sum is taken in fp32
and cast back) and splittable (split along the flattened tensor). `int8` is 3LC's 8-bit
quantization (3LC §4.3 baseline): 255 levels, q = round(x / max|x| · 127) in [−127, 127],
with the per-tensor scale max|x| / 127 as an fp32 on the wire; workers' scales differ, so
int8 payloads are not additive.
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
        values = grad.reshape(-1).to(self.wire_dtype)
        if values.data_ptr() == grad.data_ptr() and values.numel():
            values = values.clone()  # a payload must not alias the caller's gradient
        return Payload({"values": values}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        return payload.tensors["values"].to(payload.dtype).reshape(payload.shape)

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

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.reshape(-1).float()
        peak = x.abs().max() if x.numel() else torch.zeros((), device=x.device)
        scale = torch.where(peak > 0, peak / 127, torch.ones_like(peak)).reshape(1)
        q = torch.round(x / scale).clamp_(-127, 127).to(torch.int8)
        return Payload({"values": q, "scale": scale}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        t = payload.tensors
        return (t["values"].float() * t["scale"]).to(payload.dtype).reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return numel + 4
