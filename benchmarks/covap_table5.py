"""COVAP Table V: calibrate the inter-machine link, then simulate VGG-19's fp32 communication.

    python benchmarks/covap_table5.py

COVAP (covap.txt §III-C, Table V) measured the communication time of each of VGG-19's six
PyTorch DDP buckets on 8 machines x 8 V100 (NVLink) at 30 Gbps; 830.094 ms in all. We fit
the inter-machine link's per-step latency and efficiency to those six points under the
hierarchical allreduce model (`gcbench.comm.fit_hierarchical_inter`: intra NVLink
reduce-scatter and allgather at the defaults, G = 8 rings sharing the NIC), with two
weightings, then simulate one VGG-19 iteration (zoo model, DDP buckets, strategy
`fp32-2level`) with each fit and compare its total communication time with Table V's.
"""

from __future__ import annotations

from gcbench.comm import fit_hierarchical_inter, nvlink_machine
from gcbench.config import Cell
from gcbench.sim.wfbp import simulate_cell

# Table V: (elements, measured seconds) per bucket.
TABLE_V = [
    (4_101_096, 16.177e-3),
    (16_781_312, 99.205e-3),
    (107_480_576, 603.238e-3),
    (7_079_424, 36.513e-3),
    (7_669_760, 40.743e-3),
    (555_072, 34.218e-3),
]
TOTAL_S = 830.094e-3


def fit(weighting: str):
    points = [(4 * n, t) for n, t in TABLE_V]
    return fit_hierarchical_inter(
        points,
        8,
        nvlink_machine(8),
        30e9 / 8,
        nics=1,
        weighting=weighting,  # type: ignore[arg-type]
    )


def simulated_comm_s(latency_s: float, efficiency: float) -> tuple[float, int]:
    cell = Cell.model_validate(
        {
            "model": "vgg19",
            "compressor": "none",
            "strategy": "fp32-2level",
            "network": {
                "intra": "nvlink",
                "inter_gbps": 30,
                "inter_latency_us": latency_s * 1e6,
                "inter_efficiency": efficiency,
            },
            "cluster": {"machines": 8, "gpus_per_machine": 8},
        }
    )
    m = simulate_cell(cell).metrics
    return m["comm_total_s"], m["buckets"]


def main() -> None:
    for weighting in ("absolute", "relative"):
        f = fit(weighting)
        comm, buckets = simulated_comm_s(f.link.latency_s, f.link.efficiency)
        print(
            f"{weighting} least squares: latency {f.link.latency_s * 1e6:.1f} us/step, "
            f"efficiency {f.link.efficiency:.4f}, R^2 {f.r2:.3f}"
        )
        print(
            "  residuals (model - measured, ms): "
            + ", ".join(f"{r * 1e3:+.1f}" for r in f.residuals_s)
        )
        print(
            f"  simulated VGG-19 fp32 communication ({buckets} DDP buckets, hierarchical): "
            f"{comm * 1e3:.1f} ms vs Table V {TOTAL_S * 1e3:.1f} ms, ratio {comm / TOTAL_S:.3f}"
        )


if __name__ == "__main__":
    main()
