"""Report speed at scale (issue #15): `gcbench report` over 1,000 and 10,000 cells, and
the 10,000-cell run page's load in Chromium.

    python benchmarks/report.py [--cells 1000,10000] [--chromium /usr/bin/chromium] [--keep DIR]

The results are written as `gcbench run` writes them (one parquet file, one trace and,
for planner cells, one plan per cell), from real simulated cells: 24 templates (resnet50,
bert-base and gpt2; fp32, fp16, allgather with dgc 1% and bytecomp with dgc 1%; 2 and 8
machines of 8 V100s at 100 Gbps), each template's trace and plan stored as the simulator
wrote them. The grid around them (models x strategies x compressors x 1-32 machines x
five bandwidths x seeds, up to the asked count) copies a template's rows into each
cell's config, its times scaled by a seeded factor, so every cell is distinct and the
figures have the shape of a real sweep. Preparing the results is not timed.

Timed: `write_report` into an empty folder (cold: every page, figure, table row, cell
file and download), then again over the same folder (nothing changed: nothing is
rewritten), and in Chromium (headless, from file://) the run page from navigation until
every plotly div is drawn and the table's first page is filled.
Issue #15's targets: 1,000 cells <= 10 s, 10,000 <= 60 s, the 10,000-cell page <= 5 s.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

MODELS = ("resnet50", "bert-base", "gpt2")
TEMPLATES = (("fp32", "none"), ("fp16", "none"), ("allgather", "dgc-1pct"),
             ("bytecomp", "dgc-1pct"))  # fmt: skip
STRATEGIES = ("fp32", "fp16", "fp32-2level", "allgather", "allgather-2level", "allreduce",
              "hipress", "bytecomp", "bytecomp-greedy", "upper-bound")  # fmt: skip
COMPRESSORS = ("dgc-1pct", "randomk-1pct", "efsignsgd", "onebit")
MACHINES = (1, 2, 4, 8, 16, 32)
GBPS = (10.0, 25.0, 40.0, 100.0, 200.0)


def cell(model: str, strategy: str, compressor: str, machines: int, gbps: float, seed: int = 0):
    from gcbench.config import Cell

    return Cell.model_validate({
        "model": model,
        "network": {"intra": "nvlink", "inter_gbps": gbps},
        "cluster": {"machines": machines, "gpus_per_machine": 8},
        "strategy": strategy,
        "compressor": compressor,
        "seed": seed,
    })  # fmt: skip


def templates() -> dict[tuple[str, str, int], tuple[dict, list, dict | None]]:
    """(model, strategy, machines) -> (metrics of one repetition, spans, plan)."""
    from gcbench.runner import execute_cell

    out = {}
    for model in MODELS:
        for strategy, compressor in TEMPLATES:
            for machines in (2, 8):
                metrics, spans, plan = execute_cell(
                    cell(model, strategy, compressor, machines, 100.0), 1
                )
                out[(model, strategy, machines)] = (metrics[0], spans, plan)
    return out


def write_results(root: Path, n: int) -> Path:
    """A finished run of `n` distinct cells under `root`; returns the run folder."""
    import gcbench
    from gcbench.results.schema import record
    from gcbench.results.store import RunStore

    made = templates()
    rng = random.Random(n)
    store, _ = RunStore.open(root, f"bench{n}")
    ids = []
    combos = [(m, s, c, k, g) for m in MODELS for s in STRATEGIES for c in COMPRESSORS
              for k in MACHINES for g in GBPS]  # fmt: skip
    seed = 0
    while len(ids) < n:
        for model, strategy, compressor, machines, gbps in combos:
            if len(ids) >= n:
                break
            if strategy.startswith("fp32") or strategy == "fp16":
                compressor = "none"
            try:
                c = cell(model, strategy, compressor, machines, gbps, seed)
            except ValueError:  # a strategy the compressor cannot take (allreduce of dgc)
                continue
            if c.id in ids:
                continue
            base = "bytecomp" if "bytecomp" in strategy or strategy == "upper-bound" else (
                strategy if strategy in ("fp32", "fp16") else "allgather")  # fmt: skip
            metrics, spans, plan = made[(model, base, 8 if machines >= 8 else 2)]
            f = rng.uniform(0.8, 1.25)
            scaled = dict(metrics)
            for k in ("iteration_s", "comm_exposed_s", "compress_exposed_s", "bubbles_s"):
                if isinstance(scaled.get(k), float):
                    scaled[k] *= f
            scaled["throughput"] = metrics["throughput"] / f
            scaled["scaling_factor"] = metrics["scaling_factor"] / f
            row = record(suite=store.suite, cell_id=c.id, config=c.flat(), metrics=scaled,
                         error=None, repetition=0, gcbench_version=gcbench.__version__,
                         run_id=store.run_id, meta={})  # fmt: skip
            store.write_cell(c.id, [row], spans, plan and {**plan, "cell_id": c.id})
            ids.append(c.id)
        seed += 1
    store.write_manifest({"suite": store.suite, "status": "finished", "grid": ids,
                          "description": f"{n} cells for benchmarks/report.py"})  # fmt: skip
    return store.path


def page_load_s(chromium: str, page: Path) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        start = time.perf_counter()
        tab.goto(page.resolve().as_uri())
        tab.wait_for_function(
            "() => [...document.querySelectorAll('.plotly-graph-div')].every(d => d._fullData)"
            " && document.querySelectorAll('#results tbody tr').length > 0"
        )
        took = time.perf_counter() - start
        browser.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", default="1000,10000")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--keep", type=Path, help="keep the results and reports here")
    args = parser.parse_args()

    from gcbench.report import write_report

    root = args.keep or Path(tempfile.mkdtemp(prefix="gcbench-report-bench-"))
    print(f"{'cells':>7} {'prepare s':>10} {'report s':>9} {'again s':>8} {'MiB':>7}"
          f" {'page load s':>12}")  # fmt: skip
    try:
        for n in (int(x) for x in args.cells.split(",")):
            t = time.perf_counter()
            run = write_results(root / "results", n)
            prepare = time.perf_counter() - t
            out = root / "reports" / f"bench{n}"
            t = time.perf_counter()
            page = write_report(run, out)
            cold = time.perf_counter() - t
            t = time.perf_counter()
            write_report(run, out)
            warm = time.perf_counter() - t
            mib = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
            load = page_load_s(args.chromium, page) if Path(args.chromium).exists() else None
            shown = f"{load:12.2f}" if load is not None else f"{'(no chromium)':>12}"
            print(f"{n:7d} {prepare:10.1f} {cold:9.2f} {warm:8.2f} {mib:7.1f} {shown}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
