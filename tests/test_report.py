"""The offline HTML report."""

from __future__ import annotations

import re

from gcbench.report import write_report
from gcbench.report.figures import breakdown_figure
from gcbench.results.store import RunStore


def fake_run(tmp_path, n_ok=5, n_failed=1):
    store, _ = RunStore.open(tmp_path / "results", "demo")
    store.write_manifest({"suite": "demo", "status": "finished"})
    for i in range(n_ok + n_failed):
        ok = i < n_ok
        rows = [
            {
                "cell_id": f"c{i}",
                "model": "tiny-mlp",
                "strategy": "fp32",
                "compressor": "none",
                "machines": i + 1,
                "gpus_per_machine": 4,
                "gpus": 4 * (i + 1),
                "inter_gbps": 10.0,
                "intra": "nvlink",
                "status": "ok" if ok else "failed",
                "error": "" if ok else "boom",
                "repetition": r,
                "iteration_s": 0.3 if ok else None,
                "compute_s": 0.1 if ok else None,
                "compress_exposed_s": 0.05 if ok else None,
                "comm_exposed_s": 0.15 if ok else None,
            }
            for r in range(2)
        ]
        store.write_cell(f"c{i}", rows, None)
    return store


def test_one_bar_per_ok_cell(tmp_path):
    from gcbench import load_results

    store = fake_run(tmp_path)
    fig = breakdown_figure(load_results(store.path))
    parts = ["compute", "exposed compression", "exposed communication"]
    assert [t.name for t in fig.data] == parts  # one panel: tiny-mlp
    for trace in fig.data:
        assert len(trace.x) == 5 and len(set(trace.x)) == 5
    assert sum(t.y[0] for t in fig.data) == 300.0  # ms: the parts stack to the iteration


def test_one_panel_per_model_and_still_one_bar_per_cell(tmp_path):
    from gcbench import load_results

    df = load_results(fake_run(tmp_path).path)
    df.loc[df["machines"] > 3, "model"] = "resnet50"
    fig = breakdown_figure(df)
    assert [t.name for t in fig.data] == [
        "compute",
        "exposed compression",
        "exposed communication",
    ] * 2
    for name in ("compute", "exposed communication"):
        bars = [x for t in fig.data if t.name == name for x in t.x]
        assert len(bars) == len(set(bars)) == 5


def test_page_is_offline(tmp_path):
    store = fake_run(tmp_path)
    index = write_report(store.path.parent, tmp_path / "out")
    page = index.read_text()
    assert (tmp_path / "out" / "plotly.min.js").stat().st_size > 1_000_000
    assert '<script src="plotly.min.js"></script>' in page
    assert not re.search(r"https?://", page), re.findall(r"https?://\S{0,40}", page)
    assert "1 cell(s) failed" in page and "boom" in page
    assert page.count("<tr") == 1 + 6  # header + 5 ok cells + 1 failed
    assert "None" not in page


def test_empty_run_still_gives_a_page(tmp_path):
    store = fake_run(tmp_path, 0, 0)
    page = write_report(store.path, tmp_path / "out").read_text()
    assert "No finished cells yet" in page


def test_every_strategy_is_drawn_once_per_cell():
    """The strategies suite (every strategy x every compressor, with and without CPU
    servers), simulated in-process: each ok cell is one bar with a label of its own."""
    import pandas as pd

    import gcbench
    from gcbench.config import expand, load_suite
    from gcbench.config.strategies import STRATEGIES
    from gcbench.report.figures import breakdown_figure
    from gcbench.results.schema import record
    from gcbench.runner import execute_cell

    from conftest import ROOT

    rows = []
    for c in expand(load_suite(ROOT / "suites/strategies.yaml")):
        metrics, _ = execute_cell(c, 1)
        rows.append(
            record(suite="strategies", cell_id=c.id, config=c.flat(), metrics=metrics[0],
                   error=None, repetition=0, gcbench_version=gcbench.__version__,
                   run_id="r", meta={})
        )  # fmt: skip
    df = pd.DataFrame(rows)
    fig = breakdown_figure(df)
    bars = [t for t in fig.data if t.name == "compute"]
    assert sum(len(t.x) for t in bars) == len(df)
    for t in bars:
        assert len(set(t.x)) == len(t.x)  # no two cells share a bar
    drawn = {label.split(" · ")[0] for t in bars for label in t.x}
    assert drawn == set(STRATEGIES)
