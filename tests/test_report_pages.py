"""The report's figures (scaling, bandwidth, speed-up, plan map, timeline, agreement),
its cell pages, --self-contained and --compare. Every result here is simulated
in-process (no Ray)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest
from test_report import trace_views
from test_results import cell_rows, tiny_suite
from typer.testing import CliRunner

from gcbench import load_results
from gcbench.cli import app
from gcbench.config import Cell, expand
from gcbench.errors import ConfigError
from gcbench.report import against as A
from gcbench.report import figures as F
from gcbench.report.compare import compare_runs
from gcbench.report.html import script_json, write_report
from gcbench.results.store import RunStore
from gcbench.runner import execute_cell


def grid_cell(strategy="fp32", compressor="none", machines=1, gbps=10.0, model="tiny-cnn"):
    return Cell.model_validate(
        {
            "model": model,
            "network": {"inter_gbps": gbps},
            "cluster": {"machines": machines, "gpus_per_machine": 4},
            "strategy": strategy,
            "compressor": compressor,
        }
    )


STRATS = [("fp32", "none"), ("fp16", "none"), ("allgather", "dgc-1pct"),
          ("allgather", "efsignsgd"), ("allreduce", "randomk-1pct")]  # fmt: skip


@pytest.fixture(scope="module")
def grid() -> pd.DataFrame:
    """tiny-cnn and tiny-mlp, five strategies, 1/2/4 machines of 4 GPUs, 10/100 Gbps."""
    rows = []
    for model in ("tiny-cnn", "tiny-mlp"):
        for s, c in STRATS:
            for m in (1, 2, 4):
                for gbps in (10.0, 100.0):
                    rows += cell_rows(grid_cell(s, c, m, gbps, model), repetitions=1)
    return pd.DataFrame(rows)


def points(fig, view: int, column: str = "x") -> list:
    views = trace_views(fig)
    return [p for i, t in enumerate(fig.data) if views[i] == view for p in (t[column] or [])]


def test_scaling_draws_every_cell_once_per_view_with_linear_scaling(grid):
    fig = F.scaling_figure(grid)
    buttons = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert buttons == ["10 Gbps", "100 Gbps"]  # the bandwidth is the control
    views = trace_views(fig)
    cells = F.per_cell(grid)
    for v, gbps in enumerate((10.0, 100.0)):
        mine = cells[cells["inter_gbps"] == gbps]
        lines = [t for i, t in enumerate(fig.data) if views[i] == v and t.name != "linear scaling"]
        throughput = [t for t in lines if t.xaxis in ("x", "x3")]  # the left column
        drawn = [(t.xaxis, t.name, x) for t in throughput for x in t.x]
        # one point per cell, and no two cells at one point of one line
        assert len(drawn) == len(set(drawn)) == len(mine) == 2 * 5 * 3
        ys = [y for t in throughput for y in t.y]
        assert sorted(ys) == pytest.approx(sorted(mine["throughput"]))
    # the linear line: one GPU's throughput (fp32 on 1x4 = 4 GPUs at scaling factor f
    # means throughput / (4 f) per GPU) times the GPUs
    cnn = cells[(cells["model"] == "tiny-cnn") & (cells["inter_gbps"] == 10.0)]
    fp32 = cnn[(cnn["strategy"] == "fp32") & (cnn["machines"] == 1)]
    single = float(fp32["throughput"].iloc[0] / (4 * fp32["scaling_factor"].iloc[0]))
    linear = next(t for t in fig.data if t.name == "linear scaling" and t.xaxis == "x")
    assert list(linear.x) == [4, 8, 16]
    assert list(linear.y) == pytest.approx([single * g for g in (4, 8, 16)])


def test_bandwidth_sweep_leaves_out_one_machine_and_has_a_log_axis(grid):
    fig = F.bandwidth_figure(grid)
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["2×4", "4×4"]
    assert fig.layout.xaxis.type == "log"
    cells = F.per_cell(grid)
    for v, m in enumerate((2, 4)):
        mine = cells[cells["machines"] == m]
        ys = points(fig, v, "y")
        assert sorted(ys) == pytest.approx(sorted(mine["throughput"]))
        assert sorted(set(points(fig, v))) == [10.0, 100.0]


def test_speedup_is_fp32_over_the_best_strategy_of_each_compressor(grid):
    """Checked against a loop over the cells written here (fp32 is the grid's one
    baseline without compression)."""
    table = F.speedup_table(grid)
    assert set(table["baseline"]) == {"fp32"}
    cells = F.per_cell(grid)
    want = {}
    for _, fp32 in cells[cells["strategy"] == "fp32"].iterrows():
        same = cells[(cells["model"] == fp32["model"]) & (cells["machines"] == fp32["machines"])
                     & (cells["inter_gbps"] == fp32["inter_gbps"])]  # fmt: skip
        for comp in ("dgc-1pct", "efsignsgd", "randomk-1pct"):
            best = same[same["compressor"] == comp]["iteration_s"].min()
            want[(comp, fp32["model"], fp32["machines"], fp32["inter_gbps"])] = (
                fp32["iteration_s"] / best
            )
    got = {
        (r["compressor"], r["model"], r["machines"], r["inter_gbps"]): r["speedup"]
        for r in table.to_dict("records")
    }
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12)
    fig = F.speedup_figure(grid)
    assert len(fig.data) == 3 * 2  # a panel per compressor, a view per bandwidth
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["10 Gbps", "100 Gbps"]


def test_agreement_pairs_emulated_cells_with_their_simulated_twins(grid):
    sim = grid[(grid["model"] == "tiny-cnn") & (grid["machines"] == 2)]
    emu = sim.assign(
        mode="emulate",
        clock="virtual",
        cell_id=[f"{i:064x}" for i in range(len(sim))],
        iteration_s=sim["iteration_s"] * 1.01,
    )
    df = pd.concat([grid, emu], ignore_index=True)
    pairs = A.agreement_table(df)
    assert len(pairs) == len(sim)
    assert (pairs["iteration_s"] / pairs["sim_iteration_s"]).tolist() == pytest.approx(
        [1.01] * len(sim)
    )
    assert set(pairs["sim_cell_id"]) == set(sim["cell_id"])
    fig = A.agreement_figure(df)
    assert len(fig.data[0].x) == len(sim)
    assert A.agreement_table(grid).empty  # no emulated cells: no figure


def test_user_strings_reach_plotly_escaped():
    """plotly renders some HTML in its text: a model name from a profile file shows as
    the characters it is."""
    rows = cell_rows(grid_cell(machines=2), repetitions=1)
    df = pd.DataFrame(rows).assign(model='<img src=x onerror="alert(1)">')
    fig = F.breakdown_figure(df)
    text = json.dumps(fig.to_plotly_json(), default=str)
    assert "<img" not in text and "&lt;img src=x" in text
    assert "<img" not in script_json({"a": "<img>"}) and "</script" not in script_json("</script>")


def test_the_plan_map_and_the_timeline_are_valid_figures():
    c = grid_cell("bytecomp", "dgc-1pct", machines=2, model="tiny-mlp")
    metrics, spans, stored = execute_cell(c, 1)
    plan = go.Figure(F.plan_map_figure(stored))  # plotly validates the dict
    options = {t["option"] for t in stored["tensors"]}
    assert {t.name for t in plan.data} == options
    assert sorted(x for t in plan.data for x in t.x) == list(range(len(stored["tensors"])))
    numel = {t.name: sorted(t.y) for t in plan.data}
    for option in options:
        want = [t["numel"] for t in stored["tensors"] if t["option"] == option]
        assert numel[option] == sorted(want)
    timeline = go.Figure(F.timeline_figure(spans))  # plotly validates the dict
    mine = [s for s in spans if s["worker"] == 0]
    bars = [(y, b, x) for t in timeline.data for y, b, x in zip(t.y, t.base, t.x, strict=True)]
    assert len(bars) == len(mine)
    for s in mine:
        assert (s["stream"], pytest.approx(s["start_s"] * 1e3, abs=1e-6),
                pytest.approx(s["dur_s"] * 1e3, abs=1e-6)) in bars  # fmt: skip


def suite_run(tmp_path, text=None, spans=True) -> RunStore:
    from test_results import prefill

    suite = tiny_suite(tmp_path) if text is None else tiny_suite(tmp_path, text)
    store = prefill(tmp_path / "results", suite, spans=spans)
    store.write_manifest({"suite": suite.name, "status": "finished",
                          "grid": [c.id for c in expand(suite)]})  # fmt: skip
    return store


def test_cell_pages_are_written_for_cells_with_a_trace(tmp_path):
    store = suite_run(tmp_path)
    page = write_report(store.path, tmp_path / "out")
    ids = sorted(store.finished())
    files = sorted(p.stem for p in (page.parent / "cells").glob("*.js"))
    assert files == ids and (page.parent / "cell.html").is_file()
    text = (page.parent / "cells" / f"{ids[0]}.js").read_text()
    stamp, _, body = text.partition("\n")
    assert stamp.startswith("// ") and len(stamp) == 3 + 64  # what the file was made of
    data = json.loads(body.removeprefix("window.GC_CELL = ").removesuffix(";\n"))
    assert [name for name, _ in data["figures"]] == ["timeline"]
    assert dict(data["config"])["strategy"] in ("fp32", "fp16")
    table = json.loads((page.parent / "results.js").read_text()[len("window.GC_RESULTS = "):-2])
    assert all(table["details"])
    stamps = {p: p.stat().st_mtime_ns for p in (page.parent / "cells").iterdir()}
    write_report(store.path, tmp_path / "out")
    assert {p: p.stat().st_mtime_ns for p in (page.parent / "cells").iterdir()} == stamps


def test_self_contained_page_needs_no_other_file(tmp_path):
    store = suite_run(tmp_path, spans=False)
    page = write_report(store.path, tmp_path / "out", self_contained=True).read_text()
    assert not re.search(r"<script[^>]*\bsrc=|<link\b", page)
    assert "window.GC_RESULTS = {" in page and "Plotly.newPlot" in page
    assert len(page) > 3_000_000  # plotly inside


def two_runs(tmp_path, second_gbps=100):
    """The same four cells at 10 Gbps (run a) and at `second_gbps` (run b)."""
    stores = []
    for name, gbps in (("a", 10), ("b", second_gbps)):
        store, _ = RunStore.open(tmp_path / name, "demo")
        cells = [grid_cell(s, c, 2, gbps) for s, c in STRATS[:2]] + [
            grid_cell(s, c, 4, gbps) for s, c in STRATS[:2]
        ]
        store.write_manifest({"suite": "demo", "status": "finished", "grid": [c.id for c in cells]})
        for c in cells:
            store.write_cell(c.id, cell_rows(c, "demo", store.run_id, 1), None)
        stores.append(store)
    return stores


def test_compare_by_settings_gives_the_delta_of_each_matched_cell(tmp_path):
    a, b = two_runs(tmp_path)
    pairs, summary = compare_runs(a.path, b.path, ["model", "strategy", "machines"])
    assert summary["matched"] == 4 and summary["only_in_run"] == 0
    da, db = load_results(a.path), load_results(b.path)
    for r in pairs.to_dict("records"):
        key = (r["strategy"], r["machines"])
        ta = da[(da["strategy"] == key[0]) & (da["machines"] == key[1])]["iteration_s"].iloc[0]
        tb = db[(db["strategy"] == key[0]) & (db["machines"] == key[1])]["iteration_s"].iloc[0]
        assert r["iteration_s_delta_pct"] == pytest.approx((ta - tb) / tb * 100, rel=1e-12)
        assert r["iteration_s_delta_pct"] > 0  # 10 Gbps is slower than 100
    deltas = pairs["iteration_s_delta_pct"].abs().tolist()
    assert deltas == sorted(deltas, reverse=True)
    # matched by id, the two runs share no cell (the bandwidth is in the id)
    pairs, summary = compare_runs(a.path, b.path)
    assert summary["matched"] == 0 and summary["only_in_run"] == 4


def test_compare_against_a_run_in_a_folder_with_a_long_name(tmp_path):
    """The compare page is named after the other run's folder and run id: a folder name of
    240 characters gave a file name over 255 bytes (issue #35 item 10: ENAMETOOLONG)."""
    a, b = two_runs(tmp_path, second_gbps=10)
    far = tmp_path / ("é" * 120) / b.run_id  # 240 bytes
    far.parent.mkdir()
    b.path.rename(far)
    r = CliRunner().invoke(
        app, ["report", str(a.path), "--compare", str(far), "--out", str(tmp_path / "out")]
    )
    assert r.exit_code == 0, r.output
    (page,) = (tmp_path / "out" / a.run_id).glob("compare-*.html")
    assert len(page.name.encode()) <= 255 and page.name.endswith(f"-{b.run_id}.html")
    assert "<h2>Matched cells</h2>" in page.read_text()


def test_compare_by_id_of_a_rerun_is_all_zero(tmp_path):
    a, b = two_runs(tmp_path, second_gbps=10)
    pairs, summary = compare_runs(a.path, b.path)
    assert summary["matched"] == 4 and pairs["iteration_s_delta_pct"].tolist() == [0.0] * 4


def test_compare_refuses_a_key_that_matches_two_cells(tmp_path):
    a, b = two_runs(tmp_path)
    with pytest.raises(ConfigError) as e:
        compare_runs(a.path, b.path, ["model", "strategy"])
    (line,) = e.value.messages
    assert "2 cells of" in line and "share model=tiny-cnn strategy=fp" in line
    assert line.endswith("to --on: machines")
    with pytest.raises(ConfigError, match="not a config column"):
        compare_runs(a.path, b.path, ["modle"])


def test_compare_on_the_command_line(tmp_path):
    a, b = two_runs(tmp_path)
    out = str(tmp_path / "rep")
    args = ["report", str(a.path), "--out", out, "--compare", str(b.path)]
    r = CliRunner().invoke(app, [*args, "--on", "model,strategy,machines"])
    assert r.exit_code == 0, r.output
    assert "4 cells matched on model,strategy,machines" in r.output
    target = Path(r.output.strip().splitlines()[-1].removeprefix("comparison: "))
    assert target.is_file() and target.parent == Path(out) / a.run_id
    r = CliRunner().invoke(app, [*args, "--on", "model,strategy,machines", "--json"])
    data = json.loads(r.stdout)
    assert data["summary"]["matched"] == 4 and len(data["cells"]) == 4
    assert all(math.isfinite(c["iteration_s_delta_pct"]) for c in data["cells"])
    r = CliRunner().invoke(app, ["report", str(a.path), "--out", out, "--on", "model"])
    assert r.exit_code == 2 and r.stderr == "error: --on: only with --compare\n"
    r = CliRunner().invoke(app, [*args, "--on", "model"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "share model=" in r.stderr


def test_progress_follows_reading_and_cell_pages(tmp_path):
    store = suite_run(tmp_path)
    n = len(store.finished())
    seen: list[tuple[str, int, int]] = []
    write_report(store.path, tmp_path / "out", progress=lambda *a: seen.append(a))
    reading = [s for s in seen if s[0] == "reading cells"]
    pages = [s for s in seen if s[0] == "cell pages"]
    assert [d for _, d, _ in reading] == list(range(1, n + 1)) and reading[-1][2] == n
    assert [d for _, d, _ in pages] == list(range(1, n + 1)) and pages[-1][2] == n


@pytest.mark.parametrize("damage", [b"\x1f\x8b\x08\x00garbage", b"", b"not gzip"])
def test_a_damaged_trace_costs_its_cell_page_only(tmp_path, damage):
    """(At e0a543b a gzip stream with a bad deflate block raised zlib.error out of the
    report: found by the random-damage property test.)"""
    import gzip

    store = suite_run(tmp_path)
    ids = sorted(store.finished())
    trace = store.path / "traces" / f"{ids[0]}.json.gz"
    good = gzip.compress(b'[{"worker": 0}]')  # parses, but a span without its fields
    for data in (damage, good):
        trace.write_bytes(data)
        with pytest.warns(UserWarning, match=f"cell {ids[0]}: cannot draw it") as caught:
            page = write_report(store.path, tmp_path / f"out{len(data)}")
        assert all("\n" not in str(w.message) for w in caught)
        assert sorted(p.stem for p in (page.parent / "cells").glob("*.js")) == ids[1:]


def test_a_bad_comparison_writes_nothing_and_report_json_is_json(tmp_path):
    """`report --compare` with an OTHER_RUN that is no run, or an --on column that is no
    column, is refused before the report is written (the folder stays absent); `report
    --json` alone prints the page's path as JSON."""
    a, b = two_runs(tmp_path)
    for extra in (["--compare", str(tmp_path / "nothing")],
                  ["--compare", str(b.path), "--on", "modle"]):  # fmt: skip
        out = tmp_path / f"rep{len(extra)}"
        r = CliRunner().invoke(app, ["report", str(a.path), "--out", str(out), *extra])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert not out.exists()
    r = CliRunner().invoke(app, ["report", str(a.path), "--out", str(tmp_path / "j"), "--json"])
    assert r.exit_code == 0 and Path(json.loads(r.stdout)["report"]).is_file()
