"""Measure gcbench's compressors on this host's CPU: the table CPU compression is
simulated with (`gcbench/data/cpu-costs.json`, read by `gcbench.compress.costs.cpu_table`).

    python benchmarks/measure_cpu_costs.py [--runs 3] [--out gcbench/data/cpu-costs.json]
                                           [--only topk,...]  (the others kept from --out)

`gcbench bench compressors` (`costs.measure`: every compressor's compress and aggregate of
one payload, interleaved, warm-up then the median of 7 repeats, 3 at 2^22 elements) at
2^10..2^22 elements (16 MiB, a bucket's share; at 64 MiB every call's fresh output costs
page faults, 16 ms for fp16's, which a compressor reusing its buffers does not pay: the
fit extrapolates), `--runs` times; each point is the median of the runs (this host is
shared: a single run's point can be off 4x), and `costs.fit` fits the medians. torch runs
its default intra-op threads: both of this host's cores, so a core takes twice the
table's time (`backends.simulate.CPU_TABLE_CORES`). Prints the worst relative error of
each fit and, against run 1 alone, how far a single run's points are from the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from gcbench.compress.costs import CostTable, fit, measure
from gcbench.compress.registry import names

SIZES = tuple(2**e for e in range(10, 23, 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("gcbench/data/cpu-costs.json"))
    ap.add_argument("--only", default="", help="re-measure these kinds, keep the others")
    args = ap.parse_args()
    kinds = sorted(names()) if not args.only else sorted(args.only.split(","))
    runs = [measure(kinds, SIZES) for _ in range(args.runs)]
    table = CostTable(
        runs[0].device,
        f"measured by benchmarks/measure_cpu_costs.py on {time.strftime('%Y-%m-%d')}: "
        f"the median of {args.runs} runs of gcbench bench compressors at 2^10..2^22 "
        f"elements, torch {torch.__version__} with {torch.get_num_threads()} threads on "
        "this project's 2-core host",
        device_key="cpu",
    )
    print(f"{'compressor':12s} {'worst fit error':>16s} {'run 1 vs median':>16s}")
    for kind in kinds:
        pts: dict[str, list[tuple[float, float]]] = {}
        spread = 0.0
        for side in ("compress", "decompress"):
            per_run = [r.points[kind][side] for r in runs]
            pts[side] = [
                (per_run[0][i][0], statistics.median(run[i][1] for run in per_run))
                for i in range(len(per_run[0]))
            ]
            first = zip(per_run[0], pts[side], strict=True)
            spread = max(spread, *(abs(a[1] / m[1] - 1) for a, m in first if m[1] > 0))
        table.compress[kind] = fit(pts["compress"])
        table.decompress[kind] = fit(pts["decompress"])
        table.points[kind] = pts
        worst = max(
            abs(model.seconds(x) / y - 1)
            for model, side in ((table.compress[kind], "compress"),
                                (table.decompress[kind], "decompress"))  # fmt: skip
            for x, y in pts[side] if y > 0
        )
        print(f"{kind:12s} {worst:16.1%} {spread:16.1%}")
    if args.only:  # the other kinds as the file had them, its source saying both
        from gcbench.compress.costs import table_from_json

        kept = table_from_json(json.loads(args.out.read_text()))
        for kind in kept.compress:
            if kind not in kinds:
                table.compress[kind] = kept.compress[kind]
                table.decompress[kind] = kept.decompress[kind]
                table.points[kind] = kept.points[kind]
        table.source = f"{kept.source}; {', '.join(kinds)} again: {table.source}"
    args.out.write_text(json.dumps(table.to_json(), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
