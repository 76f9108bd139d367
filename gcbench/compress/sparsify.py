"""Sparsifiers: topk (exact), randomk (shared seed), dgc (sampled threshold), threshold.

Payloads hold fp32 values and int32 indices into the flattened tensor, except randomk:
its positions follow from a stable hash of (seed, key, step), so every worker takes the
same ones, they never cross the wire, and payloads are additive (the sum of the workers'
values is the payload of the summed gradient).

randomk's positions at a step are a random rotation of the key's random pattern:
position i is (pattern[i] + offset) mod n, where the pattern is k draws *with
replacement* from {0, ..., n-1} (`torch.randint`, sorted), drawn once per key from
`generator("randomk", seed, key, n)` and kept, and the offset is
`stable_seed("randomk", seed, key, step) mod n`, one hash a step. So each step costs one
hash instead of k draws, every position is uniform on {0, ..., n-1} at every step and
independent of the step before (as error feedback needs: each element is sent with the
same probability each step), while the spacing between the k positions is the pattern's
at every step. A duplicate carries the same value twice, and decompression writes it
once. The pattern is sorted, so the gather reads memory in order, in two runs: positions
before the wrap and after it (on the CPU split between the pool's threads, `chunks`).

k = ceil(ratio x numel) (at least 1 for a non-empty tensor) for topk, randomk and dgc.
Payload tensors are the key's buffers (`base.py`); dgc's and threshold's, whose sizes
depend on the data, are views of buffers that grow when needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from gcbench.compress import chunks
from gcbench.compress.base import Compressor, Payload, generator, host_path, stable_seed
from gcbench.compress.registry import register

HOST_GATHER_MIN = 2**15  # randomk positions per task of the CPU gather


def k_of(ratio: float, numel: int) -> int:
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


def _scatter(payload: Payload, values: Tensor, indices: Tensor) -> Tensor:
    out = torch.zeros(payload.numel, dtype=torch.float32, device=values.device)
    out.index_copy_(0, indices.long(), values.float())  # (0.6 ms against 0.85 for out[i] = v)
    return out.to(payload.dtype).reshape(payload.shape)


def _gather(x: Tensor, idx: Tensor, out: Tensor) -> Tensor:
    """out[:] = x[idx] (float32 out), without a temporary when x is float32."""
    if x.dtype == out.dtype:
        return torch.index_select(x, 0, idx, out=out)
    return out.copy_(x.index_select(0, idx))


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

    def _selected(
        self, grad: Tensor, key: str, step: int, idx: Tensor, sized: bool = False
    ) -> Payload:
        """The payload of x[idx] (idx int64): values and int32 indices in the key's
        buffers; `sized` for a data-dependent count (views of growing buffers)."""
        x = grad.detach().reshape(-1)
        bufs = self.buffers(key, step)
        k = idx.numel()
        if sized:
            values = bufs.at_least("values", k, torch.float32, x.device)[:k]
            indices = bufs.at_least("indices", k, torch.int32, x.device)[:k]
        else:
            values = bufs.get("values", k, torch.float32, x.device)
            indices = bufs.get("indices", k, torch.int32, x.device)
        _gather(x, idx, values)
        indices.copy_(idx)
        return Payload({"values": values, "indices": indices}, grad.shape, grad.dtype)


def top_k_host(a: Tensor, k: int) -> Tensor:
    """The indices of the k largest of `a` (1-D, non-negative, on the host), exactly, in
    no order, 4-8x sooner than `torch.topk` over all of it on this project's CPU
    (`benchmarks/grace.py`): a threshold from an evenly strided sample of ~65k values,
    at the quantile where twice k are expected to pass, keeps a superset of the k when at
    least k pass (checked), and `torch.topk` picks them among those; where fewer pass,
    `torch.topk` over all."""
    n = a.numel()
    sample = a[:: max(1, n // 65536)]
    rank = max(1, min(sample.numel(), round(sample.numel() * (1 - 2 * k / n))))
    threshold = torch.kthvalue(sample, rank).values
    kept = torch.nonzero(a >= threshold).flatten()
    if kept.numel() < k:
        return torch.topk(a, k, sorted=False)[1]
    return kept[torch.topk(a[kept], k, sorted=False)[1]]


@register
class TopK(_Sparse):
    """The k largest magnitudes, exactly (`torch.topk`; on the host `top_k_host`), sent
    in ascending position."""

    name = "topk"

    def __init__(self, ratio: float = 0.01):
        self.ratio = ratio

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.detach().reshape(-1)
        k = k_of(self.ratio, x.numel())
        if not k:
            idx = x.new_zeros(0).long()
        elif host_path(x) and 8 * k <= x.numel() and x.dtype in (torch.float32, torch.float64):
            # (fp16 and bf16 tie often at the k-th value: torch.topk's own pick there)
            idx = top_k_host(x.abs().float(), k)
        else:
            idx = torch.topk(x.abs().float(), k, sorted=False)[1]
        # in ascending position: one payload whichever path (and device) chose the k
        return self._selected(grad, key, step, idx.sort().values)

    def wire_bytes(self, numel: int, step: int) -> int:
        return 8 * k_of(self.ratio, numel)


@register
class RandomK(_Sparse):
    """k positions from a shared seed (a rotated per-key pattern, see the module
    docstring); only the values cross the wire."""

    name = "randomk"
    additive = True

    def __init__(self, ratio: float = 0.01, seed: int = 0):
        self.ratio = ratio
        self.seed = seed
        self._patterns: dict[str, tuple[int, np.ndarray, Tensor]] = {}  # numel, on the host
        self._device: dict[tuple[str, torch.device], Tensor] = {}  # the pattern elsewhere
        self._tail: dict[torch.device, Tensor] = {}  # scratch for the wrapped positions
        self._cache: dict[str, tuple[int, int, torch.device, Tensor]] = {}  # last indices()

    def pattern(self, key: str, numel: int, device: torch.device | str = "cpu") -> Tensor:
        """The key's sorted pattern of k positions (int64, on `device`), drawn once."""
        hit = self._patterns.get(key)
        if hit is None or hit[0] != numel:
            k = k_of(self.ratio, numel)
            g = generator("randomk", self.seed, key, numel)
            p = torch.randint(0, max(numel, 1), (k,), generator=g).sort().values
            hit = self._patterns[key] = (numel, p.numpy(), p)
            for d in [d for d in self._device if d[0] == key]:
                del self._device[d]
        device = torch.device(device)
        if device.type == "cpu":
            return hit[2]
        on = self._device.get((key, device))
        if on is None:
            on = self._device[(key, device)] = hit[2].to(device)
        return on

    def offset(self, key: str, step: int, numel: int) -> int:
        """The rotation at `step`: stable_seed("randomk", seed, key, step) mod numel."""
        return stable_seed("randomk", self.seed, key, step) % numel if numel else 0

    def _split(self, key: str, numel: int, offset: int) -> int:
        """How many pattern positions stay below numel after adding the offset."""
        return int(np.searchsorted(self._patterns[key][1], numel - offset))

    def indices(self, key: str, step: int, numel: int, device: torch.device) -> Tensor:
        """The positions (int64) of `key` at `step`: (pattern + offset) mod numel."""
        device = torch.device(device)
        hit = self._cache.get(key)
        if hit is not None and hit[:3] == (step, numel, device):
            return hit[3]
        p = self.pattern(key, numel, device)
        off = self.offset(key, step, numel)
        idx = p + off
        j = self._split(key, numel, off)
        idx[j:] -= numel
        self._cache[key] = (step, numel, device, idx)
        return idx

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.detach().reshape(-1)
        n = x.numel()
        p = self.pattern(key, n, x.device)
        k = p.numel()
        values = self.buffers(key, step).get("values", k, torch.float32, x.device)
        if k and host_path(x) and x.dtype == torch.float32 and k >= HOST_GATHER_MIN:
            self._host_gather(x.numpy(), key, self.offset(key, step, n), values.numpy())
        elif k:
            off = self.offset(key, step, n)
            j = self._split(key, n, off)
            _gather(x[off:], p[:j], values[:j])  # pattern + offset < n: a shifted view
            if j < k:  # the wrapped positions, pattern + offset - n
                tail = self._tail.get(x.device)
                if tail is None or tail.numel() < k - j:
                    tail = self._tail[x.device] = torch.empty(k, dtype=torch.int64, device=x.device)
                wrapped = torch.sub(p[j:], n - off, out=tail[: k - j])
                _gather(x, wrapped, values[j:])
        return Payload({"values": values}, grad.shape, grad.dtype)

    def _host_gather(self, xn: np.ndarray, key: str, off: int, out: np.ndarray) -> None:
        """The CPU fast path of the gather: the positions split between the pool's threads
        (a gather from memory waits on each read; two threads wait in parallel)."""
        n = xn.size
        pattern = self._patterns[key][1]
        j = self._split(key, n, off)
        shifted = xn[off:]

        def run(lo: int, hi: int) -> None:
            if lo < j:  # pattern + offset < n: the shifted view
                np.take(shifted, pattern[lo : min(hi, j)], out=out[lo : min(hi, j)])
            if hi > j:  # the wrapped positions, pattern + offset - n
                a = max(lo, j)
                wrapped = np.subtract(
                    pattern[a:hi], n - off, out=chunks.scratch("wrap", hi - a, np.int64)
                )
                np.take(xn, wrapped, out=out[a:hi])

        chunks.for_chunks(out.size, run, HOST_GATHER_MIN)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        idx = self.indices(key, step, payload.numel, payload.tensors["values"].device)
        return _scatter(payload, payload.tensors["values"], idx)

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        return self.decompress(self.reduce(payloads), key, step)

    def wire_bytes(self, numel: int, step: int) -> int:
        return 4 * k_of(self.ratio, numel)

    def reset(self) -> None:
        super().reset()
        self._patterns.clear()
        self._device.clear()
        self._tail.clear()
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
        x = grad.detach().reshape(-1)
        n = x.numel()
        k = k_of(self.ratio, n)
        if k == 0:
            return self._selected(grad, key, step, x.new_zeros(0, dtype=torch.int64), True)
        magnitude = x.abs().float()
        samples = min(n, max(k_of(self.sample_ratio, n), 1))
        g = generator("dgc", self.seed, key, step)
        sample = magnitude[torch.randint(0, n, (samples,), generator=g).to(x.device)]
        threshold = torch.topk(sample, k_of(self.ratio, samples), sorted=False)[0].min()
        idx = torch.nonzero(magnitude >= threshold).reshape(-1)
        if idx.numel() > 2 * k:
            idx = idx[torch.topk(magnitude[idx], k, sorted=False)[1]]
        return self._selected(grad, key, step, idx, True)

    def wire_bytes(self, numel: int, step: int) -> int:
        """Expected: k values and k indices (the sampled threshold aims at k)."""
        return 8 * k_of(self.ratio, numel)


