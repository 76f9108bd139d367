"""A per-tensor compressor run over a fusion bucket (issue #14: low-rank compressors in
emulation). An emulated worker holds a bucket's gradient as one 1-D vector, while
PowerSGD and ACP-SGD factor each tensor's own matrix (ACP-SGD §IV-C: conv weights as
(out, in·k·k), vectors uncompressed). `Fused` cuts the bucket back into its tensors,
compresses each under its own key and shape, and puts every tensor of every payload
into one fp32 vector: one allreduce per bucket and round, as Power-SGD* and ACP-SGD fuse
their factors (ACP-SGD §III-A, §IV-B: tensor fusion), whose bytes are the sum of the
tensors' payloads (`wire_bytes_for_shape`, what the simulator charges). The summed
vector is cut back the same way to decompress each tensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from gcbench.compress.base import Compressor, Payload

Layout = list[tuple[int, list[tuple[str, tuple[int, ...]]], dict[str, Any]]]


class Fused(Compressor):
    """`inner` over buckets: `shapes[key]` are the shapes of the tensors of the bucket
    compressed under `key`, in the bucket's order (tensor i's key is `key#i`)."""

    name = "fused"
    family = "lowrank"
    additive = True
    splittable = False
    data_dependent = False

    def __init__(self, inner: Compressor, shapes: Mapping[str, Sequence[tuple[int, ...]]]):
        self.inner = inner
        self.rounds = inner.rounds  # type: ignore[misc]
        self.shapes = {k: [tuple(int(d) for d in s) for s in v] for k, v in shapes.items()}

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.detach().reshape(-1)
        prevs = self._unpack(prev) if prev is not None else None
        parts: list[Payload] = []
        at = 0
        for i, shape in enumerate(self.shapes[key]):
            n = math.prod(shape)
            before = None if prevs is None else prevs[i]
            tensor = x[at : at + n].view(shape)
            parts.append(self.inner.compress(tensor, f"{key}#{i}", step, before))
            at += n
        if at != x.numel():
            raise ValueError(f"fused: {key!r} holds {at} values, its gradient {x.numel()}")
        layout: Layout = [
            (p.round, [(name, tuple(t.shape)) for name, t in p.tensors.items()], dict(p.info))
            for p in parts
        ]
        pieces = [t.reshape(-1).float() for p in parts for t in p.tensors.values()]
        flat = torch.cat(pieces) if pieces else x.new_zeros(0, dtype=torch.float32)
        info = {
            "layout": layout,
            "shapes": [p.shape for p in parts],
            "dtypes": [p.dtype for p in parts],
        }
        rnd = parts[0].round if parts else 0
        return Payload({"flat": flat}, grad.shape, grad.dtype, rnd, info)

    def _unpack(self, payload: Payload) -> list[Payload]:
        """The tensors' payloads, as views of the flat vector; a summed vector's
        `reduced` count goes to each (what lets low-rank keep its aggregated factors)."""
        flat = payload.tensors["flat"]
        reduced = payload.info.get("reduced")
        out, at = [], 0
        info = payload.info
        for (rnd, named, extra), shape, dtype in zip(
            info["layout"], info["shapes"], info["dtypes"], strict=True
        ):
            tensors = {}
            for name, tshape in named:
                n = math.prod(tshape)
                tensors[name] = flat[at : at + n].view(tshape)
                at += n
            extra = dict(extra)
            if reduced:
                extra["reduced"] = reduced
            out.append(Payload(tensors, shape, dtype, rnd, extra))
        return out

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        parts = [
            self.inner.decompress(p, f"{key}#{i}", step).reshape(-1)
            for i, p in enumerate(self._unpack(payload))
        ]
        return torch.cat(parts) if parts else torch.zeros(0)

    def reduce(self, payloads: list[Payload]) -> Payload:
        """The elementwise sum of the flat vectors (low-rank payloads are additive),
        marked `reduced` with the number of workers' payloads summed."""
        first = payloads[0]
        total = first.tensors["flat"].clone()
        for p in payloads[1:]:
            total += p.tensors["flat"]
        info = dict(first.info)
        info["reduced"] = sum(int(p.info.get("reduced", 1)) for p in payloads)
        return Payload({"flat": total}, first.shape, first.dtype, first.round, info)

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        return self.decompress(self.reduce(payloads), key, step)

    def wire_bytes(self, numel: int, step: int) -> int:
        return self.inner.wire_bytes(numel, step)
