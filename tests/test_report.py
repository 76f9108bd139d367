"""The offline HTML report."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from test_results import cell_rows, one_line, prefill, tiny_suite
from typer.testing import CliRunner

from gcbench import load_results
from gcbench.cli import app
from gcbench.config import Cell, expand, load_suite
from gcbench.errors import ConfigError
from gcbench.report import write_report
from gcbench.report.figures import breakdown_figure, per_cell
from gcbench.results.store import ResultsWarning, RunStore

from conftest import TINY_SUITE


def cell(machines: int = 1, model: str | dict = "tiny-mlp", **network) -> Cell:
    return Cell.model_validate(
        {
            "model": model,
            "network": {"inter_gbps": 10, **network},
            "cluster": {"machines": machines, "gpus_per_machine": 4},
            "strategy": "fp32",
            "compressor": "none",
        }
    )


def fake_run(tmp_path, n_ok=5, n_failed=1):
    store, _ = RunStore.open(tmp_path / "results", "demo")
    cells = [cell(i + 1) for i in range(n_ok + n_failed)]
    store.write_manifest({"suite": "demo", "status": "finished", "grid": [c.id for c in cells]})
    for i, c in enumerate(cells):
        error = None if i < n_ok else "boom"
        store.write_cell(c.id, cell_rows(c, "demo", store.run_id, 2, error), None)
    return store


def trace_views(fig) -> list[int]:
    """The view (dropdown entry) each trace belongs to; 0 for all without a dropdown."""
    if not fig.layout.updatemenus:
        return [0] * len(fig.data)
    buttons = fig.layout.updatemenus[0].buttons
    views = [-1] * len(fig.data)
    for v, b in enumerate(buttons):
        for i, shown in enumerate(b.args[0]["visible"]):
            if shown:
                assert views[i] == -1, "a trace in two views"
                views[i] = v
    assert -1 not in views
    return views


def bars(fig, name: str = "compute") -> list[tuple[int, str]]:
    """(view, label) of every bar of the `name` traces."""
    views = trace_views(fig)
    return [(views[i], x) for i, t in enumerate(fig.data) if t.name == name for x in t.x]


def table_columns(df) -> list[str]:
    from gcbench.report.html import table_cells, table_data

    return table_data(table_cells(df), set())["columns"]


def test_one_bar_per_ok_cell(tmp_path):
    store = fake_run(tmp_path)
    df = load_results(store.path)
    fig = breakdown_figure(df)
    parts = ["compute", "exposed compression", "exposed communication"]
    bubbles = "bubbles (idle gaps on the busiest link)"
    # one panel (tiny-mlp), a view per cluster size (the dropdown): 5 ok cells; each
    # panel's clipped bars' times last (none here)
    assert [t.name for t in fig.data] == [*parts, bubbles, "clipped"] * 5
    assert len(fig.layout.updatemenus[0].buttons) == 5
    drawn = bars(fig)
    assert len(drawn) == len(set(drawn)) == 5
    cells = per_cell(df)
    by_id = {cid[:12]: row for cid, row in zip(cells["cell_id"], cells.to_dict("records"),
                                                strict=True)}  # fmt: skip
    for v in range(5):
        mine = [t for t, view in zip(fig.data, trace_views(fig), strict=True) if view == v]
        cell_ = by_id[mine[0].customdata[0]]
        total = sum(t.y[0] for t in mine if t.name in parts)
        assert total == pytest.approx(cell_["iteration_s"] * 1e3)
        assert mine[-2].y[0] == pytest.approx(cell_["bubbles_s"] * 1e3)
    # it opens on the largest cluster
    first = [t for t, view in zip(fig.data, trace_views(fig), strict=True) if view == 0]
    assert by_id[first[0].customdata[0]]["machines"] == cells["machines"].max()
    assert "mean of its 2 repetitions" in fig.layout.title.text  # a bar is an aggregate


def test_one_panel_per_model_and_still_one_bar_per_cell(tmp_path):
    df = load_results(fake_run(tmp_path).path)
    df.loc[df["machines"] > 3, "model"] = "resnet50"
    fig = breakdown_figure(df)
    assert {t.yaxis for t in fig.data} == {"y", "y2"}  # two panels
    for name in ("compute", "exposed communication"):
        drawn = bars(fig, name)
        assert len(drawn) == len(set(drawn)) == 5


def test_a_panel_of_many_cells_shows_labelled_means():
    """Over MAX_BARS cells in one panel and view: one bar per strategy and compressor,
    its height the mean of its cells', its label saying so."""
    from gcbench.report.figures import MAX_BARS

    base = cell_rows(cell(2), repetitions=1)[0]
    n = MAX_BARS + 5
    rows = [{**base, "cell_id": f"{i:064x}", "seed": i, "iteration_s": 1.0,
             "compute_s": 0.001 * i} for i in range(n)]  # fmt: skip
    df = pd.DataFrame(rows)
    fig = breakdown_figure(df)
    (label,) = [x for _, x in bars(fig)]
    assert label == f"★ fp32 · none (mean of {n} cells)"  # (the fastest, alone)
    compute = next(t for t in fig.data if t.name == "compute")
    assert compute.y[0] == pytest.approx(sum(0.001 * i for i in range(n)) / n * 1e3)
    assert "aggregates" in fig.layout.title.text


