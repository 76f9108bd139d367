"""The gradient law gcbench assumes where it has no gradients, and the payload sizes it
implies for data-dependent compressors (issue #14: the simulator's expected-size model,
checked against what the compressors send on the emulator's gradients).

The law: a tensor of n values holds independent Student-t values with ν = 3 (heavy tails:
a few large values, most near zero, as measured gradients have), scaled by 1/sqrt(n) so
tensors of every size carry comparable norms. The emulator draws its synthetic gradients
from it (`gcbench.cluster.gradients`); the simulator takes from it what a threshold or
3LC payload is expected to hold. Nothing here is fitted: the sizes follow from the law.

Real gradients (`compute_time: measured`) have scales and tails of their own
(bert-base's at initialisation sit far above 1/sqrt(n)), and their nonzero values
cluster. For them the sizes are not taken from this law but observed on backward passes
that no worker runs (`gcbench.cluster.backward`: threshold's kept values counted, 3LC's
streams encoded). The law at each tensor's scale (`scales`, `fit_scale`), which they
replaced, stays for `benchmarks/payload_sizes.py`'s comparison.

|T| for ν = 3 has a closed form, P(|T| > x) = 1 - (2/π)(u/(1+u²) + atan u), u = x/√3,
so this needs neither scipy nor sampling.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

NU = 3  # degrees of freedom of the Student-t
QUANTILES = 64  # the distribution of a tensor's peak, at the midpoints of 64 equal slices


def scale(numel: int) -> float:
    """The law's scale of a tensor of `numel` values."""
    return 1.0 / math.sqrt(max(numel, 1))


def fit_scale(values: np.ndarray) -> float:
    """The scale of the law that matches `values`' median magnitude: median|g| over the
    median of |T| (robust to the heavy tail, unlike the RMS, which t₃'s infinite fourth
    moment makes noisy)."""
    magnitudes = np.abs(np.asarray(values, dtype=np.float64).reshape(-1))
    if magnitudes.size == 0:
        return 1.0
    return max(float(np.median(magnitudes)), 1e-30) / median_t()


