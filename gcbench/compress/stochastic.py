"""The stochastic quantizers of the "quantize" family: terngrad (2 bits an element) and
qsgd (⌈log₂(2s+1)⌉ bits), both rounding stochastically to integer levels (`_Stochastic`).
Their wire format, bit packing, conventions and host and device paths are those of
`quantize` (its module docstring; this module uses its packing and `Quantizer` base, and
its `USE_NUMPY` switch).

Randomness (terngrad, qsgd): stochastic rounding of y = x·ratio to ⌊y + u⌋, u ~ U[0, 1),
one uniform an element, from the seed `stable_seed(name, seed, key, step)`: the same
(seed, key, step) draws the same numbers in every run. Workers that should round
independently, as in the papers, are built with different `seed`s (e.g. their rank). On
the CPU the uniforms come from numpy's PCG64 (about twice as fast as torch's CPU
generator here), drawn chunk by chunk on the `chunks` pool from the generator advanced
to each chunk's offset (the same stream as one draw); on other devices (and on the CPU
with `base.HOST_FAST_PATHS = False`) from `generator(...)`, a torch.Generator on that
device: the two streams differ, so results are reproducible per device type.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gcbench.compress import chunks
from gcbench.compress.base import Payload, generator, stable_seed
from gcbench.compress.quantize import (
    Quantizer,
    acc_dtype,
    code_width,
    decode,
    flat,
    np_pack,
    np_unpack,
    on_host,
    packed_bytes,
    set_values,
    torch_pack,
    torch_unpack,
)
from gcbench.compress.registry import register
from gcbench.errors import ConfigError

MAX_QSGD_LEVELS = 2**31 - 1  # codes of at most 32 bits


def _np_uniform_into(seed: int, out: np.ndarray) -> None:
    """out[:] = numpy's float32 uniforms of PCG64(seed), chunk by chunk on the pool: a
    float32 uniform takes half of one 64-bit output (low half first), so the chunk at
    (even) offset lo starts from the generator advanced by lo / 2 and the stream is the
    one a single `random(out=...)` call would draw."""

    def chunk(lo: int, hi: int) -> None:
        bits = np.random.PCG64(seed)
        bits.advance(lo // 2)
        np.random.Generator(bits).random(dtype=np.float32, out=out[lo:hi])

    chunks.for_chunks(out.size, chunk)


class _Stochastic(Quantizer):
    """Stochastic rounding to integer levels: code = clamp(⌊x·ratio + u⌋, −s, s) + s with
    u ~ U[0, 1). For y = x·ratio ≥ 0 that is ⌊y⌋ + 1 with probability y − ⌊y⌋, for y < 0
    −(⌊|y|⌋ + 1) with probability |y| − ⌊|y|⌋: exactly the rounding of TernGrad (s = 1)
    and QSGD, E[code − s] = y.

    `ratio` is the fp32 scale's reciprocal (times s) taken in float64 and rounded to the
    working precision, on both paths: the host passes it as a Python float, the device
    path as a 0-d tensor, and the codes agree given the same uniforms."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.seed = seed

    def _uniform(self, n: int, x: Tensor, key: str, step: int) -> Tensor:
        """n float32 uniforms in [0, 1) from the stable seed (name, seed, key, step); on the
        host a view of scratch."""
        parts = (self.name, self.seed, key, step)
        if on_host(x):
            out = self._scratch.get("u", n, np.float32)
            _np_uniform_into(stable_seed(*parts), out)
            return torch.from_numpy(out)
        return torch.rand(n, generator=generator(*parts, device=x.device), device=x.device)

    def rounded(self, x: Tensor, u: Tensor, ratio: float | Tensor, s: int, width: int) -> Tensor:
        """The codes clamp(⌊x·ratio + u⌋, −s, s) + s of flat x (uint8 up to 8 bits, else
        int64), computed as clamp(x·ratio + u + s, 0, 2s) cast to an integer: the cast
        truncates, which is ⌊·⌋ on [0, 2s]. (torch's CPU kernels run this arithmetic
        faster than numpy's here; numpy wins on comparisons and bit packing.)"""
        host = on_host(x)
        tmp = self._tensor("f", x.numel(), x.dtype) if host else None
        y = torch.mul(x, ratio, out=tmp).add_(u).add_(s).clamp_(0, 2 * s)
        if width > 8:
            return y.long()
        out = self._tensor("codes", x.numel(), torch.uint8) if host else None
        return y.to(torch.uint8) if out is None else out.copy_(y)

    @staticmethod
    def _ratio(scale: Tensor, s: int, like: Tensor) -> Tensor:
        """s / scale (fp32 scale, in float64; 0 where the scale is 0) in like's dtype."""
        wide = scale.double()
        return torch.where(wide > 0, s / wide, torch.zeros_like(wide)).to(like.dtype)

    def _codes(self, x: Tensor, scale: float, s: int, width: int, key: str, step: int) -> Tensor:
        """Host path: the packed codes' input, the rounding of x against `scale`."""
        u = self._uniform(x.numel(), x, key, step)
        return self.rounded(x, u, s / scale if scale > 0 else 0.0, s, width)

    def _pack_into(self, codes: Tensor, width: int, out: Tensor) -> Tensor:
        if on_host(codes):
            np_pack(codes.numpy(), width, self._scratch, out.numpy())
            return out
        return torch_pack(codes, width, out)