def test_cells_that_differ_only_in_unlabelled_columns_get_bars_of_their_own():
    """Two batch sizes x two intra links of tiny-cnn on 2x4 GPUs at 10 Gbps are four
    bars, each its own cell's height (at 81933ad: one "fp32 · 2×4 · 10 Gbps" bar, the
    four cells stacked), and the table has columns for the batch size and the link."""
    rows = []
    for batch in (16, 32):
        for intra in ("nvlink", "pcie"):
            c = Cell.model_validate(
                {
                    "model": {"name": "tiny-cnn", "batch_size": batch},
                    "network": {"intra": intra, "inter_gbps": 10},
                    "cluster": {"machines": 2, "gpus_per_machine": 4},
                    "strategy": "fp32",
                    "compressor": "none",
                }
            )
            rows += cell_rows(c, repetitions=1)
    df = pd.DataFrame(rows)
    fig = breakdown_figure(df)
    xs = [x for _, x in bars(fig)]
    assert len(xs) == len(set(xs)) == 4
    assert fig.layout.xaxis.type == "category"  # never merged, whatever the labels read
    for x in xs:
        assert re.search(r"batch (16|32)", x) and re.search(r"nvlink|pcie", x), x
    parts = [t for t in fig.data if t.type == "bar"]
    heights = sorted(sum(t.y[i] for t in parts) for i in range(4))
    assert heights == pytest.approx(sorted(df["iteration_s"] * 1e3))
    assert {"batch_size", "intra"} <= set(table_columns(df))


@pytest.mark.parametrize(
    "column, values",
    [
        ("device", ["v100", "a100"]),
        ("inter_latency_us", [25.0, 50.0]),
        ("intra_efficiency", [0.8, 0.9]),
        ("nics_per_machine", [1, 2]),
        ("seed", [0, 1]),
        ("cpu_cores", [16, 8]),
    ],
)
def test_every_config_column_that_varies_is_in_the_labels_and_the_table(column, values):
    base = cell_rows(cell(2), repetitions=1)[0]
    df = pd.DataFrame([{**base, column: v, "cell_id": f"{i:064x}"} for i, v in enumerate(values)])
    xs = bars(breakdown_figure(df))
    assert len(set(xs)) == 2, xs
    assert column in table_columns(df)


def test_nccls_protocol_corrections_label_only_nccl_cells():
    """A suite mixing ring cells and a fitted NCCL profile's cells: the LL factors vary,
    but a ring cell's label does not mention protocols it has none of."""
    from gcbench.report.labels import panel_labels

    base = cell_rows(cell(2), repetitions=1)[0]
    rows = [{**base, "collectives": c, "nccl_ll_bandwidth": ll, "cell_id": f"{i:064x}"}
            for i, (c, ll) in enumerate([("ring", 1.0), ("nccl", 0.5)])]  # fmt: skip
    ring, nccl = panel_labels(pd.DataFrame(rows))
    assert "collectives as ring" in ring and "LL" not in ring, ring
    assert "collectives as nccl" in nccl and "LL bandwidth × 0.5" in nccl, nccl


