"""The timeline kernel's resume as one compiled loop (numba; cached on disk after the
first process): `Kernel.iteration_s(plan, checkpoints, at)` and `Kernel.resume_at` spend
most of the planner's time walking the buckets after a candidate's change, a few float
additions per step that Python pays a microsecond each for.

`resume` is `Kernel._phase1` then `Kernel._phase2` on arrays, with the same float
operations in the same order (IEEE doubles, no fast-math), so it returns the same bits
(tests compare it with the Python kernel and the simulator on random plans). Streams are
numbered (`compute` is 0); a lowering is a range of the step arrays (`off`, `length`) and
its first step that waits for backward (`cut`).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _chain(sid, dur, wait, free, lo, hi, t, end, ready):
    """Steps lo..hi-1 of one bucket's chain, its previous step ending at `t`: each starts
    once its stream is free (`free`, updated) and the step before it has ended, and one
    that waits for backward (`wait`) not before `ready`. The chain's end and the
    iteration's end so far (`end`, updated)."""
    for s in range(lo, hi):
        dep = t
        if wait[s] and t < ready:
            dep = ready
        q = sid[s]
        start = free[q]
        if dep > start:
            start = dep
        t = start + dur[s]
        free[q] = t
        if t > end:
            end = t
    return t, end


@njit(nogil=True, cache=True)
def resume(
    bw, sid, dur, wait, off, length, cut, n_streams,
    free0, last, end, done, rest_low, rest_t, pending,
    changed, lo, hi, low, first, update,
):  # fmt: skip
    """One iteration's time from the state before a bucket: stream free times `free0`
    (by stream id; a stream numbered after that state was taken is free at 0), the
    compute chain's end `last`, the iteration's end so far `end`, the next tensor whose
    backward has not run `done`, and the first `pending` deferred tails (`rest_low`:
    their lowering, `rest_t`: their chain's end). The buckets from there: the rows of
    `changed` (first tensor, last tensor, lowering or -1 for none), then the
    checkpointed plan's buckets `first`.. (`lo`, `hi`, `low`). Each bucket: its tensors'
    backward not yet run, its steps up to its first that waits for backward; then every
    deferred tail in bucket order; the update (`update` seconds) after both."""
    free = np.zeros(n_streams)
    free[: free0.shape[0]] = free0
    m = changed.shape[0]
    total = m + lo.shape[0] - first
    tails_low = np.empty(pending + total, np.int64)
    tails_t = np.empty(pending + total)
    tails_low[:pending] = rest_low[:pending]
    tails_t[:pending] = rest_t[:pending]
    n = pending
    for k in range(total):  # phase one
        if k < m:
            a, z, w = changed[k, 0], changed[k, 1], changed[k, 2]
        else:
            i = first + k - m
            a, z, w = lo[i], hi[i], low[i]
        if z >= done:  # the run's backward, left to right after the compute stream
            t = free[0]
            if last > t:
                t = last
            for x in range(a if a > done else done, z + 1):
                t += bw[x]
            free[0] = t
            last = t
            if t > end:
                end = t
            done = z + 1
        if w < 0:
            continue
        o = off[w]
        stop = o + (cut[w] if cut[w] < length[w] else length[w])
        t, end = _chain(sid, dur, wait, free, o, stop, last, end, -np.inf)
        tails_low[n] = w
        tails_t[n] = t
        n += 1
    backward_end = last  # phase two: the steps that wait for backward, bucket by bucket
    tails = last
    for r in range(n):
        w = tails_low[r]
        o = off[w]
        t, end = _chain(sid, dur, wait, free, o + cut[w], o + length[w], tails_t[r], end,
                        backward_end)  # fmt: skip
        if t > tails:
            tails = t
    start = free[0]
    if tails > start:
        start = tails
    t = start + update
    return t if t > end else end
