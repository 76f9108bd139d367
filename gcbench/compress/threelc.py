"""3LC (Lim, Andersen, Kaminsky; SysML 2019, `shared/papers/3lc.txt` §3): 3-value quantization
with sparsity multiplication, base-3^5 encoding, and zero-run encoding.

Pipeline for one gradient tensor x of n elements (every stage a pure function below):

1. `quantize` (§3.1): m = max|x| · s with the sparsity multiplier s in [1, 2), and
   q = round(x / m) in {-1, 0, 1}. m is sent as one fp32, and q is computed against that fp32
   m, so the sender and the receiver agree bit for bit. round() is round-half-to-even (as
   `tf.round` and `torch.round`), so |x| = m/2 gives 0. It is evaluated as two exact
   comparisons, q = [x > m/2] - [x < -m/2], rather than a rounded division.
2. `pack_base3` (§3.2): the trits t = q + 1 in {0, 1, 2} go five to a byte. The paper's
   convolution form is used: kernel [3^4, 3^3, 3^2, 3, 1] with stride 5 over the flat
   array, so byte j = 81·t[5j] + 27·t[5j+1] + 9·t[5j+2] + 3·t[5j+3] + t[5j+4] in 0..242
   (the *first* trit of a group is the most significant digit). The trit stream is padded
   to a multiple of 5 with uint8 zeros *after* the +1 shift, as §3.2 steps (1)-(4) order it
   ("add 1", "cast to uint8", "flatten", "pad it with zeros"): a padding trit is 0, i.e.
   stands for q = -1, and is dropped on decode (`PAD_TRIT`). Five zero values pack to 121.
3. `zero_run_encode` (§3.3): k consecutive bytes 121 with 2 <= k <= 14 become one byte
   243 + (k - 2) (243..255). The paper does not say how a run longer than 14 is cut; here
   it is cut greedily from its start into pieces of 14, and a last piece of one byte stays
   the literal 121 (a last piece of 2..13 becomes its code). Never longer than its input.

Discrepancies with the task's summary of the paper (the paper is followed):
- digit order: the summary had byte = Σ t_i·3^i (first trit least significant); §3.2's
  expression a·3^4 + ... + e and its convolution kernel make the first trit most
  significant (`WEIGHTS`).
- padding: the summary padded with trit 1 (q = 0); §3.2 pads the shifted array with 0
  (`PAD_TRIT`). Only the last byte of a tensor whose length is not a multiple of 5 differs;
  such a byte is never 121, so it cannot join a zero run (at most one byte of difference).
- grouping: §3.2's first recipe ("partition the array into 5 equal-sized arrays P_0..P_4",
  byte j combining t[j], t[j+L], ..., t[j+4L]) and its convolution alternative (byte j
  combining five consecutive trits) are not byte-identical; the convolution form is used,
  so a zero byte means five consecutive zeros of the tensor.

Payload on the wire: "bytes" (uint8, the zero-run-encoded stream) and "scale" (fp32 m, one
element); `Payload.wire_bytes` is exact. `wire_bytes(numel, step)` is an upper bound: the
size without any zero-run saving, ceil(numel / 5) + 4.

Not additive (each worker has its own m) and not splittable: the zero-run stream has no
element-aligned cut points (a cut may fall inside a run code or a 5-trit group), so a correct
`split` would have to decode and re-encode everything, costing as much as compressing the
pieces separately (each with its own m, the per-tensor design of §3). Error accumulation
(§3.1) is the separate error-feedback `Memory`, not part of this compressor.

Non-finite input: m is then inf or NaN, and the receiver gets a tensor of NaN/inf (so an AMP
grad scaler still sees the overflow). A float64 tensor whose m exceeds the fp32 range is
non-finite on the wire too. An fp16/bf16 tensor with s > 1 may dequantize to ±inf where
m itself exceeds the dtype's range (the paper's dequantization m·q, computed in fp32, then
cast).

Implementation. Host path: on the `chunks` pool, never a Python loop over elements or
bytes. For float32/float64 tensors of at least `SPARSE_MIN` elements, two compiled
loops (`_threelc_jit`, numba, without the GIL): one pass per chunk finds max|x| and the
groups of five that may hold a nonzero value against the largest |x| seen so far (a
lower bound of m/2), comparing the values' bits without the sign bit as integers (the
float order, NaN above inf), and copies those groups' values while they are in cache;
then, per chunk, the candidates are rounded against the final m/2, packed, and zero-run
encoded from the gaps between them, and the chunks joined, so the base-3^5
stream of mostly 121s is never written. Past `SPARSE_LIMIT` candidate groups (dense
data), and for other dtypes, small tensors or a NaN, the dense path packs every group
(each 5-byte group, read as an 8-byte word, times one constant, `_MAGIC`) and encodes
the stream, from the gaps between literal bytes when these are few, else from the runs
of 121; decoding writes only the groups that are not all zero when these are few. Device
path (tensors elsewhere, or `base.HOST_FAST_PATHS = False`): the same bytes from torch
operations (comparisons in float64 against m/2, a weighted sum per group, the gap form
of the encoder), decoded by a cumulative sum of run lengths and one table lookup.
Payloads are the key's buffers (`base.py`): "bytes" is a prefix of one of ceil(n/5).

Speed (2 shared cores, 2^24 fp32 N(0, 1) values, s = 1, medians of interleaved runs):
compress ~5.2 ms against ~2.8 ms for a copy into a preallocated buffer (~10 ms with the
six numpy passes per block the compiled scan replaced, issue #16); decompress ~27 ms
(most of it writing a fresh
64 MiB output).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from gcbench.compress import chunks
from gcbench.compress.base import Compressor, Payload, host_path
from gcbench.compress.registry import register

ZERO_BYTE = 121  # base-3^5 code of five zero values (t = 1 everywhere): 81+27+9+3+1
RUN_BASE = 243  # a zero run of k bytes (2 <= k <= 14) is the byte RUN_BASE + k - 2 (§3.3)
MAX_RUN = 14  # 243 + 14 - 2 = 255
WEIGHTS = (81, 27, 9, 3, 1)  # weight of trit k of a group of five (§3.2: first = 3^4)
PAD_TRIT = 0  # §3.2 step (4): pad the +1-shifted uint8 array with zeros (q = -1, dropped)

# The trit digits t_0..t_4 of every byte value (bytes >= 243 are run codes, never groups).
_DIGITS = np.array([[(v // w) % 3 for w in WEIGHTS] for v in range(256)], dtype=np.int64)
# Multiplying the little-endian 8-byte word whose bytes 0..4 are t_0..t_4 by _MAGIC puts
# Σ WEIGHTS[k]·t_k into byte 4 of the product: byte p of the product is
# Σ_{k+j=p} t_k·WEIGHTS[4-j], at most 2·(1+3+9+27+81) = 242 < 256, so no byte carries into
# the next one; bytes 5..7 of the word (the next group's trits) reach only bytes >= 5.
_MAGIC = np.uint64(sum(WEIGHTS[4 - j] << (8 * j) for j in range(5)))
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BITS = {  # an integer dtype of the same width as each float dtype
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


# --- 3.1: 3-value quantization with sparsity multiplication ------------------------------


def _scale(x: Tensor, sparsity: float) -> float:
    """m = max|x| · s, rounded to the fp32 that goes on the wire (0 for an empty tensor;
    NaN or inf when x is not finite)."""
    if x.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(x.detach())
    peak = float(torch.maximum(hi, -lo))  # NaN propagates (Python's max would not)
    return _wire_scale(peak, sparsity)


def _compare_array(x: Tensor, scale: float) -> tuple[np.ndarray, np.floating]:
    """x as a 1-D numpy array and m/2 in a dtype where both are exact, so that the
    comparisons against m/2 are exact comparisons of real numbers."""
    flat = x.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    return _compare_np(_float_array(flat), scale)


def _float_array(flat: Tensor) -> np.ndarray:
    """A flat CPU tensor as a float32 or float64 numpy array (fp16/bf16 -> fp32 is exact)."""
    if flat.dtype not in (torch.float32, torch.float64):
        flat = flat.float()
    return flat.numpy()


def _compare_np(arr: np.ndarray, scale: float) -> tuple[np.ndarray, np.floating]:
    """`_compare_array` of a float32 or float64 array."""
    if arr.dtype == np.float64:
        return arr, np.float64(scale / 2)
    half = np.float32(np.float32(scale) / np.float32(2))
    if math.isfinite(scale) and float(half) * 2 != scale:  # m/2 underflows fp32 (subnormal m)
        return arr.astype(np.float64), np.float64(scale / 2)
    return arr, half


def _wire_scale(peak: float, sparsity: float) -> float:
    """m = peak · s rounded to the fp32 on the wire (inf past fp32's range, NaN kept)."""
    with np.errstate(over="ignore"):
        return float(np.float32(peak * sparsity))


def _trits_into(
    x: np.ndarray, half: np.floating, out: np.ndarray, scratch: np.ndarray | None = None
) -> None:
    """out = round(x/m) + 1 in {0, 1, 2} (uint8, x's size), as [x > m/2] + [x >= -m/2]."""
    np.greater(x, half, out=out.view(np.bool_))
    ge = np.greater_equal(x, -half, out=None if scratch is None else scratch[: x.size])
    np.add(out, ge.view(np.uint8), out=out)


def _np_peak(arr: np.ndarray) -> float:
    """max|x| of a float array, chunk by chunk on the pool (NaN if any x is NaN)."""

    def run(lo: int, hi: int) -> float:
        a_buf = chunks.scratch("abs", chunks.BLOCK, arr.dtype)
        peak = 0.0
        for b0, b1 in chunks.blocks(lo, hi):
            a = a_buf[: b1 - b0]
            np.abs(arr[b0:b1], out=a)
            peak = float(np.maximum(peak, np.max(a)))  # np.maximum propagates NaN
        return peak

    peaks = chunks.for_chunks(arr.size, run)
    return float(np.max(peaks)) if peaks else 0.0


class _Dense(Exception):
    """Too many nonzero values for the sparse path: take the dense one."""


def quantize(x: Tensor, sparsity: float = 1.0) -> tuple[Tensor, float]:
    """3LC §3.1: (q, m) with q = round(x / m) in {-1, 0, 1} (int8, x's shape) and
    m = max|x| · sparsity as an fp32 value. Ties (|x| = m/2) round to 0 (half to even)."""
    _check_float(x)
    scale = _scale(x, sparsity)
    arr, half = _compare_array(x, scale)
    t = np.empty(arr.size, dtype=np.uint8)
    _trits_into(arr, half, t)
    q = torch.from_numpy(t.view(np.int8))
    q -= 1
    return q.reshape(x.shape), scale


def dequantize(q: Tensor, scale: float, dtype: torch.dtype = torch.float32) -> Tensor:
    """3LC §3.1: m · q, computed in fp32 (m is an fp32 on the wire) and cast to `dtype`."""
    return (q.to(torch.float32) * torch.tensor(scale, dtype=torch.float32)).to(dtype)


# --- 3.2: base-3^5 encoding ---------------------------------------------------------------


_CHUNK_GROUPS = 1 << 14  # groups per block: 80 KiB of trits, 320 KiB of fp32 values


def _pack_blocks(
    n: int, fill: Callable[[int, int, np.ndarray], None], out: np.ndarray | None = None
) -> np.ndarray:
    """Base-3^5 bytes of n trits (into `out` if given), made block by block so that each
    block's trits stay in cache, the blocks shared by the pool's threads
    (`chunks.for_chunks`): `fill(start, stop, out)` writes the shifted trits t = q + 1 of
    elements [start, stop) into `out` (it may run on several threads at once); the last
    group is padded with PAD_TRIT (§3.2 step 4)."""
    groups = -(-n // 5)
    out = np.empty(groups, dtype=np.uint8) if out is None else out[:groups]

    def run(g_lo: int, g_hi: int) -> None:
        block = max(1, min(_CHUNK_GROUPS, g_hi - g_lo))
        trits = chunks.scratch("trits", 5 * block + 3, np.uint8)  # 3 spare bytes: `words`
        prod = chunks.scratch("prod", block, np.uint64)
        for g0 in range(g_lo, g_hi, block):  # a loop over blocks, not elements
            g = min(block, g_hi - g0)
            start, stop = 5 * g0, min(n, 5 * (g0 + g))
            fill(start, stop, trits[: stop - start])
            trits[stop - start : 5 * g] = PAD_TRIT
            # Overlapping, unaligned 8-byte words at a stride of 5 bytes (read only): word j
            # holds group j in its low five bytes ("<u8": little-endian on any machine);
            # its bytes 5..7 (the next group's, or spare) reach only bytes >= 5 of the
            # product.
            words = np.ndarray((g,), dtype="<u8", buffer=trits, strides=(5,))
            np.multiply(words, _MAGIC, out=prod[:g])  # wraps mod 2^64: the low bytes are exact
            np.right_shift(prod[:g], np.uint64(32), out=prod[:g])
            out[g0 : g0 + g] = prod[:g]  # byte 4 of the product (the cast keeps the low 8 bits)

    chunks.for_chunks(groups, run, chunks.CHUNK // 5)
    return out


def pack_base3(trits: Tensor) -> Tensor:
    """3LC §3.2: values in {-1, 0, 1} (any shape, flattened) -> ceil(n/5) uint8 bytes in
    0..242, five consecutive values a byte, the first most significant; the last group is
    padded with PAD_TRIT."""
    flat = trits.detach().reshape(-1).cpu()
    if flat.numel() and (int(flat.min()) < -1 or int(flat.max()) > 1):
        raise ValueError("pack_base3: trits must be -1, 0 or 1")
    q = flat.to(torch.int8).numpy()

    def fill(start: int, stop: int, out: np.ndarray) -> None:
        np.add(q[start:stop].view(np.uint8), np.uint8(1), out=out)

    return torch.from_numpy(_pack_blocks(q.size, fill))


def _check_groups(size: int, n: int) -> int:
    groups = -(-n // 5)
    if size != groups:
        raise ValueError(f"3LC: {size} base-3^5 bytes for {n} values (need {groups})")
    return groups


def unpack_base3(packed: Tensor, n: int) -> Tensor:
    """Inverse of `pack_base3`: n values in {-1, 0, 1} (int8, 1-D)."""
    b = packed.detach().reshape(-1).cpu().numpy()
    groups = _check_groups(b.size, n)
    if groups and int(b.max()) >= RUN_BASE:
        raise ValueError("3LC: base-3^5 byte out of range (>= 243)")
    table = (_DIGITS - 1).astype(np.int8)
    return torch.from_numpy(table[b].reshape(-1)[:n].copy())


# --- 3.3: zero-run encoding -----------------------------------------------------------------


def _zre_encode(b: np.ndarray) -> np.ndarray:
    """Vectorized §3.3 encoder: by the gaps between literal bytes when they are few (sparse
    gradients), else by the runs of ZERO_BYTE (few of them)."""
    if b.size < 2:
        return b.copy()
    literal = b != ZERO_BYTE
    if 2 * np.count_nonzero(literal) <= b.size:
        return _zre_encode_gaps(b, literal)
    return _zre_encode_runs(b, ~literal)


def _index_dtype(size: int) -> type[np.signedinteger]:
    return np.int32 if size < 2**31 - 2 else np.int64  # int32 halves the memory traffic


def _zre_encode_gaps(b: np.ndarray, literal: np.ndarray) -> np.ndarray:
    lit = np.flatnonzero(literal)
    return _zre_gaps(lit, b[lit], b.size)


def _zre_gaps(
    lit: np.ndarray, values: np.ndarray, size: int, out: np.ndarray | None = None
) -> np.ndarray:
    """§3.3 of a stream of `size` bytes that are 121 except `values` at the ascending
    positions `lit`: the gap of 121s before each literal byte (and after the last) becomes
    ceil(gap/14) bytes. The output (a prefix of `out` if given) starts as all 255 (pieces
    of 14), the literals go where the gaps before them end, and each gap's last piece
    gets its own code."""
    k = lit.size
    edges = np.empty(k + 2, dtype=_index_dtype(size))
    edges[0] = -1
    edges[1:-1] = lit
    edges[-1] = size
    gap = np.diff(edges)
    gap -= 1
    pieces = gap + (MAX_RUN - 1)
    pieces //= MAX_RUN  # a run of r bytes becomes ceil(r / 14) bytes (§3.3)
    end = np.cumsum(pieces, dtype=np.int64)
    end += np.arange(k + 1)  # output position of each literal (and of the end)
    total = int(end[-1])
    if out is None:
        out = np.empty(total, dtype=np.uint8)
    out = out[:total]
    out.fill(RUN_BASE + MAX_RUN - 2)
    out[end[:-1]] = values
    some = np.flatnonzero(pieces)
    last_len = gap[some] - MAX_RUN * (pieces[some] - 1)  # 1..14
    codes = last_len + (RUN_BASE - 2)
    codes[last_len == 1] = ZERO_BYTE  # a lone 121 (or a last piece of one) stays itself
    out[end[some] - 1] = codes
    return out


def _zre_encode_runs(b: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Runs of 121 found by diff and cut into pieces of at most 14 with run-level
    arithmetic; the output keeps what is not 121 and every piece's first byte."""
    size = b.size
    edge = np.empty(size + 1, dtype=np.bool_)  # a run of 121s starts or ends at this index
    edge[0] = zero[0]
    np.not_equal(zero[1:], zero[:-1], out=edge[1:size])
    edge[size] = zero[-1]
    idx = _index_dtype(size)
    bounds = np.flatnonzero(edge).astype(idx)  # start, end, start, end, ...
    starts = bounds[0::2]
    lengths = bounds[1::2] - starts
    pieces = lengths + (MAX_RUN - 1)
    pieces //= MAX_RUN  # a run of r bytes becomes ceil(r / 14) bytes (§3.3)
    dropped = lengths - pieces
    gone = np.cumsum(dropped, dtype=np.int64)
    out_pos = (starts - gone + dropped).astype(idx)  # each run's first byte in the output
    piece_len = np.minimum(lengths, MAX_RUN)
    keep = ~zero
    keep |= edge[:size]  # the first byte of every run
    long = np.flatnonzero(pieces > 1)
    if long.size:  # pieces 1, 2, ... of the runs longer than 14
        more = pieces[long] - 1
        run = np.repeat(long, more)
        k = np.arange(1, run.size + 1, dtype=idx) - np.repeat(np.cumsum(more) - more, more)
        keep[starts[run] + MAX_RUN * k] = True
        out_pos = np.concatenate([out_pos, out_pos[run] + k])  # 14 bytes -> 1 each
        piece_len = np.concatenate([piece_len, np.minimum(lengths[run] - MAX_RUN * k, MAX_RUN)])
    out = b[keep]
    codes = piece_len + (RUN_BASE - 2)
    codes[piece_len == 1] = ZERO_BYTE
    out[out_pos] = codes
    return out


def _zre_positions(e: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Where the bytes of a §3.3 stream marked `wanted` (literal bytes) land once decoded:
    (their indices in `e`, their positions in the decoded stream, its length). A code of a
    k-byte run decodes to k bytes, any other byte to one."""
    count = e.astype(_index_dtype(14 * e.size))
    count -= RUN_BASE - 2
    np.maximum(count, 1, out=count)  # RUN_BASE + k - 2 -> k; a literal (< 243) -> 1
    end = np.cumsum(count)
    index = np.flatnonzero(wanted)
    return index, end[index] - 1, int(end[-1]) if e.size else 0


def _zre_decode(e: np.ndarray) -> np.ndarray:
    """Vectorized §3.3 decoder: the output starts as all ZERO_BYTE and the literal bytes are
    written where they land, found from the run lengths of the codes (many codes), or as
    the unmarked positions left by the ranges the codes expand to (few codes)."""
    code = e >= RUN_BASE
    codes = np.count_nonzero(code)
    if codes == 0:
        return e.copy()
    if 8 * codes >= e.size:
        index, dest, total = _zre_positions(e, ~code)
        out = np.full(total, ZERO_BYTE, dtype=np.uint8)
        out[dest] = e[index]
        return out
    code_pos = np.flatnonzero(code)
    idx = _index_dtype(14 * e.size)
    grow = e[code_pos].astype(idx) - (RUN_BASE - 1)  # a k-byte run adds k - 1 bytes
    ends = np.cumsum(grow)
    total = e.size + int(ends[-1])
    ends += code_pos.astype(idx)
    ends += 1  # one past each run's last byte in the output
    mark = np.zeros(total + 1, dtype=np.int8)  # +1 where a run starts, -1 past its end
    mark[ends - grow - 1] = 1
    mark[ends] -= 1
    covered = np.cumsum(mark[:total], dtype=np.int8)
    out = np.full(total, ZERO_BYTE, dtype=np.uint8)
    out[covered == 0] = e[~code]
    return out


def zero_run_encode(packed: Tensor) -> Tensor:
    """3LC §3.3: k consecutive bytes 121 (2 <= k <= 14) -> the byte 243 + k - 2; longer runs
    are cut greedily into pieces of 14 (a last piece of one byte stays 121)."""
    return torch.from_numpy(_zre_encode(packed.detach().reshape(-1).cpu().numpy()))


def zero_run_decode(encoded: Tensor) -> Tensor:
    """Inverse of `zero_run_encode`: every byte 243..255 becomes (byte - 241) bytes 121."""
    return torch.from_numpy(_zre_decode(encoded.detach().reshape(-1).cpu().numpy()))


# --- the compressor -------------------------------------------------------------------------


def _check_float(x: Tensor) -> None:
    if x.dtype not in _FLOATS:
        raise TypeError(f"3LC compresses floating tensors, not {x.dtype}")


# --- the device (torch) path: the same bytes ---------------------------------------------------

_TORCH_WEIGHTS: dict[torch.device, Tensor] = {}
_TORCH_DIGITS: dict[torch.device, Tensor] = {}


def _torch_const(
    store: dict[torch.device, Tensor], device: torch.device, make: Callable[[], Tensor]
) -> Tensor:
    t = store.get(device)
    if t is None:
        t = store[device] = make().to(device)
    return t


def _torch_pack(x: Tensor, scale: Tensor) -> Tensor:
    """§3.1-3.2 on the device: the base-3^5 bytes of flat x against the fp32 scale m (a
    1-element tensor), compared in float64 with m/2 (exact there: the host's comparisons)."""
    n = x.numel()
    groups = -(-n // 5)
    half = (scale.double() / 2).reshape(1)  # 1-D, so that x is compared in float64
    t = torch.zeros(5 * groups, dtype=torch.uint8, device=x.device)  # PAD_TRIT = 0
    t[:n] = torch.gt(x, half)
    t[:n] += torch.ge(x, -half)
    w = _torch_const(_TORCH_WEIGHTS, x.device, lambda: torch.tensor(WEIGHTS, dtype=torch.uint8))
    return (t.reshape(groups, 5) * w).sum(1, dtype=torch.uint8)  # <= 242: no wrap


def _torch_zre_encode(b: Tensor, out: Tensor) -> Tensor:
    """§3.3 on the device (the gap form of `_zre_gaps`), into a prefix of `out`."""
    size = b.numel()
    lit = torch.nonzero(b != ZERO_BYTE).reshape(-1)
    k = lit.numel()
    edges = torch.empty(k + 2, dtype=torch.int64, device=b.device)
    edges[0] = -1
    edges[1:-1] = lit
    edges[-1] = size
    gap = torch.diff(edges) - 1
    pieces = torch.div(gap + (MAX_RUN - 1), MAX_RUN, rounding_mode="floor")
    end = torch.cumsum(pieces, 0) + torch.arange(k + 1, device=b.device)
    total = int(end[-1])
    enc = out[:total]
    enc.fill_(RUN_BASE + MAX_RUN - 2)
    enc[end[:-1]] = b[lit]
    some = torch.nonzero(pieces).reshape(-1)
    last_len = gap[some] - MAX_RUN * (pieces[some] - 1)
    codes = torch.where(last_len == 1, ZERO_BYTE, last_len + (RUN_BASE - 2))
    enc[end[some] - 1] = codes.to(torch.uint8)
    return enc


def _torch_zre_decode(e: Tensor) -> Tensor:
    """Inverse of `_torch_zre_encode`: the base-3^5 stream."""
    code = e >= RUN_BASE
    count = torch.where(code, e.long() - (RUN_BASE - 2), 1)
    end = torch.cumsum(count, 0)
    total = int(end[-1]) if e.numel() else 0
    out = torch.full((total,), ZERO_BYTE, dtype=torch.uint8, device=e.device)
    keep = torch.nonzero(~code).reshape(-1)
    out[end[keep] - 1] = e[keep]
    return out


# --- the compressor -------------------------------------------------------------------------


SPARSE_MIN = 1 << 14  # elements: smaller tensors take the dense host path
SPARSE_LIMIT = 1 / 4  # the sparse host path gives up past this fraction of candidate groups


@register
class ThreeLC(Compressor):
    """3LC (§3): 3-value quantization with sparsity multiplier `sparsity`, base-3^5
    packing, zero-run encoding. Payload: "bytes" (uint8) and "scale" (fp32, 1 element),
    both the key's buffers ("bytes" a prefix of a buffer of ceil(n/5) bytes).

    Host path, for float32 and float64 tensors of at least `SPARSE_MIN` elements: the
    groups that may hold a nonzero value are found chunk by chunk (compiled,
    `_threelc_jit`), the literal bytes are built from them alone and zero-run encoded by
    their gaps, never writing the base-3^5 stream; past `SPARSE_LIMIT` nonzero values a chunk
    gives up for the dense path (every byte packed, then encoded), which also serves other
    dtypes, small tensors and non-finite scales. The device path (torch) packs and encodes
    with tensor operations. All three give the same bytes (the tests check them against a
    serial reference and against each other)."""

    name = "threelc"
    family = "threelc"
    additive = False
    splittable = False  # see the module docstring
    rounds = 1
    data_dependent = True
    law_sized = True

    def __init__(self, sparsity: float = 1.0) -> None:
        if not 1.0 <= sparsity < 2.0:  # §3.1: 1 <= s < 2 keeps the error below max|x|
            raise ValueError(f"3LC sparsity multiplier must be in [1, 2), got {sparsity}")
        self.sparsity = float(sparsity)

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        _check_float(grad)
        x = grad.detach().reshape(-1)
        n = x.numel()
        groups = -(-n // 5)
        bufs = self.buffers(key, step)
        out = bufs.at_least("bytes", max(groups, 1), torch.uint8, x.device)
        scale_t = bufs.get("scale", 1, torch.float32, x.device)
        if host_path(x):
            scale, size = self._host_encode(x, out.numpy())
            scale_t.fill_(scale)
        elif n:
            lo, hi = torch.aminmax(x)
            scale_t.copy_(torch.maximum(hi, -lo).double() * self.sparsity)  # then fp32
            size = _torch_zre_encode(_torch_pack(x, scale_t), out).numel()
        else:
            scale_t.zero_()
            size = 0
        info = {"packed_bytes": groups}
        return Payload({"bytes": out[:size], "scale": scale_t}, grad.shape, grad.dtype, info=info)

    def _host_encode(self, x: Tensor, out: np.ndarray) -> tuple[float, int]:
        """§3.1-3.3 on the host into `out`: (the wire scale m, the encoded length)."""
        arr = _float_array(x)
        n = arr.size
        if n >= SPARSE_MIN:
            try:
                return _sparse_encode(arr, self.sparsity, out)
            except _Dense:
                pass
        scale = _wire_scale(_np_peak(arr), self.sparsity) if n else 0.0
        arr, half = _compare_np(arr, scale)

        def fill(start: int, stop: int, t: np.ndarray) -> None:
            _trits_into(arr[start:stop], half, t, chunks.scratch("ge", stop - start, np.bool_))

        packed = _pack_blocks(n, fill)  # §3.1 and §3.2, block by block
        encoded = _zre_encode(packed)
        out[: encoded.size] = encoded
        return scale, encoded.size

    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        encoded = payload.tensors["bytes"]
        if not host_path(encoded):
            return self._torch_decompress(payload)
        e = encoded.detach().reshape(-1).numpy()
        n = payload.numel
        groups = -(-n // 5)
        scale = payload.tensors["scale"].detach().reshape(-1).cpu().to(torch.float32)
        levels = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float32) * scale  # m · q, §3.1
        table = levels[torch.from_numpy(_DIGITS)].to(payload.dtype)  # (256, 5)
        bits = _BITS[payload.dtype]  # numpy has no bfloat16: move the values as raw bits
        table_bits = table.view(bits).numpy()
        group = f"V{5 * table_bits.itemsize}"  # the five values of a byte, as one record
        table_groups = table_bits.view(group).reshape(-1)  # (256,)
        out = np.empty(5 * groups, dtype=table_bits.dtype)
        out_groups = out.view(group)
        # Only bytes that are neither 121 nor a run code hold nonzero values. Few of them
        # (sparse gradients): fill the zero level, then write their groups. Many: decode
        # the whole stream (§3.3) and look every byte up (§3.2).
        wanted = (e != ZERO_BYTE) & (e < RUN_BASE)
        if 4 * np.count_nonzero(wanted) < groups:
            index, dest, total = _zre_positions(e, wanted)
            _check_groups(total, n)
            out.fill(table_bits[ZERO_BYTE, 0])
            out_groups[dest] = table_groups[e[index]]
        else:
            packed = _zre_decode(e)
            _check_groups(packed.size, n)
            np.take(table_groups, packed, out=out_groups, mode="clip")  # bytes < 256
        return torch.from_numpy(out).view(payload.dtype)[:n].reshape(payload.shape)

    @staticmethod
    def _torch_decompress(payload: Payload) -> Tensor:
        e = payload.tensors["bytes"].detach().reshape(-1)
        n = payload.numel
        packed = _torch_zre_decode(e)
        _check_groups(packed.numel(), n)
        if packed.numel() and int(packed.max()) >= RUN_BASE:
            raise ValueError("3LC: base-3^5 byte out of range (>= 243)")
        scale = payload.tensors["scale"].detach().reshape(-1).to(e.device, torch.float32)
        levels = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float32, device=e.device) * scale
        digits = _torch_const(_TORCH_DIGITS, e.device, lambda: torch.from_numpy(_DIGITS))
        table = levels[digits].to(payload.dtype)  # (256, 5): m · q, §3.1
        return table[packed.long()].reshape(-1)[:n].reshape(payload.shape)

    def wire_bytes(self, numel: int, step: int) -> int:
        """An upper bound: ceil(numel/5) base-3^5 bytes (no zero-run saving, which depends
        on the values) plus the fp32 scale."""
        return -(-numel // 5) + 4

    def observed_bytes(self, encoded: Sequence[float]) -> float:
        """The payload of a bucket whose values were observed (real gradients, held-out
        passes: `cluster.backward.held_out_peaks`): the fp32 scale and each tensor's
        encoded stream at the bucket's peak (`encoded`). Exact for a tensor alone; in a
        bucket an approximation: a run across two tensors counts as two, and a tensor's
        groups of five start at its first value, not where the bucket's fall."""
        return 4.0 + float(sum(encoded))

    def expected_bytes(
        self, numels: Sequence[int], scales: Sequence[float] | None = None, summed: int = 1
    ) -> float:
        """The zero-run encoded size expected on the gradient law (`law.threelc_bytes`):
        one scale, the bucket's peak, for all its tensors. A sum of workers' gradients is
        taken as one worker's: 3LC's size follows the values relative to the peak, not
        their scale (measured after an intra-machine sum: 1.000 of the model,
        `benchmarks/emulate.py`)."""
        from gcbench.compress.law import threelc_bytes

        sigmas = None if scales is None else tuple(scales)
        return threelc_bytes(tuple(numels), self.sparsity, sigmas)


def _sparse_encode(arr: np.ndarray, sparsity: float, out: np.ndarray) -> tuple[float, int]:
    """The sparse host path (compiled, `_threelc_jit`): chunk by chunk on the pool, the
    groups of five that may hold a nonzero value against a running lower bound of m/2
    (shared by the threads: a stale read only lowers it) and max|x|; then, against the
    final m/2, those groups' bytes zero-run encoded from the gaps between them, into
    `out`. (m, length). Raises `_Dense` for a NaN or once more than `SPARSE_LIMIT` of a
    chunk's groups are candidates."""
    from gcbench.compress import _threelc_jit as jit

    n = arr.size
    whole, total = n // 5, -(-n // 5)
    seen = [0.0]
    bits = arr.view(np.uint64 if arr.dtype == np.float64 else np.uint32)
    # every chunk's candidates in its own slice of the caller's scratch (no concatenation)
    each = int(SPARSE_LIMIT * chunks.CHUNK / 5)
    parts = len(chunks.ranges(n))
    groups = chunks.scratch("3lc groups", each * parts, np.int64)
    values = chunks.scratch("3lc values", 5 * each * parts, bits.dtype)

    def run(lo: int, hi: int) -> tuple[int, float]:
        g_lo, g_hi = lo // 5, min(hi // 5, whole)  # chunks start at multiples of 5
        at = lo // chunks.CHUNK * each
        cell = np.empty(1, arr.dtype)  # one float and its bits, for the kernel
        peak, count = jit.scan(
            bits, g_lo, g_hi, seen[0], sparsity, int(SPARSE_LIMIT * (g_hi - g_lo)),
            groups[at : at + each], values[5 * at : 5 * (at + each)], cell,
            cell.view(bits.dtype),
        )  # fmt: skip
        if peak != peak or count < 0:
            raise _Dense
        seen[0] = max(seen[0], peak)
        return count, peak

    found = chunks.for_chunks(n, run)
    peak = max((p[1] for p in found), default=0.0)
    tail = arr[5 * whole :]  # the padded last group's values
    if tail.size:
        top = float(np.max(np.abs(tail)))
        if top != top:
            raise _Dense
        peak = max(peak, top)
    scale = _wire_scale(peak, sparsity)
    arr, half = _compare_np(arr, scale)
    floats = values.view(np.float64 if bits.dtype == np.uint64 else np.float32)
    floats = floats.astype(arr.dtype, copy=False)  # fp64 where m/2 is subnormal in fp32
    last = -1
    if tail.size:  # never 121: its padding trits are 0
        t = np.zeros(5, np.uint8)
        _trits_into(arr[5 * whole :], half, t[: tail.size])
        last = int(t.astype(np.int64) @ np.array(WEIGHTS, dtype=np.int64))
    bodies = chunks.scratch("3lc bodies", chunks.CHUNK // 5 * parts, np.uint8)
    step = chunks.CHUNK // 5  # a chunk's body is never longer than its groups

    def body(k: int) -> tuple[int, int, int]:
        at = k * each
        count = found[k][0]
        return jit.encode(
            floats[5 * at : 5 * (at + count)], half, groups[at : at + count], count,
            bodies[k * step : (k + 1) * step],
        )  # fmt: skip

    coded = chunks.for_chunks(len(found), lambda k, _: body(k), chunk=1)
    lengths, firsts, lasts = (np.array(v, dtype=np.int64) for v in zip(*coded, strict=True))
    size = jit.stitch(bodies, step, lengths, firsts, lasts, total, last, out)
    return scale, int(size)


def bytes_at_cuts(peaks: np.ndarray, order: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """The zero-run encoded length of one tensor's group stream at each of `cuts`
    (`_threelc_jit.bytes_at_cuts`, compiled: loaded on first use)."""
    from gcbench.compress._threelc_jit import bytes_at_cuts as compiled

    return compiled(peaks, order, cuts)
