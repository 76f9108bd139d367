"""Sparsifiers: topk (exact), randomk (shared seed), dgc (sampled threshold), threshold.

Payloads hold fp32 values and int32 indices into the flattened tensor, except randomk:
its indices come from a generator seeded with a stable hash of (seed, key, step), so every
worker draws the same ones, they never cross the wire, and payloads are additive (the sum
of the workers' values is the payload of the summed gradient). Indices are drawn *with
replacement* (`torch.randint`, O(k) instead of a permutation's O(n)); a duplicate carries
the same value twice, and decompression writes it once.

k = ceil(ratio x numel) (at least 1 for a non-empty tensor) for topk, randomk and dgc.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gcbench.compress.base import Compressor, Payload, generator
from gcbench.compress.registry import register


def k_of(ratio: float, numel: int) -> int:
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


def _scatter(payload: Payload, values: Tensor, indices: Tensor) -> Tensor:
    out = torch.zeros(payload.numel, dtype=torch.float32, device=values.device)
    out[indices.long()] = values.float()
    return out.to(payload.dtype).reshape(payload.shape)


class _Sparse(Compressor):
    family = "sparsify"

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        return _scatter(payload, payload.tensors["values"], payload.tensors["indices"])

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        """Sum of the workers' sparse gradients (indices may differ between workers)."""
        first = payloads[0]
        out = torch.zeros(first.numel, dtype=torch.float32, device=first.tensors["values"].device)
        for p in payloads:
            out.index_add_(0, p.tensors["indices"].long(), p.tensors["values"].float())
        return out.to(first.dtype).reshape(first.shape)


@register
class TopK(_Sparse):
    """The k largest magnitudes, exactly (`torch.topk`)."""

    name = "topk"

    def __init__(self, ratio: float = 0.01):
        self.ratio = ratio

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.reshape(-1)
        k = k_of(self.ratio, x.numel())
        _, idx = (
            torch.topk(x.abs().float(), k, sorted=False) if k else (None, x.new_zeros(0).long())
        )
        values = x[idx].float()
        return Payload({"values": values, "indices": idx.int()}, grad.shape, grad.dtype)

    def wire_bytes(self, numel: int, step: int) -> int:
        return 8 * k_of(self.ratio, numel)


@register
class RandomK(_Sparse):
    """k indices drawn from a shared seed; only the values cross the wire."""

    name = "randomk"
    additive = True

    def __init__(self, ratio: float = 0.01, seed: int = 0):
        self.ratio = ratio
        self.seed = seed
        self._cache: dict[str, tuple[int, int, Tensor]] = {}  # key -> (step, numel, indices)

    def indices(self, key: str, step: int, numel: int, device: torch.device) -> Tensor:
        hit = self._cache.get(key)
        if hit is not None and hit[0] == step and hit[1] == numel:
            return hit[2]
        k = k_of(self.ratio, numel)
        g = generator("randomk", self.seed, key, step)
        idx = torch.randint(0, max(numel, 1), (k,), generator=g).to(device)
        self._cache[key] = (step, numel, idx)
        return idx

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.reshape(-1)
        idx = self.indices(key, step, x.numel(), x.device)
        return Payload({"values": x[idx].float()}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        idx = self.indices(key, step, payload.numel, payload.tensors["values"].device)
        return _scatter(payload, payload.tensors["values"], idx)

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        return self.decompress(self.reduce(payloads), key, step)

    def wire_bytes(self, numel: int, step: int) -> int:
        return 4 * k_of(self.ratio, numel)

    def reset(self) -> None:
        self._cache.clear()


@register
class DGC(_Sparse):
    """Deep Gradient Compression's selection (Lin et al. 2018 §3): estimate the top-k
    threshold on a random sample (default 1% of the elements), select every element at or
    above it; if that selects more than 2k (a poor estimate), keep the k largest of them.
    Momentum correction lives in `gcbench.compress.memory.DgcMemory`."""

    name = "dgc"
    data_dependent = True

    def __init__(self, ratio: float = 0.01, sample_ratio: float = 0.01, seed: int = 0):
        self.ratio = ratio
        self.sample_ratio = sample_ratio
        self.seed = seed

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.reshape(-1)
        n = x.numel()
        k = k_of(self.ratio, n)
        if k == 0:
            empty = x.new_zeros(0)
            return Payload(
                {"values": empty.float(), "indices": empty.int()}, grad.shape, grad.dtype
            )
        magnitude = x.abs().float()
        samples = min(n, max(k_of(self.sample_ratio, n), 1))
        g = generator("dgc", self.seed, key, step)
        sample = magnitude[torch.randint(0, n, (samples,), generator=g).to(x.device)]
        threshold = torch.topk(sample, k_of(self.ratio, samples), sorted=False)[0].min()
        idx = torch.nonzero(magnitude >= threshold).reshape(-1)
        if idx.numel() > 2 * k:
            idx = idx[torch.topk(magnitude[idx], k, sorted=False)[1]]
        return Payload({"values": x[idx].float(), "indices": idx.int()}, grad.shape, grad.dtype)

    def wire_bytes(self, numel: int, step: int) -> int:
        """Expected: k values and k indices (the sampled threshold aims at k)."""
        return 8 * k_of(self.ratio, numel)


@register
class Threshold(_Sparse):
    """Every element whose magnitude is at least `threshold` (Strom 2015)."""

    name = "threshold"
    data_dependent = True

    def __init__(self, threshold: float):
        self.threshold = threshold

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.reshape(-1)
        idx = torch.nonzero(x.abs() >= self.threshold).reshape(-1)
        return Payload({"values": x[idx].float(), "indices": idx.int()}, grad.shape, grad.dtype)

    def wire_bytes(self, numel: int, step: int) -> int:
        """No data-free estimate exists; this is the worst case (every element sent)."""
        return 8 * numel
