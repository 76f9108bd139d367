"""3LC's host fast path as two compiled loops (numba, `nogil`: the `chunks` pool runs them
on both cores). Imported on first use by `threelc`, so the rest of gcbench never pays
numba's import or compilation (cached on disk after the first process).

`scan` replaces the sparse path's elementwise numpy passes (|x|, max, compare, group
words, flags, search: six passes over each block, issue #16) with one: per group of five
values the largest |x|, and the groups where it passes a running lower bound of m/2.
`encode` packs one chunk's groups against the final m/2 (§3.1-3.2) and zero-run encodes
them from the gaps between its literal bytes (§3.3) in one loop, never writing the
base-3^5 stream; `stitch` joins the chunks with the runs between them. The bytes are
those of the dense and device paths (tests compare them on gradients, sparse, dense,
subnormal, infinite, NaN and float64 data).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# The running threshold is a lower bound of the final m/2 (m = fp32(peak · s), rounded to
# nearest: relative error at most 2^-24) by a margin that also covers its own rounding.
_SHRINK = 1.0 - 2.0**-20


@njit(nogil=True, cache=True)
def scan(bits, g_lo, g_hi, bound, sparsity, cap, out, values, cell, as_bits):
    """Over the whole groups g_lo..g_hi-1 of a float array given as its bits (`bits`:
    uint32 for fp32, uint64 for fp64): (max|x|, the number of candidate groups written
    to `out`, ascending, their five values' bits to `values`). A candidate's largest |x|
    passes the threshold from `bound` (a max|x| already seen, any lower bound of the
    final peak) and from every larger |x| met on the way, so the candidates hold every
    group with some |x| > m/2. A NaN returns a NaN peak; more than `cap` candidates
    return count -1 (both: the caller takes the dense path).

    |x| is the bits without the sign bit, and for such bits the integer order is the
    float order, NaN above inf: one integer max per value finds max|x| and any NaN.
    `cell` (one float of the array's type) and `as_bits` (its bits) convert between them."""
    as_bits[0] = 0
    as_bits[0] -= 1  # all ones
    mag = as_bits[0] >> 1  # all but the sign bit
    cell[0] = np.inf
    inf = as_bits[0]
    peak = float(bound)
    cell[0] = peak * sparsity * 0.5 * _SHRINK
    half = as_bits[0]
    n = 0
    for g in range(g_lo, g_hi):
        i = 5 * g
        m = max(
            max(bits[i] & mag, bits[i + 1] & mag),
            max(bits[i + 2] & mag, bits[i + 3] & mag),
            bits[i + 4] & mag,
        )
        if m > half:
            if m > inf:
                return np.nan, 0
            if n >= cap:
                return peak, -1
            out[n] = g
            for k in range(5):
                values[5 * n + k] = bits[i + k]
            n += 1
            as_bits[0] = m
            if cell[0] > peak:
                peak = float(cell[0])
                cell[0] = peak * sparsity * 0.5 * _SHRINK
                half = as_bits[0]
    return peak, n


@njit(nogil=True, cache=True)
def encode(values, half, groups, count, body):
    """§3.1-3.3 of one part of the candidate groups (`groups[:count]`, ascending, every
    group with some |x| > half among them; their values five each in `values`) into
    `body`, from its first literal byte to its last: (the body's length, the first and
    the last literal's group; -1, -1 when none). A group's byte is 81·t0 + 27·t1 + 9·t2
    + 3·t3 + t4 with t = [x > half] + [x >= -half]; a byte of 121 (five zeros) is left
    to the runs between literals (`_run`). `stitch` joins the parts."""
    pos = 0
    first = prev = -1
    low = -half
    for j in range(count):
        i = 5 * j
        byte = 0
        for v in range(5):
            x = values[i + v]
            byte = 3 * byte + int(x > half) + int(x >= low)
        if byte == 121:
            continue
        g = groups[j]
        if prev < 0:
            first = g
        else:
            pos = _run(body, pos, g - prev - 1)
        body[pos] = byte
        pos += 1
        prev = g
    return pos, first, prev


@njit(nogil=True, cache=True)
def stitch(bodies, each, lengths, firsts, lasts, total, last, out):
    """The parts' bodies (part k at bodies[k * each:], `lengths[k]` bytes, literal groups
    firsts[k]..lasts[k]) joined into `out` by the runs of 121 between them, then the
    padded last group's byte `last` (>= 0: group total - 1) and the run up to `total`
    bytes. Returns the encoded length."""
    pos = 0
    prev = -1
    for k in range(lengths.size):
        if firsts[k] < 0:
            continue
        pos = _run(out, pos, firsts[k] - prev - 1)
        out[pos : pos + lengths[k]] = bodies[k * each : k * each + lengths[k]]
        pos += lengths[k]
        prev = lasts[k]
    if last >= 0:
        pos = _run(out, pos, total - 1 - prev - 1)
        out[pos] = last
        pos += 1
        prev = total - 1
    return _run(out, pos, total - prev - 1)


@njit(nogil=True, cache=True, inline="always")
def _run(out, pos, r):
    """A run of r bytes of 121 at `pos` as §3.3 codes; the position after them."""
    while r > 14:
        out[pos] = 255
        pos += 1
        r -= 14
    if r == 1:
        out[pos] = 121
        pos += 1
    elif r > 1:
        out[pos] = 243 + r - 2
        pos += 1
    return pos


@njit(cache=True)
def bytes_at_cuts(peaks, order, cuts):
    """The zero-run encoded length (§3.3) of one tensor's group stream at each of `cuts`
    (ascending, NaN last): group k is nonzero, one byte, when its largest |x|
    (`peaks[k]`, NaN for one that never is zero; `order` their ascending argsort) passes
    the cut, and each run of L zero groups takes ceil(L/14) bytes. As the cut rises
    groups turn zero one by one, each joining the runs beside it: one pass over the
    groups for every cut (the size model of real gradients,
    `cluster.backward.held_out_peaks`)."""
    g = peaks.size
    other = np.empty(g, np.int64)  # at a zero run's first and last group: its other end
    zero = np.zeros(g, np.bool_)
    total = g  # every group nonzero: a byte each
    out = np.empty(cuts.size, np.int64)
    p = 0
    for j in range(cuts.size):
        if cuts[j] != cuts[j]:  # a NaN peak: the encoder sends every group
            out[j] = g
            continue
        while p < g and peaks[order[p]] <= cuts[j]:
            k = order[p]
            p += 1
            a = k
            b = k
            lost = 1  # its own byte
            if k > 0 and zero[k - 1]:
                a = other[k - 1]
                lost += (k - a + 13) // 14
            if k + 1 < g and zero[k + 1]:
                b = other[k + 1]
                lost += (b - k + 13) // 14
            zero[k] = True
            other[a] = b
            other[b] = a
            total += (b - a + 1 + 13) // 14 - lost
        out[j] = total
    return out