def test_cells_the_columns_cannot_tell_apart_get_their_ids():
    """Two versions of one profile file: same columns, different cells."""
    base = cell_rows(cell(2), repetitions=1)[0]
    df = pd.DataFrame([{**base, "cell_id": c * 64} for c in "ab"])
    xs = [x for _, x in bars(breakdown_figure(df))]
    assert len(set(xs)) == 2 and all("#" in x for x in xs), xs


def table_rows(page: Path) -> list[list]:
    """The rows of a run page's results table (results.js beside the page)."""
    text = (page.parent / "results.js").read_text()
    prefix = "window.GC_RESULTS = "
    assert text.startswith(prefix) and text.endswith(";\n")
    return json.loads(text[len(prefix) : -2])["rows"]


def test_page_is_offline(tmp_path):
    store = fake_run(tmp_path)
    index = write_report(store.path.parent, tmp_path / "out")
    assert index == tmp_path / "out" / store.run_id / "index.html"
    page = index.read_text()
    assert (tmp_path / "out" / "plotly.min.js").stat().st_size > 1_000_000
    assert '<script src="../plotly.min.js"></script>' in page
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file() and path.name != "plotly.min.js":
            text = path.read_text(errors="replace")
            assert not re.search(r"https?://", text), (path, re.findall(r"https?://\S{0,40}", text))
    assert "1 cell(s) failed" in page
    rows = table_rows(index)
    assert len(rows) == 6  # 5 ok cells + 1 failed
    assert any("boom" in map(str, r) for r in rows)
    assert "None" not in page
    suite_page = (tmp_path / "out" / "index.html").read_text()
    assert f'<a href="{store.run_id}/index.html">{store.run_id}</a>' in suite_page
    assert "Every cell: strategy=fp32 · compressor=none · gpus_per_machine=4" in page
    assert "seq_len=default" in page and "device=v100" in page


def test_empty_run_still_gives_a_page(tmp_path):
    store = fake_run(tmp_path, 0, 0)
    page = write_report(store.path, tmp_path / "out").read_text()
    assert "No finished cells yet" in page


def test_the_suites_description_reaches_the_report(tmp_path):
    """(At 81933ad the description was read from the suite and dropped.)"""
    suite = tiny_suite(tmp_path, "description: Four <tiny> cells & more.\n" + TINY_SUITE)
    from gcbench.runner import run_suite

    prefill(tmp_path / "results", suite)
    run_suite(suite, tmp_path / "results")
    page = write_report(tmp_path / "results" / "tiny", tmp_path / "out").read_text()
    assert "<p>Four &lt;tiny&gt; cells &amp; more.</p>" in page


def test_an_unchanged_report_is_not_rewritten(tmp_path):
    store = fake_run(tmp_path)
    index = write_report(store.path, tmp_path / "out")
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")}
    assert len(stamps) > 6  # assets, the suite page, the run page, its data and downloads
    page = index.read_bytes()
    write_report(store.path, tmp_path / "out")
    assert index.read_bytes() == page  # the same results give the same page
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")} == stamps


def test_the_report_shows_the_current_grid_unless_asked_for_all_cells(tmp_path):
    """Cells on disk that the latest run's suite no longer has stay out of the report
    (at 81933ad they were drawn and tabled with the current ones)."""
    store = fake_run(tmp_path, 6, 0)
    manifest = store.read_manifest()
    store.write_manifest({**manifest, "grid": manifest["grid"][:4]})
    index = write_report(store.path, tmp_path / "out")
    page = index.read_text()
    assert len(table_rows(index)) == 4 and "4 of the 4 cells of the suite&#x27;s grid" in page
    index = write_report(store.path, tmp_path / "all", all_cells=True)
    page = index.read_text()
    assert len(table_rows(index)) == 6 and "2 of them no longer in the suite&#x27;s grid" in page
    r = CliRunner().invoke(
        app, ["report", str(store.path), "--out", str(tmp_path / "cli"), "--all-cells"]
    )
    assert r.exit_code == 0, r.output
    assert len(table_rows(tmp_path / "cli" / store.run_id / "index.html")) == 6


