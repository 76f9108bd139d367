"""Quantizers: signsgd, efsignsgd, signum, onebit (1 bit an element), terngrad (2 bits),
qsgd (⌈log₂(2s+1)⌉ bits). All six: family "quantize", one round, data-independent wire
bytes, not additive (each worker's scale differs, and signs do not sum), not splittable.
This module holds the bit packing, the base class (`Quantizer`) and the sign kinds; the
stochastic ones, terngrad and qsgd, are in `stochastic`.

Wire format (`Payload.wire_bytes == wire_bytes(numel, step)` exactly, for every size; n
elements; every scalar is an fp32 tensor on the wire, present even when n = 0):

    signsgd    signs  uint8[⌈n/8⌉]                                  ⌈n/8⌉
    signum     signs  uint8[⌈n/8⌉]  (signs of the momentum)           ⌈n/8⌉
    efsignsgd  signs  uint8[⌈n/8⌉], scale fp32[1] = ‖x‖₁/n          ⌈n/8⌉ + 4
    onebit     signs  uint8[⌈n/8⌉], means fp32[2] = (mean x≥0, mean x<0)   ⌈n/8⌉ + 8
    terngrad   codes  uint8[⌈2n/8⌉], scale fp32[1] = max|x|        ⌈n/4⌉ + 4
    qsgd       codes  uint8[⌈bn/8⌉], norm fp32[1] = ‖x‖₂, b = ⌈log₂(2s+1)⌉   ⌈bn/8⌉ + 4

Bit packing (`pack_codes`, shared by all six): the b-bit codes form one little-endian bit
stream. Element i's code occupies stream bits [b·i, b·i + b), least significant bit first,
and stream bit k is bit k mod 8 (value 2^(k mod 8)) of byte ⌊k/8⌋; the last byte is padded
with zero bits, so a payload holds exactly ⌈b·n/8⌉ bytes. For b = 1 that is numpy's
`packbits(bitorder="little")`: 8 signs a byte, element 8j + i in bit i of byte j; for
b = 2, 4 codes a byte (one multiply per 4 codes on the host). Other codes of b ≤ 7 bits
are packed 8 at a time in a 64-bit word by three mask-and-shift steps (`_compact`), whose
low b bytes are then written out; codes of more than 8 bits go through a bit matrix.

Conventions (judgement calls, the same in every compressor here):
- **Sign of zero is +1.** One bit cannot say 0: a sign bit is 1 exactly where x < 0, so 0,
  -0.0 (and NaN) count as non-negative. Signs reconstruct as +1 / -1 (signsgd, signum),
  ±scale (efsignsgd) or the bin's mean (onebit).
- **Majority vote** (signsgd, signum; Bernstein et al. 2018, "signSGD: compressed
  optimisation for non-convex problems", and Bernstein et al. 2019, "signSGD with
  majority vote is communication efficient and fault tolerant"): `aggregate` returns
  sign(Σ_m sign(g_m)) ∈ {-1, 0, +1}, *not* scaled by the number of workers; a tie (an even
  number of workers split evenly) gives 0, so that coordinate is not updated.
- **Everything else aggregates by summing** the workers' reconstructions (the contract's
  default; accumulated in fp32, fp64 for fp64 gradients): dividing by the number of
  workers, as TernGrad's and QSGD's parameter servers and EF-SignSGD's distributed variant
  do, is the caller's business, as it is for the uncompressed baseline.
- Scales are computed from the gradient in its own precision (fp32 for fp16/bf16,
  fp64 for fp64) and sent as fp32; reconstruction casts to the gradient's dtype.
- Inputs must be finite (an inf makes every scale inf or NaN).

Randomness (terngrad, qsgd): see `stochastic`.

Host and device paths. On the CPU the sign kinds (signsgd, efsignsgd, onebit, and
signum's signs) make one pass over the gradient, block by block on the `chunks` pool:
the comparison, `packbits` into the payload, and the statistic the kind needs (Σ|x|, or
the count and sums of each sign) while the block is in cache. Comparisons and bit work
run through numpy's C loops (`less` + `packbits` are ~3x faster than torch's kernels
there), float arithmetic through torch's or numpy's, and temporaries live in scratch
buffers (a fresh multi-MB allocation costs its page faults). The device paths are
vectorised torch: bit packing as one weighted sum over each byte's codes, scales and
means as tensors (no host synchronisation), decompression one table lookup of 8 (or 4)
values per packed byte. Payload tensors are the key's buffers (`base.py`). A compressor
instance is not safe to call from two threads at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gcbench.compress import chunks
from gcbench.compress.base import Buffers, Compressor, Payload, host_path
from gcbench.compress.registry import register
from gcbench.errors import ConfigError

USE_NUMPY = True  # CPU tensors take the numpy paths; tests set it False to check the torch ones
# (so does `base.HOST_FAST_PATHS = False`, for every family)

_NP_FLOATS = (torch.float16, torch.float32, torch.float64)
_SAME_WIDTH_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def on_host(t: Tensor) -> bool:
    return USE_NUMPY and host_path(t)


def flat(grad: Tensor) -> Tensor:
    return grad.detach().reshape(-1)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Scratch:
    """Reusable host buffers, grown on demand. Whatever is carved from them is consumed
    within the call that asked for it, never handed out."""

    def __init__(self) -> None:
        self._bufs: dict[tuple[str, np.dtype], np.ndarray] = {}

    def get(self, name: str, n: int, dtype: Any) -> np.ndarray:
        dt = np.dtype(dtype)
        buf = self._bufs.get((name, dt))
        if buf is None or buf.size < n:
            buf = np.empty(n, dt)
            self._bufs[(name, dt)] = buf
        return buf[:n]

    def clear(self) -> None:
        self._bufs.clear()


def _get(scratch: _Scratch | None, name: str, n: int, dtype: Any) -> np.ndarray:
    return np.empty(n, dtype) if scratch is None else scratch.get(name, n, dtype)


# --- bit packing ---------------------------------------------------------------------------


def code_width(levels: int) -> int:
    """QSGD's bits per element, ⌈log₂(2s+1)⌉ (Alistarh et al. 2017: a sign and a level
    in 0..s, i.e. 2s+1 values). 2s+1 is odd and > 1, never a power of two, so this is its
    bit length."""
    return (2 * levels + 1).bit_length()


def packed_bytes(numel: int, width: int) -> int:
    """Bytes of `numel` codes of `width` bits, densely packed: ⌈numel·width/8⌉."""
    return (numel * width + 7) // 8


def _rep(field: int, period: int) -> int:
    """`field` repeated every `period` bits across a 64-bit word."""
    return sum(field << i for i in range(0, 64, period))


# Three steps gather 8 codes of b <= 7 bits, one a byte of a 64-bit word (little-endian),
# into its low 8b bits: step k joins neighbouring fields of b·2^k bits that sit
# `half` = 8·2^k bits apart. Every mask stays below 2^63 and every word non-negative, so
# torch's int64 and numpy's int64 views behave alike. `_expand` undoes it.
_STEPS = ((0, 8), (1, 16), (2, 32))


def _compact(w: Any, b: int) -> Any:
    for k, half in _STEPS:
        f = b << k
        ones = (1 << f) - 1
        w = (w & _rep(ones, 2 * half)) | ((w >> (half - f)) & _rep(ones << f, 2 * half))
    return w


def _expand(w: Any, b: int) -> Any:
    for k, half in reversed(_STEPS):
        f = b << k
        ones = (1 << f) - 1
        w = (w & _rep(ones, 2 * half)) | ((w << (half - f)) & _rep(ones << half, 2 * half))
    return w


def _np_compact(w: np.ndarray, b: int, t: np.ndarray) -> np.ndarray:
    """`_compact` in place, with `t` (like w) as the temporary."""
    for k, half in _STEPS:
        f = b << k
        ones = (1 << f) - 1
        np.right_shift(w, half - f, out=t)
        t &= _rep(ones << f, 2 * half)
        w &= _rep(ones, 2 * half)
        w |= t
    return w


def _np_expand(w: np.ndarray, b: int, t: np.ndarray) -> np.ndarray:
    for k, half in reversed(_STEPS):
        f = b << k
        ones = (1 << f) - 1
        np.left_shift(w, half - f, out=t)
        t &= _rep(ones << half, 2 * half)
        w &= _rep(ones, 2 * half)
        w |= t
    return w


# 4 two-bit codes, one a byte of a 32-bit word, land in its top byte by one multiply: the
# multiplier's bit 24 - 6j moves code j to bit 24 + 2j, and no other partial product
# reaches the top byte or carries into it (they fall at or above bit 32, or on distinct
# two-bit fields below bit 24).
_TWO_BIT_MAGIC = (1 << 24) | (1 << 18) | (1 << 12) | (1 << 6)


def _fields(width: int) -> list[tuple[str, int]]:
    """A group of `width` bytes as unsigned fields of 4, 2 and 1 bytes: (name, offset)."""
    out, offset = [], 0
    for size in (4, 2, 1):
        if (width - offset) >= size:
            out.append((f"u{size}", offset))
            offset += size
    return out


def _group_dtype(width: int) -> np.dtype:
    """8 packed codes of `width` < 8 bits (`width` bytes) as one record of unsigned fields:
    reading and writing them is several times faster than a strided byte copy."""
    fields = _fields(width)
    return np.dtype(
        {
            "names": [name for name, _ in fields],
            "formats": [f"<{name}" for name, _ in fields],
            "offsets": [offset for _, offset in fields],
            "itemsize": width,
        }
    )


def _np_code_dtype(width: int) -> np.dtype:
    for nbytes in (1, 2, 4, 8):
        if width <= 8 * nbytes:
            return np.dtype(f"<u{nbytes}")
    raise ValueError(f"codes of {width} bits")


def np_pack(
    codes: np.ndarray, width: int, scratch: _Scratch | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Pack codes (1-D, values < 2^width) into ⌈n·width/8⌉ bytes: `out` if given, else a
    new array."""
    packed = _np_pack_new(codes, width, scratch)
    if out is None:
        return packed
    np.copyto(out, packed)
    return out


