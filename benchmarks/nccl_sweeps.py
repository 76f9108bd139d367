"""How well the two collective models predict published nccl-tests sweeps, out of sample.

    python benchmarks/nccl_sweeps.py [--only NAME]

Data: `benchmarks/data/nccl-tests/` (29 published sweeps, 8 B to 16 GiB; where each comes
from and anything odd in SOURCES.md; hosts, GPUs and whether NCCL's choice was forced in
sweeps.yaml). Both models are fitted the same way, by `gcbench calibrate`'s own fit
(`gcbench.calibrate.fit`, relative least squares) on the same points, two parameters each:
the per-step latency and the efficiency of the link the sweep stresses (the NICs across
machines, else the GPUs' link). The models differ only in `collectives`:

- ring: every size a ring of the link's steps (`gcbench.comm.collectives`);
- nccl: the fastest of NCCL's ring/tree x LL/LL128/Simple for the size, scaled to the
  link (`gcbench.comm.nccl`); across machines the steps inside a machine take NCCL's own
  ring/Simple latency of the GPUs' link (3.4 us NVLink, 5.7 us PCIe), not fitted.

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

DATA = Path(__file__).resolve().parent / "data" / "nccl-tests"
COLLECTIVE = {"allreduce": "allreduce", "allgather": "allgather",
              "reducescatter": "reduce_scatter"}  # fmt: skip
NCCL_RING_SIMPLE_US = {"nvlink": 3.4, "pcie": 5.7}  # tuning.cc hwLat, ring/Simple
MIB = 2**20


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


def held_out(ms: list[Measurement], net: dict, params: list[str],
             train: list[int], test: list[int]) -> list[float]:  # fmt: skip
    got = fit([ms[i] for i in train], net, params)
    return [predictor(ms[i], net)(got.values) / ms[i].measured - 1 for i in test]


def score(errors: list[float]) -> tuple[float, float]:
    a = [abs(e) for e in errors]
    return statistics.median(a), max(a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="one sweep (its file name without .csv)")
    args = ap.parse_args()
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
        for model in ("ring", "nccl"):
            net = {**base, "collectives": model}
            alt = held_out(ms, net, params, even, odd) + held_out(ms, net, params, odd, even)
            ls = held_out(ms, net, params, large, small)
            (am, ax), (lm, lx) = score(alt), score(ls)
            tuned = "forced" not in spec
            summary.setdefault((model, "alternate", tuned), []).append(am)
            summary.setdefault((model, "large->small", tuned), []).append(lm)
            print(f"{name if model == 'ring' else '':48} {model:5} {am:10.1%} {ax:12.1%} "
                  f"{lm:8.1%} {lx:9.1%}")  # fmt: skip
    print("\nmedian over sweeps of each sweep's median |error|:")
    for tuned in (True, False):
        label = "NCCL tuned itself" if tuned else "algorithm or protocol forced"
        for split in ("alternate", "large->small"):
            r, c = summary.get(("ring", split, tuned)), summary.get(("nccl", split, tuned))
            if r and c:
                print(f"  {label:30} {split:13} ring {statistics.median(r):6.1%}   "
                      f"nccl {statistics.median(c):6.1%}   ({len(r)} sweeps)")


if __name__ == "__main__":
    main()
