"""How well the two collective models predict published nccl-tests sweeps, out of sample.

    python benchmarks/nccl_sweeps.py [--only NAME]

Data: `benchmarks/data/nccl-tests/` (29 published sweeps, 8 B to 16 GiB; where each comes
from and anything odd in SOURCES.md; hosts, GPUs and whether NCCL's choice was forced in
sweeps.yaml). The models are fitted the same way, by `gcbench calibrate`'s own fit
(`gcbench.calibrate.fit`, relative least squares) on the same points: the per-step latency
and the efficiency of the link the sweep stresses (the NICs across machines, else the
GPUs' link), and for nccl+p also NCCL's per-protocol corrections. They differ in:

- ring: every size a ring of the link's steps (`gcbench.comm.collectives`);
- nccl: the fastest of NCCL's ring/tree x LL/LL128/Simple for the size, scaled to the
  link (`gcbench.comm.nccl`); across machines the steps inside a machine take NCCL's own
  ring/Simple latency of the GPUs' link (3.4 us NVLink, 5.7 us PCIe), not fitted;
- nccl+p: nccl with LL's and LL128's bus bandwidths fitted too (`nccl_ll_bandwidth`,
  `nccl_ll128_bandwidth`; LL128 on NVLink machines only); one that moves none of the
  fitted points stays at NCCL's value, as `gcbench calibrate` asks. Four parameters
  against two: the forced sweeps (only ring/Simple ran) are the control for what extra
  freedom alone buys.

The line rate is a unit here, not a claim: 1.25 x the sweep's peak bus bandwidth (so the
efficiency bound of 1 never binds); the GPUs' link across machines is made 100x faster so
that the NICs are the bus, as in every one of these systems.

Two splits, each scored only on points the fit did not see:
- alternate: fit every other size, predict the rest, and the other way round (pooled);
- large -> small: fit the sizes >= 1 MiB, predict the smaller ones (the latency regime,
  where the models differ, from the bandwidth regime alone).

Prints per sweep the median and largest |relative error| of each model on each split,
then the medians over the sweeps NCCL tuned itself and over those with a forced choice.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

import yaml

from gcbench.calibrate import Measurement, fit, predictor
from gcbench.config.network_profile import NCCL_PROTOCOL_FIELDS
from gcbench.errors import ConfigError

DATA = Path(__file__).resolve().parent / "data" / "nccl-tests"
COLLECTIVE = {"allreduce": "allreduce", "allgather": "allgather",
              "reducescatter": "reduce_scatter"}  # fmt: skip
NCCL_RING_SIMPLE_US = {"nvlink": 3.4, "pcie": 5.7}  # tuning.cc hwLat, ring/Simple
MIB = 2**20
MODELS = ("ring", "nccl", "nccl+p")


def load(name: str, spec: dict) -> tuple[list[Measurement], dict, list[str]]:
    rows = list(csv.DictReader((DATA / f"{name}.csv").open()))
    collective = COLLECTIVE[name.rsplit("_", 1)[1]]
    hosts, gpus = spec["hosts"], spec["gpus"]
    ranks = hosts * gpus
    level = "inter" if hosts > 1 else "intra"
    ms = [
        Measurement(f"{name} {r['size_bytes']} B", float(r["time_us"]) * 1e-6,
                    (collective, ranks, float(r["size_bytes"]), level, hosts))
        for r in rows if float(r["size_bytes"]) > 0 and float(r["time_us"]) > 0
    ]  # fmt: skip
    peak = max(float(r["busbw_GBps"]) for r in rows) * 1.25  # GB/s
    net = {"intra": spec["intra"], "intra_latency_us": NCCL_RING_SIMPLE_US[spec["intra"]]}
    if level == "inter":
        net.update(inter_gbps=peak * 8, intra_gbs=peak * 100, intra_efficiency=1.0)
    else:
        net.update(inter_gbps=1.0, intra_gbs=peak)
    return ms, net, [f"{level}_latency_us", f"{level}_efficiency"]


def protocol_params(spec: dict) -> list[str]:
    """The per-protocol corrections a sweep can fit: LL's, and LL128's on NVLink."""
    return [p for p in NCCL_PROTOCOL_FIELDS if "ll128" not in p or spec["intra"] == "nvlink"]


def held_out(ms: list[Measurement], net: dict, params: list[str],
             train: list[int], test: list[int]) -> list[float]:  # fmt: skip
    """Errors on `test` of a fit of `params` on `train` (a per-protocol correction that
    moves none of the fitted points is left at NCCL's own value, as calibrate asks)."""
    params = list(params)
    while True:
        try:
            got = fit([ms[i] for i in train], net, params)
            break
        except ConfigError as e:
            idle = [p for p in params if p in NCCL_PROTOCOL_FIELDS and p in str(e)]
            if not idle:
                raise
            params.remove(idle[0])
    return [predictor(ms[i], net)(got.values) / ms[i].measured - 1 for i in test]


def score(errors: list[float]) -> tuple[float, float]:
    a = [abs(e) for e in errors]
    return statistics.median(a), max(a)


# (preset, its fitted parameters, a sweep of the same kind it was not fitted on); the
# pairs of tests/test_nccl.py's check of the presets
ACROSS = [
    ("dgx-h100-ndr", ["intra_latency_us"], "aws_p5_1x8_h100_nvswitch_allreduce"),
    ("dgx-a100-hdr", ["inter_latency_us", "inter_efficiency"],
     "azure_ndmv4_2x8_a100_hdr_allreduce"),
    ("snellius-h100-ndr200", ["inter_latency_us", "inter_efficiency"],
     "snellius_2x4_h100_ndr200x4_allgather"),
    ("snellius-h100-ndr200", ["inter_latency_us", "inter_efficiency"],
     "snellius_2x4_h100_ndr200x4_reducescatter"),
    ("aws-p5-efa", ["inter_latency_us", "inter_efficiency"],
     "aws_p5_2x8_h100_efa_nccl2223_allreduce"),
    ("aws-p3dn-tcp", ["inter_latency_us", "inter_efficiency"],
     "aws_p3dn_4x1_v100_tcp100_allreduce"),
    ("abci-v100-edr", ["inter_latency_us", "inter_efficiency"], "abci_4x4_v100_edr_allreduce"),
]  # fmt: skip


def across() -> None:
    """Each preset's published sweep (docs/calibration/<preset>.points.yaml) fitted by
    `gcbench calibrate` with its parameters, then with NCCL's per-protocol bandwidths too;
    each fit predicts another published sweep of the same kind (another machine, the
    same machines' other collective, or more machines), never fitted on: median |error|."""
    from gcbench.calibrate import calibrate

    root = DATA.parents[2]
    sweeps = yaml.safe_load((DATA / "sweeps.yaml").read_text())
    print(f"{'preset':22} {'held-out sweep':44} {'2 params':>9} {'+ protocols':>12}")
    for preset, params, held in ACROSS:
        points = root / "docs" / "calibration" / f"{preset}.points.yaml"
        intra = yaml.safe_load(points.read_text())["network"].get("intra", "nvlink")
        ms, _, _ = load(held, sweeps[held])
        line = f"{preset:22} {held:44}"
        for extra in ([], protocol_params({"intra": intra})):
            got = calibrate(points, params + extra)
            errors = [abs(predictor(m, got.network)({}) / m.measured - 1) for m in ms]
            line += f" {statistics.median(errors):10.1%}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="one sweep (its file name without .csv)")
    ap.add_argument("--across", action="store_true",
                    help="the presets' fits, with and without NCCL's per-protocol "
                    "bandwidths, on another sweep of their kind")  # fmt: skip
    args = ap.parse_args()
    if args.across:
        across()
        return
    sweeps = yaml.safe_load((DATA / "sweeps.yaml").read_text())
    if args.only:
        sweeps = {args.only: sweeps[args.only]}
    summary: dict[tuple[str, str, bool], list[float]] = {}
    print(f"{'sweep':48} {'model':5} {'alternate: median, max':>24} {'large->small':>18}")
    for name, spec in sweeps.items():
        ms, base, params = load(name, spec)
        n = len(ms)
        even, odd = list(range(0, n, 2)), list(range(1, n, 2))
        large = [i for i in range(n) if ms[i].collective[2] >= MIB]  # type: ignore[index]
        small = [i for i in range(n) if ms[i].collective[2] < MIB]  # type: ignore[index]
        for model in MODELS:
            net = {**base, "collectives": "ring" if model == "ring" else "nccl"}
            mine = params + (protocol_params(spec) if model == "nccl+p" else [])
            alt = (held_out(ms, net, mine, even, odd)
                   + held_out(ms, net, mine, odd, even))  # fmt: skip
            ls = held_out(ms, net, mine, large, small)
            (am, ax), (lm, lx) = score(alt), score(ls)
            tuned = "forced" not in spec
            summary.setdefault((model, "alternate", tuned), []).append(am)
            summary.setdefault((model, "large->small", tuned), []).append(lm)
            print(f"{name if model == 'ring' else '':48} {model:6} {am:10.1%} {ax:12.1%} "
                  f"{lm:8.1%} {lx:9.1%}")  # fmt: skip
    print("\nmedian over sweeps of each sweep's median |error|:")
    for tuned in (True, False):
        label = "NCCL tuned itself" if tuned else "algorithm or protocol forced"
        for split in ("alternate", "large->small"):
            got = {m: summary.get((m, split, tuned)) for m in MODELS}
            if all(got.values()):
                print(f"  {label:30} {split:13} " + "   ".join(
                    f"{m} {statistics.median(v):6.1%}" for m, v in got.items() if v
                ) + f"   ({len(got['ring'] or [])} sweeps)")  # fmt: skip


if __name__ == "__main__":
    main()