def tail(x: np.ndarray | float) -> np.ndarray:
    """P(|T| > x) for Student-t with ν = 3, x ≥ 0, accurate far into the tail: written with
    w = √3/x as (2/π)(atan w − w/(1+w²)), whose series 2w³/3 − 4w⁵/5 + 6w⁷/7 serves small
    w (where the two terms cancel)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        w = np.where(x > 0, math.sqrt(3) / np.maximum(x, 1e-300), np.inf)
    w2 = w * w
    series = w * w2 * (2 / 3 - w2 * (4 / 5 - w2 * (6 / 7 - w2 * 8 / 9)))
    with np.errstate(invalid="ignore", over="ignore"):
        closed = np.arctan(w) - w / (1 + w2)
    out = (2 / math.pi) * np.where(w < 1e-2, series, closed)
    return np.where(x > 0, out, 1.0)


def _tail_inverse(p: np.ndarray) -> np.ndarray:
    """The x with P(|T| > x) = p (0 < p ≤ 1), by bisection on log x."""
    lo = np.full(p.shape, -20.0)
    hi = np.full(p.shape, 60.0)
    for _ in range(80):
        mid = (lo + hi) / 2
        above = tail(np.exp(mid)) > p  # x too small
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.exp((lo + hi) / 2)


@lru_cache(maxsize=65536)
def sum_tail(x: float, k: int) -> float:
    """P(|T₁ + … + T_k| > x) for k independent Student-t (ν = 3) values: what a sum of k
    workers' gradients holds past x in units of one worker's scale (lighter-tailed than
    one t₃ stretched by √k, which is off by 10-20% near the bulk). By inversion of the
    characteristic function φ(t) = (1 + √3 t) e^(−√3 t): P(|S| ≤ x) =
    (2/π) ∫₀^∞ sin(xt)/t · φ(t)^k dt, Simpson's rule out to where φ^k < 1e-17 (`_cutoff`)
    with 32 points a period of sin(xt); k = 1 is `tail`, far out (x > 1000) the subexponential
    limit k · tail(x). Checked against sampled sums in the tests."""
    if k <= 1 or x <= 0:
        return float(tail(x))
    if x > 1000:
        return k * float(tail(x))
    a = math.sqrt(3)
    end = _cutoff(k) / a
    m = int(math.ceil(end / min(math.pi / (16 * x), end / 4000)))
    m += m % 2
    t = np.linspace(0.0, end, m + 1)
    t[0] = 1.0  # the integrand's limit at 0 is x, set below
    f = np.sin(x * t) / t * ((1 + a * t) * np.exp(-a * t)) ** k
    f[0] = x
    w = np.ones(m + 1)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    inside = (2 / math.pi) * (end / m / 3) * float(w @ f)
    return min(max(1.0 - inside, 0.0), 1.0)


@lru_cache(maxsize=256)
def _cutoff(k: int) -> float:
    """The u = √3 t past which φ(t)^k < 1e-17: k (u − log(1 + u)) = 17 log 10, by
    bisection (near 0, φ^k is a Gaussian in t, so the cut-off shrinks like 1/√k)."""
    goal = 17 * math.log(10) / k
    lo, hi = 0.0, 60.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid - math.log1p(mid) < goal:
            lo = mid
        else:
            hi = mid
    return hi


def threshold_bytes(
    numel: int, threshold: float, sigma: float | None = None, summed: int = 1
) -> float:
    """Expected bytes of `threshold` sparsification (a value and an int32 index per kept
    element) of one tensor of the law (of scale `sigma`, the law's own by default), or of
    the sum of `summed` workers' such tensors: 8 · n · P(|g| ≥ τ)."""
    return 8.0 * numel * sum_tail(threshold / (sigma or scale(numel)), summed)


EXACT_GROUPS = 20_000  # a lone tensor's stream up to this many groups: runs counted exactly


@lru_cache(maxsize=65536)
def threelc_bytes(
    numels: tuple[int, ...], sparsity: float = 1.0, scales: tuple[float, ...] | None = None
) -> float:
    """Expected bytes of a 3LC payload (3LC §3) of a bucket of tensors of the law (sizes
    `numels`, concatenated; each tensor's scale from `scales`, the law's own by default):
    the fp32 scale and the zero-run encoded base-3^5 stream of its G = ceil(N/5) groups.

    The scale is m = s · peak, the bucket's largest |value| (§3.1), and a value is nonzero
    when |x| > m/2. The peak's distribution follows from the tensors' scales:
    P(peak ≤ m) = Π (1 − tail(m/σᵢ))^nᵢ, taken at `QUANTILES` quantiles. Given it, a value
    of tensor i is nonzero with probability pᵢ = P(s·m/2 < |g| < m) / P(|g| < m), and a
    group with qᵢ = 1 − (1−pᵢ)^5. §3.3 writes every nonzero group as its byte and each run
    of zero groups as ceil(run/14) bytes, so with runs geometric a group position costs
    q + q(1−q)/(1−(1−q)^14) bytes on average (1/14 as q → 0: all-zero streams shrink
    14-fold), plus the peak's own group and about one piece where the peak splits a run.
    A lone tensor of at most `EXACT_GROUPS` groups is counted exactly instead
    (`_mean_pieces`): there the runs at the ends are a large share of the stream."""
    sizes = np.maximum(np.asarray(numels, dtype=np.int64), 1)
    if scales is None:
        sizes, counts = np.unique(sizes, return_counts=True)
        n = np.asarray(sizes * counts, dtype=np.float64)  # values of each distinct size
        sigma = np.array([scale(int(k)) for k in sizes])  # each distinct size's scale
    else:  # one term per tensor
        n, sigma = sizes.astype(np.float64), np.maximum(np.asarray(scales, np.float64), 1e-30)
    groups = -(-int(n.sum()) // 5)
    log_u = np.log((np.arange(QUANTILES) + 0.5) / QUANTILES)
    peak = _peak(n, sigma, log_u)  # (QUANTILES,), in the gradients' units
    x = peak[:, None] / sigma[None, :]  # (QUANTILES, sizes): the peak in each scale
    below = 1.0 - tail(x)
    p = np.clip((tail(sparsity * x / 2) - tail(x)) / below, 0.0, 1.0 - 1e-16)
    q = -np.expm1(5 * np.log1p(-p))
    if len(numels) == 1 and groups <= EXACT_GROUPS:
        return 5.0 + float(np.mean((groups - 1) * q[:, 0] + _mean_pieces(q[:, 0], groups)))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = q * (1 - q) / -np.expm1(14 * np.log1p(-q))
    rate = np.where(q > 1e-12, rate, 1 / 14)
    per_size = (q + rate) * (n / 5)[None, :]
    return 4.0 + 1.0 + 1.0 + float(np.mean(per_size.sum(axis=1)))


def _peak(n: np.ndarray, sigma: np.ndarray, log_u: np.ndarray) -> np.ndarray:
    """The m with Σ nᵢ log(1 − tail(m/σᵢ)) = log u for each u, by bisection on log m."""
    if n.size == 1:  # one scale: (1 − tail(m/σ))^n = u in closed form
        return sigma[0] * _tail_inverse(-np.expm1(log_u / n[0]))
    lo = np.full(log_u.shape, math.log(sigma.min()) - 20)
    hi = np.full(log_u.shape, math.log(sigma.max()) + 60)
    for _ in range(80):
        mid = (lo + hi) / 2
        cdf = (n[None, :] * np.log1p(-tail(np.exp(mid)[:, None] / sigma[None, :]))).sum(axis=1)
        low = cdf < log_u  # m too small
        lo = np.where(low, mid, lo)
        hi = np.where(low, hi, mid)
    return np.exp((lo + hi) / 2)


def _mean_pieces(q: np.ndarray, groups: int) -> np.ndarray:
    """Per q: the mean over P in [0, G) of pieces(P) + pieces(G−1−P), where pieces(L) is
    the expected number of run pieces in L i.i.d. groups that are zero with probability
    1−q: position j starts a piece when its run so far is t ≡ 1 (mod 14) groups long,
    preceded by a nonzero group (probability q·a^t, a = 1−q, t ≤ j) or by the start
    (a^(j+1), when j+1 ≡ 1 mod 14)."""
    if groups <= 1:
        return np.zeros_like(q)
    t = np.arange(groups, dtype=np.float64)  # run lengths and positions 0..G-1
    a = (1 - q)[:, None]
    starts = (t % 14 == 1).astype(np.float64)  # run lengths 1, 15, 29, ...
    power = np.exp(t[None, :] * np.log(np.maximum(a, 1e-300)))  # a^t
    after_literal = np.cumsum(power * starts, axis=1)  # Σ_{t ≡ 1, t ≤ j} a^t
    first_run = np.roll(power * starts, -1, axis=1)  # a^(j+1) when j+1 ≡ 1 (mod 14)
    first_run[:, -1] = 0.0
    start = q[:, None] * after_literal + first_run  # P(position j starts a piece)
    pieces = np.concatenate([np.zeros((q.size, 1)), np.cumsum(start, axis=1)], axis=1)
    return 2.0 * pieces[:, :groups].mean(axis=1)  # P and G-1-P range over the same set


@lru_cache(maxsize=1)
def median_t() -> float:
    """The median of |T|, ν = 3 (≈ 0.765)."""
    return float(_tail_inverse(np.array([0.5]))[0])