@register
class Threshold(_Sparse):
    """Every element whose magnitude is at least `threshold` (Strom 2015)."""

    name = "threshold"
    data_dependent = True
    law_sized = True

    def __init__(self, threshold: float):
        self.threshold = threshold

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = grad.detach().reshape(-1)
        idx = torch.nonzero(x.abs() >= self.threshold).reshape(-1)
        return self._selected(grad, key, step, idx, True)

    def wire_bytes(self, numel: int, step: int) -> int:
        """The worst case (every element sent); `expected_bytes` is the estimate."""
        return 8 * numel

    def counted_bytes(self, grad: Tensor) -> float:
        """The bytes these values add to a payload, counted without compressing (a
        payload is the sum over its tensors'; the simulator's size model for real
        gradients counts held-out passes with it): 8 bytes, a value and an int32 index,
        per value at or above the threshold, as `compress` keeps them."""
        return 8.0 * int((grad.detach().reshape(-1).abs() >= self.threshold).sum())

    def expected_bytes(
        self, numels: Sequence[int], scales: Sequence[float] | None = None, summed: int = 1
    ) -> float:
        """8 bytes per value of the gradient law at or above the threshold, tensor by
        tensor (its share follows the tensor's scale: `scales` where the gradients' own
        are known, else the law's; and a sum of `summed` workers' gradients, the workers
        independent, keeps more values than one)."""
        from gcbench.compress.law import threshold_bytes

        sigmas = scales if scales is not None else [None] * len(numels)
        pairs = zip(numels, sigmas, strict=True)
        return sum(threshold_bytes(n, self.threshold, s, summed) for n, s in pairs)
