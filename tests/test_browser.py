"""Reports opened in a real browser (marker `browser`): Debian's chromium driven by
playwright, from file://, as a user opens them. Skipped, saying why, where there is no
chromium or no playwright (`.ci/run` installs both)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_report_pages import grid_cell
from test_results import cell_rows

from gcbench.config import Cell
from gcbench.report.html import write_compare, write_report
from gcbench.results.store import RunStore
from gcbench.runner import execute_cell
from gcbench.sim.chrome import chrome_trace
from gcbench.sim.trace import Span

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("GCBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">&amp;'

# What each plotly div holds: its traces, and how many have data (x, y or z non-empty).
PLOTS = """() => [...document.querySelectorAll('.plotly-graph-div')].map(d => {
  const full = d._fullData || [];
  const has = (t) => ['x', 'y', 'z'].some(k => t[k] && t[k].length > 0);
  return {id: d.id, traces: full.length, withData: full.filter(has).length};
})"""


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def cells() -> list[Cell]:
    out = []
    for machines in (1, 2):
        for gbps in (10.0, 100.0):
            if machines == 1 and gbps == 100.0:
                continue
            for s, c in (("fp32", "none"), ("fp16", "none"), ("allgather", "dgc-1pct"),
                         ("bytecomp", "dgc-1pct"), ("upper-bound", "dgc-1pct")):  # fmt: skip
                out.append(grid_cell(s, c, machines, gbps, "tiny-mlp"))
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A run whose description and one model name are hostile HTML, with traces and
    plans, written as `gcbench run` writes it; its report, a self-contained copy and a
    comparison with itself."""
    tmp = tmp_path_factory.mktemp("browser")
    store, _ = RunStore.open(tmp / "results", "demo")
    grid = cells()
    store.write_manifest({"suite": "demo", "status": "finished", "description": HOSTILE,
                          "grid": [c.id for c in grid]})  # fmt: skip
    for c in grid:
        _, spans, plan = execute_cell(c, 1)
        rows = cell_rows(c, "demo", store.run_id, 1)
        if c.strategy == "fp16":
            rows = [{**r, "model": HOSTILE} for r in rows]  # as a profile file may name it
        store.write_cell(c.id, rows, spans, plan)
    page = write_report(store.path, tmp / "out")
    single = write_report(store.path, tmp / "single", self_contained=True)
    compare, _, _ = write_compare(store.path, store.path, None, tmp / "out")
    return {"dir": tmp / "out", "page": page, "single": single, "compare": compare,
            "store": store, "grid": grid}  # fmt: skip