def test_unreadable_cells_are_left_out_and_said(tmp_path):
    store = fake_run(tmp_path)
    [first, *_] = store.cell_files()
    first.write_bytes(first.read_bytes()[:100])
    with pytest.warns(ResultsWarning, match="unreadable"):
        page = write_report(store.path, tmp_path / "out").read_text()
    assert "Left out: " in page and first.name in page
    r = CliRunner().invoke(app, ["report", str(store.path), "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    [line] = [x for x in r.stderr.splitlines() if x.startswith("warning: ")]
    assert first.name in line and "unreadable" in line


@pytest.mark.parametrize("suite", ["../../escaped", "/tmp/abs", "a/b", "..", ""])
def test_the_default_report_folder_comes_from_a_checked_suite_name(tmp_path, monkeypatch, suite):
    """`report` without --out writes reports/<suite>; a manifest whose suite is a path is
    refused in one line, nothing written (at 81933ad "../../escaped" wrote two folders
    above reports/)."""
    store = fake_run(tmp_path)
    store.manifest_path.write_text(json.dumps({**store.read_manifest(), "suite": suite}))
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    with pytest.raises(ConfigError) as e:
        write_report(store.path)
    line = one_line(e.value)
    assert line.startswith(f"{store.manifest_path}: suite: ") and "not a suite name" in line
    r = CliRunner().invoke(app, ["report", str(store.path)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert list(work.iterdir()) == [] and sorted(p.name for p in (tmp_path / "a").rglob("*")) == [
        "b",
        "c",
    ]


def test_default_report_folder(tmp_path, monkeypatch):
    store = fake_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert write_report(store.path) == Path(f"reports/demo/{store.run_id}/index.html")
    assert (tmp_path / "reports/demo/index.html").is_file()


def test_an_unwritable_out_folder_is_one_line(tmp_path):
    store = fake_run(tmp_path)
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "x", tmp_path / ("l" * 300)):
        r = CliRunner().invoke(app, ["report", str(store.path), "--out", str(out)])
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith(f"error: --out: cannot write {out}: ")
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "results"]


def test_every_strategy_is_drawn_once_per_cell():
    """The strategies suite (every strategy x every compressor, with and without CPU
    servers), simulated in-process: each ok cell is one bar with a label of its own."""
    from gcbench import strategies
    from gcbench.config import load_suite

    from conftest import ROOT

    rows = []
    for c in expand(load_suite(ROOT / "suites/strategies.yaml")):
        rows += cell_rows(c, "strategies", repetitions=1)
    df = pd.DataFrame(rows)
    fig = breakdown_figure(df)
    compute = [t for t in fig.data if t.name == "compute"]
    assert sum(len(t.x) for t in compute) == len(df)
    for t in compute:
        assert len(set(t.x)) == len(t.x)  # no two cells share a bar
    drawn = {label.removeprefix("★ ").split(" · ")[0] for t in compute for label in t.x}
    assert drawn == set(strategies.names()) - strategies.planner_names()


def test_warnings_are_one_line_each(tmp_path):
    store = fake_run(tmp_path)
    for p in store.cell_files()[:2]:
        p.write_bytes(b"")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_results(store.path)
    assert df["cell_id"].nunique() == 4
    lines = [str(w.message) for w in caught if w.category is ResultsWarning]
    assert len(lines) == 2 and all("\n" not in line for line in lines)


def test_gap_to_upper_bound_pairs_each_strategy_with_the_bound_of_its_cell():
    """ByteComp Fig. 13's view: ratios against the upper bound of the same workload, the
    same compressor for strategies that take one; strategies without a compressor pair
    with every compressor's bound. Checked against the simulator directly."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.report.figures import gap_figure, gap_to_upper_bound

    from conftest import write

    base = (
        "name: gap\nrepetitions: 1\ngrid:\n  model: [tiny-mlp]\n"
        "  compressor: [dgc-1pct, randomk-1pct]\n"
        "  strategy: [fp32, allgather, bytecomp, upper-bound]\n"
        "  network: [{inter_gbps: 10}, {inter_gbps: 100}]\n"
        "  cluster: [{machines: 2, gpus_per_machine: 4}]\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cells = expand(load_suite(write(Path(tmp), "gap.yaml", base)))
    rows = []
    for c in cells:
        rows += cell_rows(c, "gap", repetitions=2)
    gaps = gap_to_upper_bound(pd.DataFrame(rows))
    # 2 networks x 2 compressors bounds; per bound: fp32, allgather, bytecomp
    assert len(gaps) == 12
    assert sorted(gaps.groupby("strategy").size().items()) == [
        ("allgather", 4), ("bytecomp", 4), ("fp32", 4)]  # fmt: skip
    by_id = {c.id: c for c in cells}
    for _, g in gaps.iterrows():
        bound, other = by_id[g["bound_cell_id"]], by_id[g["cell_id"]]
        assert other.network == bound.network
        if other.strategy != "fp32":
            assert other.compressor == bound.compressor
        want = simulate_cell(other).metrics["iteration_s"] / simulate_cell(bound).metrics[
            "iteration_s"]  # fmt: skip
        assert g["ratio"] == pytest.approx(want, rel=1e-12)
        assert g["ratio"] >= 1 - 1e-12  # every strategy here is a candidate of the bound
    fig = gap_figure(pd.DataFrame(rows))
    assert len(fig.data) == 3 and all(len(t.x) == 4 for t in fig.data)
    assert "aggregate" in fig.layout.title.text


def test_the_gap_figure_reads_results_written_before_newer_columns():
    """(Found in review: results without `network_profile` and the other columns added
    later made gap_to_upper_bound raise KeyError.)"""
    from gcbench.report.figures import gap_to_upper_bound

    rows = []
    for strategy in ("upper-bound", "fp32"):
        c = Cell.model_validate({"model": "tiny-mlp", "network": {"inter_gbps": 10},
                                 "cluster": {"machines": 2, "gpus_per_machine": 2},
                                 "strategy": strategy, "compressor": "dgc-1pct"})  # fmt: skip
        rows += cell_rows(c, repetitions=1)
    df = pd.DataFrame(rows).drop(columns=["network_profile", "compute_scale", "inter_overrides"])
    assert list(gap_to_upper_bound(df)["strategy"]) == ["fp32"]


def test_the_run_page_shows_the_runs_only_filters(tmp_path):
    """`gcbench run --only model=tiny-mlp machines=2` keeps its filters in the manifest
    as one mapping each; the run page shows them as the command line wrote them (at
    3a14aa4 every run with `--only` crashed writing its report, issue #35 item 4)."""
    store = fake_run(tmp_path)
    only = [{"model": ["tiny-mlp"]}, {"machines": [1, 2]}]
    store.write_manifest({**store.read_manifest(), "only": only})
    write_report(store.path, tmp_path / "out")
    page = (tmp_path / "out" / store.run_id / "index.html").read_text()
    assert "<dt>only</dt><dd>model=tiny-mlp machines=1,2</dd>" in page


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"only": [1]}, "only.0"),
        ({"only": [{"model": {"a": "b"}}]}, "only.0"),
        ({"cluster": {"nodes": 5}}, "cluster.nodes"),
    ],
)
def test_odd_manifest_fields_are_one_line_errors(tmp_path, fields, field):
    """A manifest field the report cannot read (hand-edited, or written by another tool)
    is one line naming the file and the field, exit 2 (issue #35 item 5: a traceback)."""
    store = fake_run(tmp_path)
    store.manifest_path.write_text(json.dumps({**store.read_manifest(), **fields}))
    r = CliRunner().invoke(app, ["report", str(store.path), "--out", str(tmp_path / "cli")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert f"manifest.json: {field}: expected" in r.stderr


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda r: r.update(iteration_s="fast"), "iteration_s"),
        (lambda r: r.pop("model"), "model"),
        # a column reports read of every row (a review, 2026-11-29: a KeyError)
        (lambda r: r.pop("inter_gbps"), "inter_gbps"),
        (lambda r: r.pop("wire_bytes"), "wire_bytes"),
        (lambda r: r.update(machines="two"), "machines"),
        (lambda r: r.update(status="great"), "status"),
        (lambda r: r.update(iteration_s=float("inf")), "iteration_s"),
        # issue #35 item 16: a 50 MiB string made `report` use 894 MB and write 255 MB
        (lambda r: r.update(error="x" * 5 * 2**20), "MiB"),
    ],
)
def test_a_crafted_cell_file_is_left_out_and_said(tmp_path, edit, why):
    """A cell file whose rows do not fit the Record schema (written by another tool, or
    crafted: its checksum matches) is left out with one warning naming the file and the
    column, as an unreadable one is (issue #35 item 9: the report crashed)."""
    store = fake_run(tmp_path)
    c = cell(9)
    rows = cell_rows(c, "demo", store.run_id, 2)
    for r in rows:
        edit(r)
    store.write_cell(c.id, rows, None)
    store.write_manifest({**store.read_manifest(), "grid": [*store.read_manifest()["grid"], c.id]})
    with pytest.warns(ResultsWarning, match=f"{c.id}.parquet: unreadable .*{why}"):
        index = write_report(store.path, tmp_path / "out")
    assert len(table_rows(index)) == 6