@register
class TernGrad(_Stochastic):
    """TernGrad (Wen et al. 2017): s_t = max|x|, b_i ~ Bernoulli(|x_i| / s_t), the
    receiver rebuilds s_t·sign(x_i)·b_i, an unbiased estimate of x. Sent as the 2-bit code
    1 + sign(x_i)·b_i ∈ {0, 1, 2} (4 a byte) plus s_t in fp32. Per-tensor scaling (their
    layer-wise ternarizing); the paper's optional gradient clipping is not applied."""

    name = "terngrad"

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = flat(grad).to(acc_dtype(grad.dtype))
        n = x.numel()
        bufs = self.buffers(key, step)
        scale = bufs.get("scale", 1, torch.float32, x.device)
        packed = bufs.get("codes", packed_bytes(n, 2), torch.uint8, x.device)
        if not n:
            scale.zero_()
        elif on_host(x):
            lo, hi = torch.aminmax(x)
            set_values(scale, float(np.float32(max(float(hi), -float(lo)))))
            codes = self._codes(x, float(scale[0]), 1, 2, key, step)
            self._pack_into(codes, 2, packed)
        else:  # the device path: no host synchronisation
            lo, hi = torch.aminmax(x)
            scale.copy_(torch.maximum(hi, -lo).float())
            u = self._uniform(n, x, key, step)
            self._pack_into(self.rounded(x, u, self._ratio(scale[0], 1, x), 1, 2), 2, packed)
        return Payload({"codes": packed, "scale": scale}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        s = payload.tensors["scale"].double()
        values = torch.tensor([-1.0, 0.0, 1.0, 0.0], dtype=torch.float64, device=s.device) * s
        out = decode(payload.tensors["codes"], payload.numel, 2, values, payload.dtype)
        return out.reshape(payload.shape)  # code 3 is never sent

    def wire_bytes(self, numel: int, step: int) -> int:
        return packed_bytes(numel, 2) + 4


@register
class QSGD(_Stochastic):
    """QSGD (Alistarh et al. 2017): Q_s(x_i) = ‖x‖₂ · sign(x_i) · ξ_i(x, s) / s, with
    ξ_i = l + 1 with probability |x_i|/‖x‖₂·s − l and l otherwise (l = ⌊|x_i|/‖x‖₂·s⌋),
    an unbiased estimate of x. Sent as the code s + sign(x_i)·ξ_i ∈ [0, 2s] in
    b = ⌈log₂(2s+1)⌉ bits, densely packed, plus ‖x‖₂ in fp32. The whole tensor is one
    bucket and codes have a fixed width (the paper's Elias coding of the levels is a
    data-dependent refinement gcbench does not model).

    Work is in fp32 for s <= 256 (x·s/‖x‖ + u + s then keeps >= 14 fractional bits, so the
    rounding probabilities are exact to 2^-15 of a level), fp64 above and for fp64
    gradients."""

    name = "qsgd"

    def __init__(self, levels: int = 16, seed: int = 0):
        super().__init__(seed)
        if not 1 <= levels <= MAX_QSGD_LEVELS:
            raise ConfigError(f"qsgd: levels must be in [1, {MAX_QSGD_LEVELS}], got {levels}")
        self.levels = levels
        self.width = code_width(levels)

    def _work(self, dtype: torch.dtype) -> torch.dtype:
        return torch.float32 if dtype != torch.float64 and self.levels <= 256 else torch.float64

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = flat(grad).to(self._work(grad.dtype))
        n, s = x.numel(), self.levels
        bufs = self.buffers(key, step)
        norm = bufs.get("norm", 1, torch.float32, x.device)
        packed = bufs.get("codes", packed_bytes(n, self.width), torch.uint8, x.device)
        if not n:
            norm.zero_()
        elif on_host(x):
            set_values(norm, float(torch.linalg.vector_norm(x, 2)))
            codes = self._codes(x, float(norm[0]), s, self.width, key, step)
            self._pack_into(codes, self.width, packed)
        else:  # the device path: no host synchronisation
            norm.copy_(torch.linalg.vector_norm(x, 2))
            u = self._uniform(n, x, key, step)
            codes = self.rounded(x, u, self._ratio(norm[0], s, x), s, self.width)
            self._pack_into(codes, self.width, packed)
        return Payload({"codes": packed, "norm": norm}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        s, w = self.levels, self.width
        norm_t = payload.tensors["norm"]
        packed, n, dtype = payload.tensors["codes"], payload.numel, payload.dtype
        step_t = norm_t.double() / s  # one level, from the fp32 norm, in float64
        if 8 % w == 0:  # 2, 4 or 8 bits: one table lookup per byte
            levels = torch.arange(2**w, dtype=torch.float64, device=norm_t.device) - s
            return decode(packed, n, w, levels * step_t, dtype).reshape(payload.shape)
        work = self._work(dtype)
        if on_host(packed):
            codes = np_unpack(packed.numpy(), n, w, self._scratch)
            if codes.dtype != np.uint8:
                codes = codes.astype(np.int64)
            out = torch.empty(n, dtype=work).copy_(torch.from_numpy(codes))
            out.sub_(s).mul_(float(step_t))  # code − s is exact (an integer below 2^24)
        else:
            out = (torch_unpack(packed, n, w).to(work) - s) * step_t.to(work)
        return out.to(dtype).reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return packed_bytes(numel, self.width) + 4