def visit(browser, path: Path, root: Path, hash_: str = ""):
    """Open `path` (+ `#hash_`); returns the page, the console errors and page errors,
    and the requests that left `root`."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    base = root.resolve().as_uri() + "/"

    def request(r):
        if not (r.url.startswith(base) or r.url.startswith("blob:")):
            outside.append(r.url)

    page.on("request", request)
    page.goto(path.resolve().as_uri() + (f"#{hash_}" if hash_ else ""))
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    return page, errors, outside


def check_plots(page, at_least: int) -> list[dict]:
    plots = page.evaluate(PLOTS)
    assert len(plots) >= at_least, plots
    for p in plots:
        assert p["traces"] >= 1 and p["withData"] >= 1, p
    return plots


def test_index_and_run_page_load_offline_with_every_figure_drawn(browser, report):
    page, errors, outside = visit(browser, report["dir"] / "index.html", report["dir"])
    assert errors == [] and outside == []
    page.click(f"a >> text={report['store'].run_id}")  # the suite page links the run
    page.wait_for_load_state("load")
    assert page.url.endswith(f"{report['store'].run_id}/index.html")
    page.close()
    page, errors, outside = visit(browser, report["page"], report["dir"])
    assert errors == [] and outside == []
    ids = [p["id"] for p in check_plots(page, 5)]
    assert ids == ["breakdown", "scaling", "bandwidth", "speedup", "gap"]
    # the table: every cell, a filter, cell links
    assert "15 of 15 rows" in page.inner_text(".controls")
    page.fill(".controls input", "strategy=fp32")
    assert "3 of 15 rows" in page.inner_text(".controls")
    assert page.locator("#results tbody tr").count() == 3
    page.close()


def test_hostile_strings_show_as_text_and_nothing_runs(browser, report):
    for path in (report["page"], report["single"], report["dir"] / "index.html"):
        page, errors, outside = visit(browser, path, path.parent.parent)
        assert errors == [] and outside == [], (path, errors, outside)
        assert page.evaluate("() => window.pwned") is None
        if path.name == "index.html" and path.parent == report["dir"]:
            assert HOSTILE in page.inner_text("body")
            continue
        assert HOSTILE in page.inner_text("body")  # the description, as text
        page.fill(".controls input", "fp16")
        assert HOSTILE in page.inner_text("#results tbody")  # the model name, as text
        svg = page.inner_text("#breakdown")
        assert "<script>window.pwned = 1</script>" in svg  # a plotly title, as text
        page.close()


def test_self_contained_page_draws_without_its_folder(browser, report, tmp_path):
    lone = tmp_path / "mail.html"
    shutil.copy(report["single"], lone)  # nothing beside it
    page, errors, outside = visit(browser, lone, tmp_path)
    assert errors == [] and outside == []
    check_plots(page, 5)
    assert "15 of 15 rows" in page.inner_text(".controls")
    page.close()


def test_cell_page_draws_the_plan_and_timeline_and_offers_the_chrome_trace(browser, report):
    c = next(c for c in report["grid"] if c.strategy == "bytecomp" and c.cluster.machines == 2)
    page, errors, outside = visit(browser, report["page"].parent / "cell.html",
                                  report["dir"], c.id)  # fmt: skip
    assert errors == [] and outside == []
    ids = [p["id"] for p in check_plots(page, 2)]
    assert ids == ["fig-plan", "fig-timeline"]
    with page.expect_download() as download:
        page.click("#chrome-trace")
    got = json.loads(Path(download.value.path()).read_text())
    _, spans, _ = execute_cell(c, 1)
    want = chrome_trace([Span(**s) for s in spans], c.cluster.gpus_per_machine)
    assert len(got["traceEvents"]) == len(want["traceEvents"])
    for g, w in zip(got["traceEvents"], want["traceEvents"], strict=True):
        assert (g["ph"], g["name"], g["pid"], g["tid"]) == (w["ph"], w["name"], w["pid"], w["tid"])
        if g["ph"] == "X":  # the page's times are the timeline's, to the nanosecond
            assert g["ts"] == pytest.approx(w["ts"], abs=2e-3)
            assert g["dur"] == pytest.approx(w["dur"], abs=2e-3)
            assert g.get("args") == w.get("args")
    # another cell through the hash; a cell that is not there says so
    other = next(x for x in report["grid"] if x.strategy == "fp32" and x.cluster.machines == 2)
    page.evaluate(f"() => {{ location.hash = '{other.id}'; }}")
    page.wait_for_timeout(300)
    assert [p["id"] for p in check_plots(page, 1)] == ["fig-timeline"]
    page.evaluate("() => { location.hash = '" + "0" * 64 + "'; }")
    page.wait_for_timeout(300)
    assert "has no details" in page.inner_text("#status")
    page.close()


def test_compare_page(browser, report):
    page, errors, outside = visit(browser, report["compare"], report["dir"])
    assert errors == [] and outside == []
    check_plots(page, 1)
    assert "15 of 15 rows" in page.inner_text(".controls")
    assert "15 cells matched on cell_id" in page.inner_text("body")
    page.close()


def test_a_page_without_results_has_no_errors(browser, tmp_path):
    store, _ = RunStore.open(tmp_path / "results", "empty")
    store.write_manifest({"suite": "empty", "status": "running", "grid": []})
    page_path = write_report(store.path, tmp_path / "out")
    page, errors, outside = visit(browser, page_path, tmp_path / "out")
    assert errors == [] and outside == []
    assert "No finished cells yet" in page.inner_text("body")
    page.close()


def test_the_headline_is_on_the_first_screen_and_matches_the_results(browser, report):
    """Issue #36: the run page's first screen (1400 x 900) holds the headline table; each
    row's winner, time, named baseline and speed-up are those computed from
    `load_results` (to 0.1%); the suite's index shows the latest run's."""
    from gcbench import load_results
    from gcbench.report.headline import headline

    expected = headline(load_results(report["store"].path))
    assert expected
    page, errors, _ = visit(browser, report["page"], report["dir"])
    page.set_viewport_size({"width": 1400, "height": 900})
    page.evaluate("() => window.scrollTo(0, 0)")
    box = page.locator("#headline").bounding_box()
    assert errors == [] and box is not None and box["y"] < 900, box
    shot = report["dir"] / "first-screen.png"  # what a user sees first, kept for a look
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    rows = page.evaluate("""() => [...document.querySelectorAll('#headline tbody tr')]
        .map(r => [...r.cells].map(c => c.innerText))""")
    heads = page.evaluate(
        "() => [...document.querySelectorAll('#headline th')].map(h => h.innerText)"
    )
    col = {h: i for i, h in enumerate(heads)}
    assert len(rows) == len(expected)
    for row, e in zip(rows, expected, strict=True):
        assert row[col["winner"]] == e["winner"]
        assert float(row[col["ms"]]) == pytest.approx(e["winner_s"] * 1e3, rel=1e-3, abs=0.006)
        assert row[col["baseline"]] == (e["baseline"] or "none in the grid")
        if e["speedup_over_baseline"] is not None:
            shown = float(row[col["× best baseline"]].rstrip("×"))
            assert shown == pytest.approx(e["speedup_over_baseline"], abs=0.006)
    # every metric the table shows is explained in its header's title (issue #36)
    title = page.get_attribute("#results th:text-is('iteration_s')", "title")
    assert title and "steady-state time" in title, title
    page.close()
    page, errors, _ = visit(browser, report["dir"] / "index.html", report["dir"])
    assert errors == [] and page.locator("#headline tbody tr").count() == len(expected)
    page.close()


def test_the_breakdown_opens_on_the_largest_cluster_with_the_winner_starred(browser, report):
    page, errors, _ = visit(browser, report["page"], report["dir"])
    assert errors == []
    got = page.evaluate("""() => {
        const d = document.getElementById('breakdown');
        const shown = d.data.filter(t => t.visible === true && t.name === 'compute');
        const menu = d.layout.updatemenus[0];
        return {labels: shown.flatMap(t => t.x), panels: new Set(shown.map(t => t.yaxis)).size,
                first: menu.buttons[menu.active || 0].label};
    }""")
    # one star a panel (a model; the fixture's fp16 cells are of a model of their own)
    assert sum(x.startswith("★") for x in got["labels"]) == got["panels"] == 2, got
    assert got["first"].startswith("2×4"), got  # the run's most GPUs (2 machines of 4)
    page.close()


def test_a_measured_run_draws_measured_against_predicted(browser, tmp_path):
    """A `mode: measure` run (rows as `cluster.measure` writes them: times 3x the
    simulator's, DGC's split from its hook, fp32's not split) opens offline with no error,
    its headline, breakdown and both prediction figures drawn."""
    import gcbench
    from gcbench.backends.simulate import simulate_cell
    from gcbench.results.schema import record

    store, _ = RunStore.open(tmp_path / "results", "measure")
    grid = [Cell.model_validate({
        "model": "tiny-mlp", "compressor": comp, "strategy": strategy, "device": "cpu",
        "mode": "measure", "network": {"intra": "pcie", "inter_gbps": 10},
        "cluster": {"machines": 2, "gpus_per_machine": 2}})
        for strategy, comp in (("fp32", "none"), ("allgather", "dgc-1pct"))]  # fmt: skip
    store.write_manifest({"suite": "measure", "status": "finished", "grid": [c.id for c in grid]})
    for c in grid:
        sim = simulate_cell(c.model_copy(update={"mode": "simulate"})).metrics
        split = c.strategy != "fp32"
        m = {**sim, "iteration_s": 3 * sim["iteration_s"], "predicted_iteration_s":
             sim["iteration_s"], "predicted_compute_s": sim["compute_s"],
             "predicted_exposed_s": sim["comm_exposed_s"], "iteration_spread": 0.1,
             "compute_s": 2 * sim["iteration_s"] if split else None,
             "comm_exposed_s": sim["iteration_s"] if split else None,
             "attempts": 1, "startup_s": 2.0, "hardware": "4 x CPU actor on 1 node",
             "forward_s": 0.5 * sim["iteration_s"], "update_s": 0.1 * sim["iteration_s"],
             "backward_s": 2.3 * sim["iteration_s"], "predicted_forward_s": 0.3 * sim[
                 "compute_s"], "predicted_backward_s": 0.6 * sim["compute_s"],
             "predicted_update_s": 0.1 * sim["compute_s"]}  # fmt: skip
        rows = [record(suite="measure", cell_id=c.id, config=c.flat(), metrics=m, error=None,
                       repetition=0, gcbench_version=gcbench.__version__, run_id=store.run_id,
                       meta={})]  # fmt: skip
        store.write_cell(c.id, rows, [], None)
    page_path = write_report(store.path, tmp_path / "out")
    page, errors, outside = visit(browser, page_path, tmp_path / "out")
    assert errors == [] and outside == []
    ids = [p["id"] for p in check_plots(page, 3)]
    assert {"breakdown", "prediction", "prediction-breakdown"} <= set(ids), ids
    page.close()


def test_a_trained_run_draws_accuracy_beside_speed(browser, tmp_path):
    """A `mode: train` run (rows as `cluster.train` writes them: 3 seeds, curves as JSON,
    one run diverged) opens offline with no error: the accuracy table first, the
    trade-off with its Pareto front and the curves drawn."""
    import gcbench
    from gcbench.results.schema import record

    store, _ = RunStore.open(tmp_path / "results", "train")
    train = {"dataset": "teacher", "steps": 20, "eval_every": 10, "target": 0.8}
    grid = [Cell.model_validate({
        "model": "tiny-mlp", "compressor": comp, "strategy": strategy, "device": "cpu",
        "mode": "train", "train": train, "network": {"intra": "pcie", "inter_gbps": 10},
        "cluster": {"machines": 2, "gpus_per_machine": 1}})
        for strategy, comp in (("fp32", "none"), ("allgather", "topk-1pct"),
                               ("allgather", "efsignsgd:ef=false"))]  # fmt: skip
    store.write_manifest({"suite": "train", "status": "finished", "grid": [c.id for c in grid]})
    for k, c in enumerate(grid):
        rows = []
        for rep in range(3):
            acc = 0.9 - 0.3 * k + 0.01 * rep
            loss = [2.0, None] if k == 2 and rep == 0 else [2.0, 1.0 - 0.1 * k]
            m = {"iteration_s": 0.01 / (k + 1), "final_metric": acc, "final_loss": loss[-1],
                 "steps_to_target": 20 if acc >= 0.8 else None,
                 "projected_iteration_s": 0.1 / (k + 1), "curve_step": "[10, 20]",
                 "curve_loss": json.dumps(loss),
                 "curve_metric": json.dumps([0.5, acc])}  # fmt: skip
            rows.append(record(suite="train", cell_id=c.id, config=c.flat(), metrics=m,
                               error=None, repetition=rep, gcbench_version=gcbench.__version__,
                               run_id=store.run_id, meta={}))  # fmt: skip
        store.write_cell(c.id, rows, [], None)
    page_path = write_report(store.path, tmp_path / "out")
    page, errors, outside = visit(browser, page_path, tmp_path / "out")
    assert errors == [] and outside == []
    ids = [p["id"] for p in check_plots(page, 2)]
    assert {"tradeoff", "curves"} <= set(ids), ids
    assert "final_metric" in page.inner_text("#results")  # the results table shows it
    table = page.inner_text("table.accuracy")
    assert "-60.0 pts" in table and "0/3 reached" in table and "no gap" in table
    # the answer first: ranked by the time to the target (only fp32's seeds reach it)
    assert "reaches 80% accuracy first (projected time" in page.inner_text("#headline-h + p")
    sentence = json.loads((Path(page_path).parent / "headline.json").read_text())[0]["sentence"]
    assert "fp32 reaches 80% accuracy first" in sentence
    page.close()