def test_a_stray_parquet_among_the_cells_is_left_out_not_a_format_error(tmp_path):
    """Another tool's parquet in `cells/` read as gcbench's format 1 (no format_version
    column) and refused the whole run, exit 2 (a review, 2026-11-29): it is one
    unreadable file, left out with a warning."""
    store = fake_run(tmp_path)
    first, *others = sorted(store.finished())
    pd.DataFrame({"foo": [1, 2]}).to_parquet(store.path / "cells" / f"{first}.parquet")
    with pytest.warns(ResultsWarning, match="holds no gcbench cell rows"):
        index = write_report(store.path, tmp_path / "out")
    assert len(table_rows(index)) == 6 * len(others) // (len(others) + 1)  # the rest kept


def test_a_trace_with_a_number_json_cannot_hold_is_left_out(tmp_path):
    """A trace span at 1e400 (JSON reads it as infinity): the cell's page shows no
    timeline for it and says why; the report does not crash (issue #35 item 9)."""
    store = fake_run(tmp_path, 1, 0)
    (cid,) = store.finished()
    span = {"worker": 0, "stream": "compute", "name": "x", "kind": "forward", "start_s": 1e400,
            "dur_s": 1.0, "bytes": 0}  # fmt: skip
    (store.traces_dir).mkdir(exist_ok=True)
    (store.traces_dir / f"{cid}.json.gz").write_bytes(
        __import__("gzip").compress(json.dumps([span]).replace("Infinity", "1e400").encode())
    )
    with pytest.warns(ResultsWarning, match="cannot draw it .a span.s time or bytes is not"):
        write_report(store.path, tmp_path / "out")


