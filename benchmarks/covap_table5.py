"""COVAP Table V, out of sample: predict each VGG-19 DDP bucket from a link fitted to the others.

    python benchmarks/covap_table5.py

COVAP (covap.txt §III-C, Table V) measured the communication time of each of VGG-19's six
PyTorch DDP buckets on 8 machines x 8 V100 (NVLink) at 30 Gbps; 830.094 ms in all. The
paper does not say how the times were taken (presumably in training, with backward and the
other buckets running alongside).

What this compares: the hierarchical allreduce model (`gcbench.comm`: intra-machine NVLink
reduce-scatter and allgather at the defaults of `nvlink_machine(8)`, then G = 8 rings
sharing one 30 Gbps NIC across the 8 machines) has two free constants, the inter-machine
link's per-step latency alpha and efficiency eta. Fitting them to all six buckets and
comparing the model's total with the measured total, as this script used to, checks
nothing: least squares with an intercept reproduces the sum of the points it was fitted
to, whatever they are. Here each bucket is left out in turn: alpha and eta are fitted
(`fit_hierarchical_inter`) to the other five, and the held-out bucket's time is predicted
with `hierarchical_allreduce_s` under the same model. That measures how well two
constants fitted on some of one cluster's buckets predict another bucket's time on the
same cluster (interpolation in size, except for the 430 MB bucket, which is extrapolated
6.4x beyond the largest of the other five). It says nothing about other clusters, other
network speeds or the simulator's scheduling (no simulator is involved). Both weightings
of the fit are shown: "absolute" (least squares on seconds) and "relative" (on
(model - measured) / measured). The sum of the six held-out predictions is compared with
the 830.094 ms total.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcbench.comm import (
    Fit,
    Link,
    fit_hierarchical_inter,
    hierarchical_allreduce_s,
    nvlink_machine,
)

# Table V: (elements, measured seconds) per bucket, in the paper's order (tensor id 1..6).
TABLE_V = [
    (4_101_096, 16.177e-3),
    (16_781_312, 99.205e-3),
    (107_480_576, 603.238e-3),
    (7_079_424, 36.513e-3),
    (7_669_760, 40.743e-3),
    (555_072, 34.218e-3),
]
TOTAL_S = 830.094e-3
MACHINES = 8
MACHINE = nvlink_machine(8)
INTER_BPS = 30e9 / 8  # 30 Gbps in bytes/s
NICS = 1
WEIGHTINGS = ("absolute", "relative")


def fit(weighting: str, points: list[tuple[int, float]] | None = None) -> Fit:
    """Fit alpha, eta of the inter-machine link to (elements, seconds) fp32 buckets
    (default: all six of Table V)."""
    pts = [(4 * n, t) for n, t in (TABLE_V if points is None else points)]
    return fit_hierarchical_inter(
        pts,
        MACHINES,
        MACHINE,
        INTER_BPS,
        nics=NICS,
        weighting=weighting,  # type: ignore[arg-type]
    )


def predict_s(elements: int, link: Link) -> float:
    """Hierarchical allreduce time of an fp32 bucket on the Table V cluster."""
    return hierarchical_allreduce_s(4 * elements, MACHINES, MACHINE, link, nics=NICS)


@dataclass(frozen=True)
class HeldOut:
    bucket: int  # Table V's tensor id, 1..6
    elements: int
    measured_s: float
    predicted_s: float
    link: Link  # fitted to the other five buckets

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s


def leave_one_out(weighting: str) -> list[HeldOut]:
    """For each bucket: fit to the other five, predict it."""
    out = []
    for i, (n, t) in enumerate(TABLE_V):
        link = fit(weighting, TABLE_V[:i] + TABLE_V[i + 1 :]).link
        out.append(HeldOut(i + 1, n, t, predict_s(n, link), link))
    return out


def main() -> None:
    print(
        f"COVAP Table V: VGG-19 fp32 DDP buckets, {MACHINES} machines x {MACHINE.gpus} V100 "
        f"NVLink, {INTER_BPS * 8 / 1e9:.0f} Gbps, hierarchical allreduce; leave one bucket out"
    )
    for weighting in WEIGHTINGS:
        full = fit(weighting)
        print(
            f"\n{weighting} least squares; for reference, fitted to all six (in sample): "
            f"latency {full.link.latency_s * 1e6:.1f} us/step, efficiency "
            f"{full.link.efficiency:.4f}, R^2 {full.r2:.3f}"
        )
        print(
            f"  {'bucket':>6s} {'MB':>7s} {'alpha us':>9s} {'eta':>7s} {'measured ms':>12s} "
            f"{'held-out ms':>12s} {'ratio':>7s} {'in-sample ratio':>16s}"
        )
        held = leave_one_out(weighting)
        for h, p in zip(held, full.predicted_s, strict=True):
            print(
                f"  {h.bucket:6d} {4 * h.elements / 1e6:7.1f} {h.link.latency_s * 1e6:9.1f} "
                f"{h.link.efficiency:7.4f} {h.measured_s * 1e3:12.3f} {h.predicted_s * 1e3:12.3f} "
                f"{h.ratio:7.3f} {p / h.measured_s:16.3f}"
            )
        total = sum(h.predicted_s for h in held)
        print(
            f"  sum of held-out predictions {total * 1e3:.1f} ms vs Table V "
            f"{TOTAL_S * 1e3:.3f} ms, ratio {total / TOTAL_S:.3f} "
            f"(in-sample sum {sum(full.predicted_s) * 1e3:.1f} ms)"
        )


if __name__ == "__main__":
    main()
