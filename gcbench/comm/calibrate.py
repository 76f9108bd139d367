"""Fit a link's latency alpha and efficiency eta from measured (bytes, seconds) points.

DESIGN §7: "expose eta per link and fit alpha, eta from measured points". Every model in
`gcbench.comm` is affine in the link's alpha and 1/eta for a given size S:

    time(S) = offset(S) + alpha * a(S) + (1/eta) * c(S)

with a = the collective's latency steps and c = factor * S / B its time at line rate
(`collectives.cost_shape`); offset is work on other, known links (the intra-machine
phases of a hierarchical allreduce). For one collective this is time = a + b * bytes
with a = steps * alpha and b = factor / (eta B).

The fit is least squares **weighted by 1/measured^2**, i.e. on relative errors
(model - measured) / measured, so a 30 us point counts as much as a 300 ms one (the
default; `weighting="absolute"` gives plain least squares). It is constrained to
alpha >= 0 and 0 < eta <= 1 (1/eta >= 1): a convex quadratic in (alpha, 1/eta) on a
quadrant, solved exactly by taking the best of the interior solution (when feasible) and
the clamped optima along the two edges. R^2 uses the same weights.

Measured points come as pairs or from a CSV with a header: a size column (`bytes`,
`size`, `size(B)`, `nbytes`) and a time column in seconds (`seconds`, `time_s`),
milliseconds (`ms`, `time_ms`, `time(ms)`) or microseconds (`us`, `time_us`,
`time(us)`, as nccl-tests prints). nccl-tests' size is the whole buffer, so a gather or
allgather table is fitted with the `allgather` shape.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gcbench.comm.collectives import Link, cost_shape
from gcbench.comm.hierarchy import (
    Machine,
    intra_allgather_s,
    intra_reduce_scatter_s,
    ring_share_link,
)

Weighting = Literal["relative", "absolute"]
Point = tuple[float, float]  # (bytes, seconds)


@dataclass(frozen=True)
class Fit:
    """A fitted link and how well it explains the points (in the order given)."""

    link: Link
    predicted_s: tuple[float, ...]
    residuals_s: tuple[float, ...]  # model - measured
    relative_residuals: tuple[float, ...]  # (model - measured) / measured
    r2: float  # with the fit's weights
    weighting: Weighting


def fit_affine(
    points: Sequence[Point],
    bandwidth_Bps: float,
    latency_coef: Callable[[float], float],
    line_rate_s: Callable[[float], float],
    offset_s: Callable[[float], float] | None = None,
    *,
    weighting: Weighting = "relative",
) -> Fit:
    """Fit time(S) = offset(S) + alpha * latency_coef(S) + line_rate_s(S) / eta.

    `line_rate_s(S)` is the link's share of the time at eta = 1 (factor * S / B).
    """
    if len(points) < 2:
        raise ValueError(f"need at least 2 points to fit alpha and eta, got {len(points)}")
    if any(b < 0 or t <= 0 for b, t in points):
        raise ValueError("points must have bytes >= 0 and seconds > 0")
    if weighting not in ("relative", "absolute"):
        raise ValueError(f"weighting must be 'relative' or 'absolute', got {weighting!r}")
    t = [s for _, s in points]
    off = [offset_s(b) if offset_s else 0.0 for b, _ in points]
    a = [latency_coef(b) for b, _ in points]
    c = [line_rate_s(b) for b, _ in points]
    w = [1 / s**2 if weighting == "relative" else 1.0 for s in t]
    r = [ti - oi for ti, oi in zip(t, off, strict=True)]

    def dot(x: Sequence[float], y: Sequence[float]) -> float:
        return sum(wi * xi * yi for wi, xi, yi in zip(w, x, y, strict=True))

    saa, sac, scc, sar, scr = dot(a, a), dot(a, c), dot(c, c), dot(a, r), dot(c, r)

    def loss(alpha: float, u: float) -> float:
        return sum(
            wi * (ri - alpha * ai - u * ci) ** 2 for wi, ri, ai, ci in zip(w, r, a, c, strict=True)
        )

    # Edges of the feasible quadrant alpha >= 0, u = 1/eta >= 1, each clamped.
    candidates = [(0.0, max(1.0, scr / scc) if scc > 0 else 1.0)]
    if saa > 0:
        candidates.append((max(0.0, (sar - sac) / saa), 1.0))
        det = saa * scc - sac * sac
        if det > 1e-12 * saa * scc:
            alpha = (sar * scc - scr * sac) / det
            u = (saa * scr - sac * sar) / det
            if alpha >= 0 and u >= 1:
                candidates.append((alpha, u))
    alpha, u = min(candidates, key=lambda au: loss(*au))

    pred = [oi + alpha * ai + u * ci for oi, ai, ci in zip(off, a, c, strict=True)]
    res = [p - ti for p, ti in zip(pred, t, strict=True)]
    mean = sum(wi * ti for wi, ti in zip(w, t, strict=True)) / sum(w)
    ss_tot = sum(wi * (ti - mean) ** 2 for wi, ti in zip(w, t, strict=True))
    ss_res = sum(wi * e * e for wi, e in zip(w, res, strict=True))
    return Fit(
        link=Link(bandwidth_Bps, alpha, 1 / u),
        predicted_s=tuple(pred),
        residuals_s=tuple(res),
        relative_residuals=tuple(e / ti for e, ti in zip(res, t, strict=True)),
        r2=1 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else -math.inf),
        weighting=weighting,
    )


def fit_link(
    points: Sequence[Point],
    collective: str,
    n: int,
    bandwidth_Bps: float,
    *,
    weighting: Weighting = "relative",
) -> Fit:
    """Fit alpha and eta of a link of line rate `bandwidth_Bps` from times of `collective`
    over `n` ranks: time = steps * alpha + factor * bytes / (eta B) (`cost_shape`)."""
    steps, factor = cost_shape(collective, n)
    if steps == 0:
        raise ValueError(f"{collective} over n={n} ranks moves nothing; nothing to fit")
    return fit_affine(
        points,
        bandwidth_Bps,
        lambda _: steps,
        lambda nbytes: factor * nbytes / bandwidth_Bps,
        weighting=weighting,
    )


def fit_hierarchical_inter(
    points: Sequence[Point],
    machines: int,
    machine: Machine,
    inter_bandwidth_Bps: float,
    *,
    nics: int = 1,
    rings: int | None = None,
    weighting: Weighting = "relative",
) -> Fit:
    """Fit the inter-machine link (alpha, eta at machine line rate `inter_bandwidth_Bps`)
    from hierarchical-allreduce times (`hierarchy.hierarchical_allreduce_s`), the intra
    phases being known from `machine`: time = RS_intra(S) + AG_intra(S)
    + 2(M-1) alpha + 2(M-1)/M * (S/g) / (eta B_ring), B_ring the line rate one of the g
    rings gets."""
    if machines < 2:
        raise ValueError(f"an inter-machine link needs machines >= 2, got {machines}")
    g = machine.gpus if rings is None else rings
    ring_Bps = ring_share_link(Link(inter_bandwidth_Bps, 0.0, 1.0), nics, g).bandwidth_Bps
    m = machines
    return fit_affine(
        points,
        inter_bandwidth_Bps,
        lambda _: 2 * (m - 1),
        lambda nbytes: 2 * (m - 1) / m * (nbytes / g) / ring_Bps,
        lambda nbytes: intra_reduce_scatter_s(nbytes, machine) + intra_allgather_s(nbytes, machine),
        weighting=weighting,
    )


_SIZE = ("bytes", "size", "size(b)", "nbytes")
_TIME = {
    "seconds": 1.0,
    "time_s": 1.0,
    "time(s)": 1.0,
    "ms": 1e-3,
    "time_ms": 1e-3,
    "time(ms)": 1e-3,
    "us": 1e-6,
    "time_us": 1e-6,
    "time(us)": 1e-6,
}


def parse_points_csv(text: str) -> list[Point]:
    """(bytes, seconds) points from CSV text with a header (see the module docstring);
    blank lines and lines starting with '#' are skipped; the first matching column wins."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        raise ValueError("no header row in the CSV")
    header = [h.strip().lower().replace(" ", "") for h in rows[0]]
    size_col = next((i for i, h in enumerate(header) if h in _SIZE), None)
    time_col = next((i for i, h in enumerate(header) if h in _TIME), None)
    if size_col is None or time_col is None:
        raise ValueError(
            f"CSV header {rows[0]} needs a size column ({', '.join(_SIZE)}) and a time "
            f"column ({', '.join(_TIME)})"
        )
    scale = _TIME[header[time_col]]
    points = []
    for lineno, row in enumerate(rows[1:], start=2):
        try:
            points.append((float(row[size_col]), float(row[time_col]) * scale))
        except (IndexError, ValueError) as e:
            raise ValueError(f"CSV data row {lineno}: {row}: {e}") from None
    return points


def read_points_csv(path: str | Path) -> list[Point]:
    """(bytes, seconds) points from a CSV file (`parse_points_csv`)."""
    return parse_points_csv(Path(path).read_text())
