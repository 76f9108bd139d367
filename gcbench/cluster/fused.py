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
        prevs = self._unpack(prev) if prev is not None else None
        parts = [
            self.inner.compress(t, f"{key}#{i}", step, None if prevs is None else prevs[i])
            for i, t in enumerate(self._views(grad, key))
        ]
        return self._pack(parts, grad)

    def _views(self, grad: Tensor, key: str) -> list[Tensor]:
        """The bucket's gradient cut into its tensors, in the bucket's order (views)."""
        x = grad.detach().reshape(-1)
        views, at = [], 0
        for shape in self.shapes[key]:
            n = math.prod(shape)
            views.append(x[at : at + n].view(shape))
            at += n
        if at != x.numel():
            raise ValueError(f"{self.name}: {key!r} holds {at} values, its gradient {x.numel()}")
        return views

    def _pack(self, parts: list[Payload], grad: Tensor) -> Payload:
        """Every tensor of the parts' payloads in one fp32 vector, with the layout that
        cuts it back (`_unpack`)."""
        x = grad.detach().reshape(-1)
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


class HookFused(Fused):
    """PowerSGD over buckets in the order torch's `powerSGD_hook` runs them (the
    `powersgd` strategy, Power-SGD*: `strategies.lowrank`): round 0 the bucket's uncompressed
    tensors (vectors, and matrices whose factors would not be smaller), round 1 every
    compressed matrix's P, round 2 its Q from the summed P. The uncompressed tensors are
    not sent again with Q: their sum, kept from round 0, is what decompressing a summed
    round-2 payload gives them (a worker's own payload: its own values, for error
    feedback). The same bytes as `Fused` over PowerSGD's two rounds, in three
    allreduces."""

    name = "fused-hook"

    def __init__(self, inner: Compressor, shapes: Mapping[str, Sequence[tuple[int, ...]]]):
        super().__init__(inner, shapes)
        if inner.rounds != 2 or not hasattr(inner, "rank"):
            raise ValueError(f"the hook's order is PowerSGD's, not {inner.name}'s")
        self.rounds = 3  # type: ignore[misc]
        self._own: dict[str, Tensor] = {}  # this step's round-0 vector, as compressed
        self._sum: dict[str, Tensor] = {}  # and as summed (round 1 is given it)

    def _raw(self, key: str) -> list[bool]:
        """Which of the bucket's tensors go uncompressed."""
        from gcbench.compress.lowrank import lowrank_view

        rank = int(self.inner.rank)  # type: ignore[attr-defined]
        return [lowrank_view(shape, rank) is None for shape in self.shapes[key]]

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        if prev is None:  # round 0: the uncompressed tensors
            views = zip(self._views(grad, key), self._raw(key), strict=True)
            pieces = [t.reshape(-1).float() for t, raw in views if raw]
            flat = torch.cat(pieces) if pieces else grad.new_zeros(0, dtype=torch.float32)
            self._own[key] = flat.clone()
            return Payload({"flat": flat}, grad.shape, grad.dtype, 0, {"hook": "raw"})
        if prev.round == 0:  # round 1: P of every matrix (PowerSGD's round 0)
            self._sum[key] = prev.tensors["flat"].clone()
            p = super().compress(grad, key, step)
            return Payload(p.tensors, p.shape, p.dtype, 1, p.info)
        if prev.round != 1:
            raise ValueError(f"fused-hook: prev must be round 0 or 1, got {prev.round}")
        # round 2: Q of every matrix from the summed P; the uncompressed tensors left out
        prevs = self._unpack(Payload(prev.tensors, prev.shape, prev.dtype, 0, prev.info))
        views = zip(self._views(grad, key), self._raw(key), strict=True)
        parts = [
            Payload({}, t.shape, grad.dtype, 1, {"hook_raw": True})  # sent in round 0
            if raw
            else self.inner.compress(t, f"{key}#{i}", step, prevs[i])
            for i, (t, raw) in enumerate(views)
        ]
        p = self._pack(parts, grad)
        return Payload(p.tensors, p.shape, p.dtype, 2, p.info)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        if payload.round != 2:
            raise ValueError("fused-hook decompresses the round-2 payload (Q)")
        values = self._sum[key] if payload.info.get("reduced") else self._own[key]
        out, at = [], 0
        for i, p in enumerate(self._unpack(payload)):
            if p.info.get("hook_raw"):
                n = math.prod(p.shape)
                p = Payload({"raw": values[at : at + n].view(p.shape)}, p.shape, p.dtype, 1)
                at += n
            out.append(self.inner.decompress(p, f"{key}#{i}", step).reshape(-1))
        return torch.cat(out) if out else torch.zeros(0)

    def reset(self) -> None:
        super().reset()
        self._own.clear()
        self._sum.clear()