def _np_pack_new(codes: np.ndarray, width: int, scratch: _Scratch | None = None) -> np.ndarray:
    n = codes.size
    nbytes = packed_bytes(n, width)
    if width == 1:
        return np.packbits(codes, bitorder="little")
    if width == 8:
        return codes.astype(np.uint8)
    if width == 2:
        buf = _get(scratch, "pack", -(-n // 4) * 4, np.uint8)
        buf[:n] = codes
        buf[n:] = 0
        w = buf.view("<u4")
        np.multiply(w, _TWO_BIT_MAGIC, out=w)  # wraps modulo 2^32
        np.right_shift(w, 24, out=w)
        return w.astype(np.uint8)
    if width < 8:
        g = -(-n // 8)
        buf = _get(scratch, "pack", g * 8, np.uint8)
        buf[:n] = codes
        buf[n:] = 0
        t = _get(scratch, "lanes", g, "<i8")
        w = _np_compact(buf.view("<i8"), width, t)
        out = np.empty(g, _group_dtype(width))  # the low `width` bytes of each word
        for name, offset in _fields(width):
            src = w if offset == 0 else np.right_shift(w, 8 * offset, out=t)
            np.copyto(out[name], src, casting="unsafe")  # keeps the field's low bytes
        packed = out.view(np.uint8)
        return packed[:nbytes].copy() if packed.size != nbytes else packed
    dt = _np_code_dtype(width)
    wide = np.ascontiguousarray(codes, dtype=dt).view(np.uint8).reshape(n, dt.itemsize)
    bits = np.unpackbits(wide, axis=1, count=width, bitorder="little")
    return np.packbits(bits.reshape(-1), bitorder="little")


def np_unpack(
    packed: np.ndarray, n: int, width: int, scratch: _Scratch | None = None
) -> np.ndarray:
    """n codes as unsigned integers of the narrowest numpy width (uint8 for width <= 8);
    with a scratch, possibly a view of it."""
    if packed.size != packed_bytes(n, width):
        raise ValueError(f"{packed.size} bytes cannot hold {n} codes of {width} bits")
    if width == 1:
        return np.unpackbits(packed, count=n, bitorder="little")
    if width == 8:
        return packed.copy()
    if width < 8:
        g = -(-n // 8)
        if packed.size != g * width:  # the last group's bytes were cut off: pad them
            packed = np.concatenate([packed, np.zeros(g * width - packed.size, np.uint8)])
        groups = packed.view(_group_dtype(width))
        w = _get(scratch, "pack", g * 8, np.uint8).view("<i8")
        t = _get(scratch, "lanes", g, "<i8")
        for name, offset in _fields(width):
            if offset == 0:
                np.copyto(w, groups[name])
            else:
                w |= np.left_shift(groups[name], 8 * offset, out=t, dtype="<i8")
        return _np_expand(w, width, t).view(np.uint8)[:n]
    dt = _np_code_dtype(width)
    bits = np.unpackbits(packed, count=n * width, bitorder="little").reshape(n, width)
    wide = np.packbits(bits, axis=1, bitorder="little")
    if wide.shape[1] < dt.itemsize:
        wide = np.concatenate([wide, np.zeros((n, dt.itemsize - wide.shape[1]), np.uint8)], 1)
    return np.ascontiguousarray(wide).view(dt).reshape(n)


_DEVICE_CONSTANTS: dict[tuple[str, int, torch.device], Tensor] = {}


def _on(device: torch.device, name: str, width: int) -> Tensor:
    """A small constant table on `device`, made once: "weights" (the place value of each
    of the 8/width codes of a byte) or "codes" (`_BYTE_CODES[width]`)."""
    key = (name, width, device)
    t = _DEVICE_CONSTANTS.get(key)
    if t is None:
        if name == "weights":
            t = torch.tensor([1 << (width * j) for j in range(8 // width)], dtype=torch.uint8)
        else:
            t = _BYTE_CODES[width]
        t = _DEVICE_CONSTANTS[key] = t.to(device)
    return t


# Byte j of a word times 2^(7-j) lands byte i's low bit at bit 56 + i, every product term
# at its own bit (no carries): (word * _GATHER_BITS) >> 56 is the 8 bits packed, byte 0's
# lowest (the word's wrap-around in int64 drops only terms above bit 63).
_GATHER_BITS = 0x0102040810204080


def torch_pack(codes: Tensor, width: int, out: Tensor | None = None) -> Tensor:
    """The device path of `pack_codes` (the same bytes): widths dividing 8 as one weighted
    sum over each byte's codes (two elementwise kernels and a short reduction), others in
    little-endian words. Into `out` (uint8, ⌈n·width/8⌉) if given."""
    n, dev = codes.numel(), codes.device
    nbytes = packed_bytes(n, width)
    if width > 8:
        shifts = torch.arange(width, device=dev)
        bits = (codes.long().unsqueeze(1) >> shifts) & 1
        return torch_pack(bits.reshape(-1), 1, out)
    if width == 8:
        return codes.to(torch.uint8, copy=True) if out is None else out.copy_(codes)
    if 8 % width == 0:
        per = 8 // width
        c = codes.view(torch.uint8) if codes.dtype == torch.bool else codes.to(torch.uint8)
        if n != nbytes * per:
            padded = torch.zeros(nbytes * per, dtype=torch.uint8, device=dev)
            padded[:n] = c
            c = padded
        if width == 1:  # 8 bytes of 0/1 as one word, gathered by one multiply (below)
            if not c.is_contiguous() or c.storage_offset() % 8:
                c = c.clone()  # (a word view needs aligned, contiguous bytes)
            word = c.view(torch.int64) * _GATHER_BITS
            return torch.bitwise_right_shift(word, 56, out=word).to(torch.uint8) if out is None \
                else out.copy_(torch.bitwise_right_shift(word, 56, out=word))
        placed = c.reshape(nbytes, per) * _on(dev, "weights", width)  # distinct bits: sum = or
        if out is None:
            return placed.sum(1, dtype=torch.uint8)
        return torch.sum(placed, 1, dtype=torch.uint8, out=out)
    g = -(-n // 8)
    buf = torch.zeros(g * 8, dtype=torch.uint8, device=dev)
    buf[:n] = codes
    w = _compact(buf.view(torch.int64), width)
    packed = w.view(torch.uint8).reshape(g, 8)[:, :width].reshape(-1)[:nbytes]
    return packed.clone() if out is None else out.copy_(packed)


def torch_unpack(packed: Tensor, n: int, width: int) -> Tensor:
    """Codes as uint8 for width <= 8, int64 above."""
    if packed.numel() != packed_bytes(n, width):
        raise ValueError(f"{packed.numel()} bytes cannot hold {n} codes of {width} bits")
    dev = packed.device
    if width > 8:
        bits = torch_unpack(packed, n * width, 1).reshape(n, width).long()
        return (bits << torch.arange(width, device=dev)).sum(1)
    if width == 8:
        return packed.clone()
    if 8 % width == 0:  # one lookup of a byte's codes
        codes = torch.index_select(_on(dev, "codes", width), 0, packed.long())
        return codes.reshape(-1)[:n].to(torch.uint8)
    g = -(-n // 8)
    stream = torch.zeros(g * width, dtype=torch.uint8, device=dev)
    stream[: packed.numel()] = packed
    buf = torch.zeros(g, 8, dtype=torch.uint8, device=dev)
    buf[:, :width] = stream.reshape(g, width)
    w = _expand(buf.reshape(-1).view(torch.int64), width)
    return w.view(torch.uint8)[:n]


def pack_codes(codes: Tensor, width: int) -> Tensor:
    """Pack integer codes in [0, 2^width) densely into ⌈n·width/8⌉ bytes (the module
    docstring's little-endian bit stream, zero padding)."""
    codes = codes.reshape(-1)
    if on_host(codes):
        arr = codes.numpy()
        if codes.dtype != torch.bool:
            arr = arr.astype(_np_code_dtype(width), copy=False)
        return torch.from_numpy(np_pack(arr, width))
    return torch_pack(codes, width)


def unpack_codes(packed: Tensor, n: int, width: int) -> Tensor:
    """The inverse of `pack_codes`: n codes as int64."""
    if on_host(packed):
        return torch.from_numpy(np_unpack(packed.numpy(), n, width).astype(np.int64))
    return torch_unpack(packed, n, width).long()


def pack_bits(bits: Tensor) -> Tensor:
    """8 booleans a byte, element 8j + i in bit i of byte j."""
    return pack_codes(bits, 1)


def unpack_bits(packed: Tensor, n: int) -> Tensor:
    if on_host(packed):
        return torch.from_numpy(np_unpack(packed.numpy(), n, 1).view(np.bool_))
    return torch_unpack(packed, n, 1).bool()


# Byte -> its 8/width codes, for decoding a whole byte by one table lookup.
_BYTE_CODES = {
    w: torch.tensor(
        [[(byte >> (w * j)) & ((1 << w) - 1) for j in range(8 // w)] for byte in range(256)]
    )
    for w in (1, 2, 4, 8)
}


def _take(table: Tensor, index: Tensor | np.ndarray) -> Tensor:
    """table[index] along dim 0 in a new tensor; on the host numpy's `take` on a
    same-width integer view of the table (bf16 included)."""
    if isinstance(index, np.ndarray):
        it = _SAME_WIDTH_INT[table.element_size()]
        out = np.take(table.view(it).numpy(), index, axis=0)
        return torch.from_numpy(out).view(table.dtype)
    # (index_select: 3.5x the advanced index's speed on this host's CPU, the same rows)
    return torch.index_select(table, 0, index.reshape(-1).long())


def decode(packed: Tensor, n: int, width: int, values: Tensor, dtype: torch.dtype) -> Tensor:
    """n elements of `dtype`, element i = values[code i]; `values` (float64) holds the
    2^width code values. Widths dividing 8: one lookup per packed byte."""
    values = values.to(device=packed.device, dtype=dtype)
    host = on_host(packed)
    if 8 % width == 0:
        table = values[_on(packed.device, "codes", width)]
        return _take(table, packed.numpy() if host else packed).reshape(-1)[:n]
    codes = np_unpack(packed.numpy(), n, width) if host else torch_unpack(packed, n, width)
    return _take(values, codes)


# --- compressors ---------------------------------------------------------------------------


class Quantizer(Compressor):
    family = "quantize"

    def __init__(self) -> None:
        self._scratch = _Scratch()

    def _tensor(self, name: str, n: int, dtype: torch.dtype) -> Tensor:
        """A CPU tensor view of scratch (consumed within the call)."""
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        return torch.from_numpy(self._scratch.get(name, n, np_dtype))

    def _signs(self, x: Tensor, bufs: Buffers, stats: str = "") -> tuple[Tensor, list]:
        """The packed sign bits of flat x (x < 0) in the payload buffer "signs", and on the
        host path (numpy floats) the per-chunk statistics of `_np_signs` (else [])."""
        out = bufs.get("signs", packed_bytes(x.numel(), 1), torch.uint8, x.device)
        if on_host(x) and x.dtype in _NP_FLOATS:
            return out, _np_signs(x.numpy(), out.numpy(), stats)
        torch_pack(x < 0, 1, out)
        return out, []

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        """The sum of the workers' reconstructions, accumulated in fp32 (fp64)."""
        first = payloads[0]
        out = self.decompress(first, key, step).to(acc_dtype(first.dtype), copy=True)
        for p in payloads[1:]:
            out += self.decompress(p, key, step)
        return out.to(first.dtype)

    def reset(self) -> None:
        super().reset()
        self._scratch.clear()


def _np_signs(xn: np.ndarray, packed: np.ndarray, stats: str = "") -> list:
    """Sign bits of xn (x < 0; 1-D float16/32/64) packed into `packed` (⌈n/8⌉ bytes),
    chunk by chunk on the pool, and per chunk what `stats` asks for: "l1": Σ|x|
    (float32 and float64 only; BLAS asum, `chunks.abs_sum`), "onebit": (#(x < 0),
    Σ max(x, 0), Σ min(x, 0); BLAS dot products with the 0/1 masks, which select without
    cancelling). Sums are taken per block of `chunks.BLOCK` elements in the input's
    precision and added up in float64."""

    def chunk(lo: int, hi: int) -> tuple[float, float, float]:
        a = b = c = 0.0
        neg_buf = chunks.scratch("neg", chunks.BLOCK, np.bool_)
        t_buf = chunks.scratch("t", chunks.BLOCK, xn.dtype)
        for b0, b1 in chunks.blocks(lo, hi):  # b0 is a multiple of 8
            blk = xn[b0:b1]
            m = b1 - b0
            neg = neg_buf[:m]
            np.less(blk, 0, out=neg)
            packed[b0 // 8 : (b1 + 7) // 8] = np.packbits(neg, bitorder="little")
            if stats == "l1":
                a += chunks.abs_sum(blk)
            elif stats == "onebit":  # dot products with the 0/1 masks: exact selection
                t = t_buf[:m]
                a += int(np.count_nonzero(neg))
                np.copyto(t, neg)  # [x < 0]
                c += float(np.dot(blk, t))
                np.subtract(1, t, out=t)  # [x >= 0]
                b += float(np.dot(blk, t))
        return a, b, c

    return chunks.for_chunks(xn.size, chunk)


def set_values(buf: Tensor, *values: float) -> Tensor:
    """Write host scalars into a small CPU payload buffer (rounded to its dtype)."""
    buf.numpy()[:] = values
    return buf


class _SignVote(Quantizer):
    """Signs only; aggregation by majority vote (Bernstein et al. 2018)."""

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        values = torch.tensor([1.0, -1.0], dtype=torch.float64)
        out = decode(payload.tensors["signs"], payload.numel, 1, values, payload.dtype)
        return out.reshape(payload.shape)

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        """Majority vote: sign(Σ_m sign(g_m)) = sign(#positive − #negative), 0 on a tie."""
        first = payloads[0]
        n = first.numel
        negatives = torch.zeros(n, dtype=torch.int32, device=first.tensors["signs"].device)
        for p in payloads:
            negatives += unpack_bits(p.tensors["signs"], n)
        vote = torch.sign(len(payloads) - 2 * negatives)
        return vote.to(first.dtype).reshape(first.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return packed_bytes(numel, 1)


@register
class SignSGD(_SignVote):
    """signSGD (Bernstein et al. 2018, with their majority vote across workers):
    one sign bit per element, no scale; the receiver rebuilds ±1."""

    name = "signsgd"

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        signs, _ = self._signs(flat(grad), self.buffers(key, step))
        return Payload({"signs": signs}, grad.shape, grad.dtype)


@dataclass
class _Momentum:
    step: int
    prev: Tensor  # m_{t-1}
    cur: Tensor  # m_t = β m_{t-1} + (1 - β) g_t


@register
class Signum(_SignVote):
    """Signum (Bernstein et al. 2018): per key the momentum
    m_t = β·m_{t-1} + (1 − β)·g_t (m_0 = 0) stays on the worker; sign(m_t) is sent, and
    the workers' signs are combined by majority vote, as for signSGD.

    The state keeps m_{t-1} as well as m_t, so compressing the same key twice in one step
    gives the same payload (the step is recomputed from m_{t-1}, not applied twice); a
    different step number advances it. Momentum is kept in fp32 (fp64 for fp64 gradients);
    a key whose shape, dtype or device changes starts again from m = 0."""

    name = "signum"

    def __init__(self, momentum: float = 0.9):
        super().__init__()
        if not 0 <= momentum < 1:
            raise ConfigError(f"signum: momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self._state: dict[str, _Momentum] = {}

    def momentum_of(self, grad: Tensor, key: str, step: int) -> Tensor:
        """m_step for this key (flat), updating the state."""
        g = flat(grad).to(acc_dtype(grad.dtype))
        s = self._state.get(key)
        if s is None or (s.cur.shape, s.cur.dtype, s.cur.device) != (g.shape, g.dtype, g.device):
            s = self._state[key] = _Momentum(step, torch.zeros_like(g), torch.empty_like(g))
        elif s.step != step:
            s.prev, s.cur, s.step = s.cur, s.prev, step
        # lerp(g, m, β) = g + β (m − g) = β m + (1 − β) g, one pass into the spare buffer
        return torch.lerp(g, s.prev, self.momentum, out=s.cur)

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        bufs = self.buffers(key, step)
        signs, _ = self._signs(self.momentum_of(grad, key, step), bufs)
        return Payload({"signs": signs}, grad.shape, grad.dtype)

    def reset(self) -> None:
        super().reset()
        self._state.clear()

    def state_numel(self) -> int:
        return sum(s.prev.numel() + s.cur.numel() for s in self._state.values())


@register
class EFSignSGD(Quantizer):
    """EF-SignSGD's compressor (Karimireddy et al. 2019: C(x) = ‖x‖₁/d · sign(x)):
    sign bits and the fp32 scale ‖x‖₁/d. Error feedback is a separate `Memory`
    (`create_memory("residual")`); aggregation sums the workers' scaled signs.

    Host path (fp32, fp64): one pass, chunk by chunk, packs the signs and sums |x| (per
    block in the input's precision, blocks added in fp64). Device path: ‖x‖₁ by
    `torch.linalg.vector_norm` in fp32 (fp64 for fp64; on a CPU torch's cascaded sum of
    |x|, as exact there and faster), no host
    synchronisation. The two scales may differ in their last bits (summation order)."""

    name = "efsignsgd"

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = flat(grad)
        n = x.numel()
        bufs = self.buffers(key, step)
        scale = bufs.get("scale", 1, torch.float32, x.device)
        host_l1 = x.dtype in (torch.float32, torch.float64)
        signs, parts = self._signs(x, bufs, "l1" if host_l1 else "")
        if parts and host_l1:
            set_values(scale, sum(p[0] for p in parts) / n)
        elif not n:
            scale.zero_()
        elif x.device.type == "cpu":  # torch's CPU vector_norm sums fp32 poorly (0.5% off
            # at 2^24, measured); its `sum` cascades (2e-8 there) and is 50x an fp64 norm
            scale.copy_(x.abs().sum(dtype=acc_dtype(x.dtype)).double() / n)
        else:
            scale.copy_(torch.linalg.vector_norm(x, 1, dtype=acc_dtype(x.dtype)).double() / n)
        return Payload({"signs": signs, "scale": scale}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        s = payload.tensors["scale"].double()
        values = torch.cat([s, -s])  # bit 0: +scale, bit 1: −scale
        out = decode(payload.tensors["signs"], payload.numel, 1, values, payload.dtype)
        return out.reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return packed_bytes(numel, 1) + 4


@register
class OneBit(Quantizer):
    """1-bit SGD's quantizer (Seide et al. 2014): one bit per element, its sign, plus
    the two reconstruction values — the mean of the elements quantized to each bit (here
    x ≥ 0 and x < 0; a bin with no elements has mean 0). Seide et al. keep the means per
    matrix column; gcbench sees flat tensors of any rank, so one pair per tensor. Their
    error feedback is the separate `residual` memory."""

    name = "onebit"

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        x = flat(grad).to(acc_dtype(grad.dtype))
        n = x.numel()
        bufs = self.buffers(key, step)
        means = bufs.get("means", 2, torch.float32, x.device)
        signs, parts = self._signs(x, bufs, "onebit")
        if not n:
            means.zero_()
        elif parts:
            n_neg = int(sum(p[0] for p in parts))
            # Σ max(x, 0) and Σ min(x, 0), each on its own: no cancellation between them.
            pos_sum, neg_sum = sum(p[1] for p in parts), sum(p[2] for p in parts)
            set_values(means, pos_sum / max(n - n_neg, 1), neg_sum / max(n_neg, 1))
        else:  # the device path: no host synchronisation
            negatives = (x < 0).sum().double()
            sums = torch.stack([torch.clamp(x, min=0).sum(), torch.clamp(x, max=0).sum()])
            bins = torch.stack([(n - negatives).clamp(min=1), negatives.clamp(min=1)])
            means.copy_(sums.double() / bins)
        return Payload({"signs": signs, "means": means}, grad.shape, grad.dtype)

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        values = payload.tensors["means"].double()  # bit 0 (x ≥ 0), bit 1 (x < 0)
        out = decode(payload.tensors["signs"], payload.numel, 1, values, payload.dtype)
        return out.reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        return packed_bytes(numel, 1) + 8