def test_breakdown_sorts_stars_the_winner_and_clips_outliers():
    """Issue #36: bars fastest first; the fastest strategy one can run starred (not the
    upper bound, faster still); a bar over CLIP times the fastest clipped at that height
    with its time written on it."""
    from test_report_pages import grid_cell

    from gcbench.report.figures import CLIP

    rows = []
    for s, c in (("fp32", "none"), ("fp16", "none"), ("upper-bound", "dgc-1pct")):
        rows += cell_rows(grid_cell(s, c, 2, 10.0, "tiny-mlp"), repetitions=1)
    df = pd.DataFrame(rows)
    bound = df["strategy"] == "upper-bound"
    df.loc[bound, ["compute_s", "comm_exposed_s", "compress_exposed_s"]] = [1e-6, 0.0, 0.0]
    slow = df["strategy"] == "fp32"
    df.loc[slow, "comm_exposed_s"] = 50.0  # 50 s: an outlier
    fig = breakdown_figure(df)
    compute = next(t for t in fig.data if t.name == "compute")
    labels = list(compute.x)
    assert labels[0].startswith("upper-bound") and labels[1].startswith("★ fp16")
    assert labels[-1].startswith("fp32") and sum(x.startswith("★") for x in labels) == 1
    fastest = sum(next(t for t in fig.data if t.name == p).y[1]
                  for p in ("compute", "exposed compression", "exposed communication"))  # fmt: skip
    clipped = next(t for t in fig.data if t.name == "clipped")
    assert list(clipped.x) == [labels[-1]] and clipped.text[0].startswith("50,0")
    assert fig.layout.yaxis.range[1] == pytest.approx(CLIP * fastest * 1.08)
