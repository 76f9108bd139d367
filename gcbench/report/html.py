"""Write an offline HTML report, openable from file:// with no network and no server:

    reports/<suite>/index.html                 the suite: description, its runs, links
    reports/<suite>/plotly.min.js, report.js, report.css     written once, never a CDN
    reports/<suite>/<run-id>/index.html        one run: figures, results table, info
    reports/<suite>/<run-id>/results.js        the table's rows (a script: file:// pages
                                               may not fetch), results.csv, .parquet
    reports/<suite>/<run-id>/cell.html         cell.html#<cell-id>: plan map, timeline
    reports/<suite>/<run-id>/cells/<id>.js     that cell's data; <id>.trace.json its
                                               Chrome trace

A run page shows the cells of the run's current grid (`all_cells=True`: every cell on
disk), says what every cell shares, and its table has a column for every config column
that varies. Every page is a pure function of the results, so a report of unchanged
results rewrites nothing. `self_contained=True` inlines plotly, the stylesheet, the
script and the rows into the run page, one file to mail (its cell links need the
folder). Every user-controlled string (suite name, description, labels, model names) is
escaped: in HTML by `html.escape`, in plotly text by `figures.esc`, in scripts as JSON
with `<`, `>` and `&` as \\u escapes, in the table by `textContent`.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import math
import platform
import warnings
import zlib
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from gcbench.errors import ConfigError
from gcbench.files import atomic_write, check_writable, read_limited
from gcbench.report import against as A
from gcbench.report import figures as F
from gcbench.report import training as T
from gcbench.report.headline import headline, headline_html
from gcbench.report.labels import (
    DERIVED,
    ORDER,
    per_cell,
    value_text,
    varying,
)
from gcbench.results.schema import METRICS
from gcbench.results.store import (
    MANIFEST,
    ResultsWarning,
    RunStore,
    cells_frame,
    read_cells,
    read_stored,
    resolve_run,
    suite_folder_name,
)

PLOTLY_JS = "plotly.min.js"
ASSETS = ("report.js", "report.css")
TABLE_COLUMNS = (
    "model",
    "strategy",
    "compressor",
    "machines",
    "gpus_per_machine",
    "gpus",
    "intra",
    "inter_gbps",
    "status",
    "iteration_s",
    "throughput",
    "scaling_factor",
    "compute_s",
    "compress_exposed_s",
    "comm_exposed_s",
    "wire_bytes",
    "cell_id",
    "error",
)
CONFIG_TABLE = set(ORDER) | set(DERIVED)

HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
{assets}
</head>
"""


def script_json(value: Any) -> str:
    """`value` as JSON that is safe inside a <script> element and a .js file: `<`, `>`
    and `&` as \\u escapes, so no string can close the element or open a comment."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:  # a number that is not finite: null, as plotly writes it
        text = json.dumps(_finite(value), separators=(",", ":"), allow_nan=False, default=str)
    return _safe(text)


def _safe(text: str) -> str:
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except OSError:
        pass
    atomic_write(path, data, durable=False)  # a report is written again from the results


def static_file(name: str) -> bytes:
    """A file of `gcbench/report/static/` (the reports' script and stylesheet)."""
    return resources.files("gcbench.report").joinpath("static", name).read_bytes()


def _plotly_js() -> bytes:
    import plotly.offline

    return plotly.offline.get_plotlyjs().encode()


def _write_assets(out: Path) -> None:
    _write_if_changed(out / PLOTLY_JS, _plotly_js())
    for name in ASSETS:
        _write_if_changed(out / name, static_file(name))


def _assets(prefix: str, self_contained: bool) -> str:
    """The <head>'s scripts and stylesheet: links to the files beside the pages, or
    their text inlined (a `</script>` inside plotly's code is split so it cannot end the
    element)."""
    if not self_contained:
        return (
            f'<link rel="stylesheet" href="{prefix}report.css">\n'
            f'<script src="{prefix}{PLOTLY_JS}"></script>\n'
            f'<script src="{prefix}report.js"></script>'
        )
    js = [_plotly_js().decode(), static_file("report.js").decode()]
    safe = [j.replace("</script", "<\\/script") for j in js]
    scripts = "".join(f"<script>{j}</script>\n" for j in safe)
    return f"<style>{static_file('report.css').decode()}</style>\n{scripts}"


def _figure_html(fig: Any, div_id: str) -> str:
    """A plotly figure as a div and the script that draws it (fixed ids: the same results
    give the same page)."""
    spec = _safe(fig.to_json())  # plotly's encoder: arrays, NaN as null
    return (
        f'<div id="{div_id}" class="plotly-graph-div"></div>\n<script>(function () {{'
        f"const f = {spec}; Plotly.newPlot({json.dumps(div_id)}, f.data, f.layout, "
        '{"displaylogo": false, "responsive": true}); })();</script>'
    )


def _table_columns(df: pd.DataFrame) -> list[str]:
    """The fixed columns, with every other config column that varies after the config
    ones (failed cells included)."""
    config = [c for c in TABLE_COLUMNS if c in CONFIG_TABLE]
    extra = [c for c in varying(df) if c not in config and c not in DERIVED]
    metrics = [c for c in TABLE_COLUMNS if c not in config]
    if "final_metric" in df.columns and df["final_metric"].notna().any():  # trained cells
        metrics[metrics.index("cell_id"):0] = ["final_metric"]  # (mean over the seeds)
    wanted = [*config, *extra, *metrics]
    return [c for c in wanted if c in df.columns]


def table_cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: the mean of each ok cell's repetitions, then the failed and
    infeasible ones."""
    if df.empty:
        return df
    bad = df[df["status"] != "ok"].drop_duplicates("cell_id")
    return pd.concat([per_cell(df), bad], ignore_index=True)


def _jsonable(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return str(value)
    return value


def table_data(
    cells: pd.DataFrame, details: set[str], cols: list[str] | None = None
) -> dict[str, Any]:
    """The results table as the page's script reads it: column names (by default the
    results table's), whether each is numeric, the rows (lists) and whether each row's
    cell has a cell page."""
    cols = _table_columns(cells) if cols is None else cols
    numeric = [bool(pd.api.types.is_numeric_dtype(cells[c])) for c in cols]
    rows = [[_jsonable(v) for v in r] for r in cells[cols].itertuples(index=False, name=None)]
    return {
        "columns": cols,
        "numeric": numeric,
        "meanings": [METRICS.get(c, "") for c in cols],  # the header's legend (its title)
        "rows": rows,
        "details": [cid in details for cid in cells["cell_id"]],
    }


def _resources(manifest: dict[str, Any]) -> str:
    res = manifest.get("cluster", {}).get("resources", {})
    parts = [f"{res[k]:g} {k}" for k in ("CPU", "GPU") if k in res]
    parts += [
        f"{v:g} {k}"
        for k, v in res.items()
        if k not in ("CPU", "GPU", "memory", "object_store_memory")
    ]
    if "memory" in res:
        parts.append(f"{res['memory'] / 2**30:.1f} GiB memory")
    return ", ".join(parts) or "?"


def _filters(only: list[dict[str, Any]] | None) -> str:
    """A run's `--only` filters as the command line wrote them (`column=value,value`; the
    manifest keeps one mapping of column to values per filter)."""
    words = [
        f"{k}={','.join(value_text(x) for x in (v if isinstance(v, list) else [v]))}"
        for f in only or ()
        for k, v in f.items()
    ]
    return " ".join(words) or "(every cell)"


def _common(df: pd.DataFrame) -> str:
    """What every cell shown shares: `column=value` for each config column with a single
    value (as `--only` and suite filters write them)."""
    if df.empty:
        return ""
    first = df.iloc[0]
    moving = set(varying(df))
    parts = [
        f"{col}={value_text(first.get(col))}"
        for col in ORDER
        if col in df.columns and col not in moving
    ]
    return f'<p class="meta">Every cell: {html.escape(" · ".join(parts))}</p>'


def _info(manifest: dict[str, Any], run: Path) -> str:
    """The system-info panel: versions, the Ray cluster, the suite file and its hash."""
    versions = {"gcbench": manifest.get("gcbench_version", "?"), **manifest.get("versions", {})}
    items = [
        ("run", run.name),
        ("status", manifest.get("status", "?")),
        ("started", manifest.get("started_at", "?")),
        ("finished", manifest.get("finished_at", "")),
        ("sessions", manifest.get("sessions", "")),
        ("suite file", manifest.get("suite_file", "")),
        ("suite hash", manifest.get("suite_hash", "")),
        ("only", _filters(manifest.get("only"))),
        ("versions", ", ".join(f"{k} {v}" for k, v in versions.items())),
        ("cluster nodes", ", ".join(map(str, manifest.get("cluster", {}).get("nodes", [])))),
        ("cluster resources", _resources(manifest)),
        ("report written by", f"gcbench {_version()}, Python {platform.python_version()}"),
    ]
    rows = "".join(
        f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items
    )
    return f'<details><summary>System info</summary><dl class="info">{rows}</dl></details>'


def _version() -> str:
    import gcbench

    return gcbench.__version__


Progress = Callable[[str, int, int], None]  # (what, done, total)


def _load(
    run: Path, all_cells: bool, progress: Progress | None = None
) -> tuple[pd.DataFrame, list[str]]:
    tick = (
        None if progress is None else (lambda done, total: progress("reading cells", done, total))
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        tables = read_cells(run, all_cells, tick)
    left_out = [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]
    return cells_frame(tables), left_out


def _figures(df: pd.DataFrame, cells: pd.DataFrame) -> list[tuple[str, str, Any]]:
    """The run page's figures that have something to show: (id, heading, figure), drawn
    from `cells`, the run's `per_cell` (computed once for the page)."""
    if df.empty or not (df["status"] == "ok").any():
        return []
    ok = df[df["status"] == "ok"]
    if "final_metric" in ok and ok["final_metric"].notna().any():  # mode: train
        return [("accuracy", "Final accuracy against fp32", T.table_html(ok)),
                ("tradeoff", "Accuracy against speed", T.tradeoff_figure(ok)),
                ("curves", "Training curves", T.curves_figure(ok))]  # fmt: skip
    df = cells
    out: list[tuple[str, str, Any]] = [("breakdown", "Time breakdown", F.breakdown_figure(df))]
    if ok["gpus"].nunique() > 1:
        out.append(("scaling", "Scaling", F.scaling_figure(df)))
    multi = ok[ok["machines"] > 1]
    if multi["inter_gbps"].nunique() > 1:
        out.append(("bandwidth", "Bandwidth sweep", F.bandwidth_figure(df)))
    if not F.speedup_table(df).empty:
        out.append(("speedup", "Speed-up over no compression", F.speedup_figure(df)))
    if not F.gap_to_upper_bound(df).empty:
        out.append(("gap", "Gap to the upper bound", F.gap_figure(df)))
    if not A.agreement_table(df).empty:
        out.append(("agreement", "Emulate against simulate", A.agreement_figure(df)))
    if "predicted_iteration_s" in ok and ok["predicted_iteration_s"].notna().any():
        out.append(("prediction", "Measured against predicted", A.prediction_figure(df)))
        out.append(("prediction-breakdown", "Breakdown, measured and predicted",
                    A.prediction_breakdown_figure(df)))  # fmt: skip
    return out


def _cell_files(
    run: Path, cells: pd.DataFrame, out: Path, progress: Progress | None = None
) -> set[str]:
    """cells/<id>.js (title, config, plan map and timeline figures) for every cell with
    a stored trace or plan; returns those cells' ids. The cell page derives the Chrome
    trace from the timeline's bars (`report.js`, `chromeTrace`), so a cell costs one
    file. A file newer than its cell's trace and plan whose first line holds the same
    stamp (gcbench's version, the cell's title and config) is kept as it is."""
    done: set[str] = set()
    folder = out / "cells"
    rows = cells.to_dict("records")
    for i, row in enumerate(rows, start=1):
        if progress is not None:
            progress("cell pages", i, len(rows))
        cid = str(row["cell_id"])
        trace = run / "traces" / f"{cid}.json.gz"
        plan = run / "plans" / f"{cid}.json.gz"
        stamps = [p.stat().st_mtime_ns for p in (trace, plan) if p.is_file()]
        if not stamps:
            continue
        target = folder / f"{cid}.js"
        config = [(c, value_text(row.get(c))) for c in ORDER if c in row]
        config += [(m, value_text(row.get(m))) for m in ("status", "iteration_s", "throughput")]
        label = row.get("label")
        title = f"{row['model']} · {label if isinstance(label, str) else row['strategy']}"
        # what the file holds besides the figures: a file of another version, title or
        # config (labels follow the other cells of the run) is written again
        stamp = hashlib.sha256(json.dumps([_version(), title, config]).encode()).hexdigest()
        first = f"// {stamp}\n"
        if target.is_file() and target.stat().st_mtime_ns >= max(stamps):
            with open(target, "rb") as f:
                if f.readline().decode(errors="replace") == first:
                    done.add(cid)
                    continue
        figures: list[tuple[str, Any]] = []
        try:
            if plan.is_file():
                figures.append(("plan", F.plan_map_figure(read_stored(plan, "plan"))))
            if trace.is_file():
                spans = read_stored(trace, "trace")
                if not all(math.isfinite(float(sp.get(k, 0.0))) for sp in spans
                           for k in ("start_s", "dur_s", "bytes")):  # fmt: skip
                    raise ValueError("a span's time or bytes is not a finite number")
                figures.append(("timeline", F.timeline_figure(spans)))
        except (OSError, ValueError, EOFError, zlib.error, RecursionError, TypeError, KeyError,
                AttributeError, ConfigError) as e:  # a damaged trace or plan: no page  # fmt: skip
            why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            warnings.warn(f"cell {cid}: cannot draw it ({why})", ResultsWarning, stacklevel=3)
            continue
        data = {
            "title": title,
            "config": config,
            "figures": figures,
            "gpus_per_machine": _jsonable(row.get("gpus_per_machine")),
        }
        _write_if_changed(target, f"{first}window.GC_CELL = {script_json(data)};\n".encode())
        done.add(cid)
    return done


CELL_PAGE = """<body>
<nav><a href="index.html">← run</a><a href="../index.html">suite</a></nav>
<h1 id="title">Cell</h1>
<p id="status" class="meta"></p>
<p id="downloads"></p>
<div id="figures"></div>
<h2>Config</h2>
<dl id="config" class="info"></dl>
<script>gcCellPage(); window.addEventListener("hashchange", gcCellPage);</script>
</body></html>
"""


def write_report(
    results: Path | str,
    out: Path | str | None = None,
    *,
    all_cells: bool = False,
    self_contained: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Write a run's page (and the suite's index beside it); returns the run page's path.

    `results` is a run folder or a suite folder (its latest run). The run page shows the
    cells of the run's grid (the latest `gcbench run`'s suite), or with `all_cells` every
    cell on disk. Without `out`, writes to reports/<suite> (the manifest's suite, checked
    to be a folder name). A cell file that cannot be read is left out, said on the page
    and in a `ResultsWarning`. The folder is checked to be writable first (ConfigError);
    unchanged files are not rewritten. `progress(what, done, total)` follows the long
    parts (reading the cell files, writing the cell pages).
    """
    run = resolve_run(Path(results))
    store = RunStore(run)
    manifest = store.read_manifest()
    named = run.resolve()  # `gcbench report .` in a run folder: the folders' own names
    suite = suite_folder_name(manifest.get("suite", named.parent.name), str(store.manifest_path))
    out_dir = Path(out) if out is not None else Path("reports") / suite
    check_writable(out_dir, "--out")
    df, left_out = _load(run, all_cells, progress)
    for line in left_out:  # on to the caller
        warnings.warn(line, ResultsWarning, stacklevel=2)
    run_out = out_dir / named.name
    run_out.mkdir(parents=True, exist_ok=True)
    _write_assets(out_dir)
    cells = table_cells(df)
    details = _cell_files(run, cells, run_out, progress) if not cells.empty else set()
    if details:
        page = HEAD.format(
            title=html.escape(f"gcbench · {suite} · cell"), assets=_assets("../", False)
        )
        _write_if_changed(run_out / "cell.html", (page + CELL_PAGE).encode())
    # the table's rows: inlined in a self-contained page, else results.js beside it
    rows = (
        None if cells.empty else f"window.GC_RESULTS = {script_json(table_data(cells, details))};"
    )
    summary = per_cell(df)  # once, for the headline and every figure
    entries = headline(summary, df)
    _write_if_changed(run_out / "headline.json",
                      json.dumps(_finite(entries), indent=1).encode())  # fmt: skip
    page = _run_page(
        suite, named, manifest, df, cells, details, left_out, all_cells, self_contained,
        rows if self_contained else None, summary, headline_html(entries),
    )  # fmt: skip
    if rows is not None:
        _write_if_changed(run_out / "results.csv", df.to_csv(index=False).encode())
        sink = io.BytesIO()
        df.to_parquet(sink, index=False)
        _write_if_changed(run_out / "results.parquet", sink.getvalue())
        if not self_contained:
            _write_if_changed(run_out / "results.js", f"{rows}\n".encode())
    index = run_out / "index.html"
    _write_if_changed(index, page.encode())
    write_index(run.parent, out_dir, suite, manifest)
    return index


def _run_page(
    suite: str,
    run: Path,
    manifest: dict[str, Any],
    df: pd.DataFrame,
    cells: pd.DataFrame,
    details: set[str],
    left_out: list[str],
    all_cells: bool,
    self_contained: bool,
    inline_rows: str | None,
    summary: pd.DataFrame,
    top: str = "",
) -> str:
    """The run page; self-contained, it holds plotly, the script, the stylesheet and the
    table's rows (`inline_rows`, a script); its figures are drawn from `summary`, the
    run's `per_cell`. `top`: the headline, first after the title."""
    shown = df["cell_id"].nunique() if not df.empty else 0
    n_failed = int((df.drop_duplicates("cell_id")["status"] != "ok").sum()) if not df.empty else 0
    grid = manifest.get("grid")
    if grid is None:
        scope = f"{shown} cells"
    elif all_cells:
        extra = len(set(df["cell_id"]) - set(grid)) if not df.empty else 0
        scope = f"all {shown} cells on disk, {extra} of them no longer in the suite's grid"
    else:
        pending = len(grid) - shown
        scope = f"{shown} of the {len(grid)} cells of the suite's grid" + (
            f" ({pending} not run yet)" if pending else ""
        )
    meta = (
        f"run {html.escape(run.name)} · {html.escape(scope)} · "
        f"status {html.escape(str(manifest.get('status', '?')))} · "
        f"gcbench {html.escape(str(manifest.get('gcbench_version', '?')))} · "
        f"cluster: {html.escape(_resources(manifest))}"
    )
    parts = [
        HEAD.format(
            title=html.escape(f"gcbench · {suite} · {run.name}"),
            assets=_assets("../", self_contained),
        ),  # fmt: skip
        "<body>",
        '<nav><a href="../index.html">← all runs of this suite</a></nav>',
        f"<h1>{html.escape(f'gcbench · {suite}')}</h1>",
    ]
    description = str(manifest.get("description") or "").strip()
    if description:
        parts.append(f"<p>{html.escape(description)}</p>")
    parts.append(f'<p class="meta">{meta}</p>')
    parts.append(top)
    parts.append(_common(df))
    parts.append(_info(manifest, run))
    parts += [f'<p class="failed">Left out: {html.escape(line)}</p>' for line in left_out]
    if n_failed:
        parts.append(f'<p class="failed">{n_failed} cell(s) failed; see the table.</p>')
    if not cells.empty:
        parts.append(
            "<p>Download the results (one row per cell and repetition): "
            '<a href="results.csv" download>CSV</a> · '
            '<a href="results.parquet" download>parquet</a></p>'
        )
    figures = _figures(df, summary)
    if figures:
        parts.append("<nav>" + "".join(
            f'<a href="#{fid}-h">{html.escape(title)}</a>' for fid, title, _ in figures
        ) + '<a href="#results-h">Results table</a></nav>')  # fmt: skip
    for fid, title, fig in figures:
        parts.append(f'<h2 id="{fid}-h">{html.escape(title)}</h2>')
        parts.append(fig if isinstance(fig, str) else _figure_html(fig, fid))  # (a table)
    parts.append('<h2 id="results-h">Results</h2>')
    if cells.empty:
        parts.append("<p>No finished cells yet.</p>")
    else:
        if details:
            parts.append('<p class="meta">A cell id opens the cell\'s page: its plan map, '
                         "its timeline and its Chrome trace.</p>")  # fmt: skip
        parts.append('<div id="results"></div>')
        if inline_rows is not None:
            parts.append(f"<script>{inline_rows}</script>")
        else:
            parts.append('<script src="results.js"></script>')
        cell_page = '"cell.html"' if details else "null"
        parts.append(f'<script>gcTable("results", window.GC_RESULTS, {cell_page});</script>')
    parts.append("</body></html>\n")
    return "\n".join(p for p in parts if p)


def _runs(suite_dir: Path) -> Iterable[tuple[Path, dict[str, Any]]]:
    for path in sorted(suite_dir.iterdir(), reverse=True) if suite_dir.is_dir() else []:
        if (path / MANIFEST).is_file():
            try:
                yield path, RunStore(path).read_manifest()
            except Exception:  # noqa: BLE001 - a broken run is listed as such
                yield path, {"status": "unreadable manifest"}


def write_index(suite_dir: Path, out_dir: Path, suite: str, manifest: dict[str, Any]) -> Path:
    """reports/<suite>/index.html: the suite's description and every run of it found
    under the results folder, newest first, linked where its page has been written."""
    rows = []
    latest = ""  # the headline of the newest run with a page
    for path, m in _runs(suite_dir):
        saved = out_dir / path.name / "headline.json"
        if not latest and saved.is_file():
            latest = _saved_headline(saved, path.name)
        counts = m.get("cells", {})
        page = out_dir / path.name / "index.html"
        name = html.escape(path.name)
        link = f'<a href="{name}/index.html">{name}</a>' if page.is_file() else name
        cells = (
            f"{counts.get('ok', '?')} ok, {counts.get('failed', 0)} failed of "
            f"{counts.get('total', '?')}"
            if counts
            else ""
        )
        values = [m.get("status", "?"), cells, m.get("started_at", ""), m.get("finished_at", ""),
                  m.get("gcbench_version", ""), str(m.get("suite_hash", ""))[:12]]  # fmt: skip
        rows.append(
            f'<tr><td class="text">{link}</td>'
            + "".join(f'<td class="text">{html.escape(str(v))}</td>' for v in values)
            + "</tr>"
        )
    header = "".join(
        f'<th class="text">{h}</th>'
        for h in ("run", "status", "cells", "started", "finished", "gcbench", "suite hash")
    )
    description = str(manifest.get("description") or "").strip()
    body = [
        HEAD.format(title=html.escape(f"gcbench · {suite}"), assets=_assets("", False)),
        "<body>",
        f"<h1>{html.escape(f'gcbench · {suite}')}</h1>",
        f"<p>{html.escape(description)}</p>" if description else "",
        f'<p class="meta">suite file {html.escape(str(manifest.get("suite_file", "?")))} · '
        f"results in {html.escape(str(suite_dir))}</p>",
        latest,
        "<h2>Runs</h2>",
        '<p class="meta">A run without a link has no page yet: '
        "<code>gcbench report RESULTS/&lt;suite&gt;/&lt;run&gt;</code> writes it.</p>",
        f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>",
        "</body></html>\n",
    ]
    index = out_dir / "index.html"
    _write_if_changed(index, "\n".join(p for p in body if p).encode())
    return index


def _saved_headline(path: Path, run: str) -> str:
    """A run's headline table from its `headline.json`, for the suite's index; nothing
    where the file cannot be read (a later `gcbench report` writes it again)."""
    try:
        entries = json.loads(read_limited(path, MAX_HEADLINE_BYTES, "headline"))
        table = headline_html(entries)
    except (ConfigError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    return table.replace("Which strategy wins</h2>",
                         f"Which strategy wins (run {html.escape(run)})</h2>", 1)  # fmt: skip


MAX_HEADLINE_BYTES = 16 * 2**20


def _compare_name(base: Path) -> str:
    """`compare-<folder>-<run-id>.html` for the run compared against; a folder name that
    would pass a file name's 255 bytes is cut, with a digest of the whole path (the other
    run may sit in any folder)."""
    folder = base.parent.name
    if len(folder.encode()) > 100:
        digest = hashlib.sha256(str(base).encode()).hexdigest()[:12]
        folder = folder.encode()[:80].decode(errors="ignore") + "-" + digest
    return f"compare-{folder}-{base.name[:100]}.html"


def write_compare(
    run: Path | str,
    other: Path | str,
    on: list[str] | None = None,
    out: Path | str | None = None,
    compared: tuple[pd.DataFrame, dict[str, Any]] | None = None,
) -> tuple[Path, pd.DataFrame, dict[str, Any]]:
    """`gcbench report RUN --compare OTHER`: writes <out>/<run-id>/compare-<other>.html
    beside the run's page (default out: reports/<suite>) and returns its path, the
    matched cells and the summary (`compare.compare_runs`, or `compared` where the caller
    has them already)."""
    from gcbench.report.compare import compare_page, compare_runs

    pairs, summary = compared if compared is not None else compare_runs(run, other, on)
    path = resolve_run(Path(run)).resolve()
    base = resolve_run(Path(other)).resolve()
    manifest = RunStore(path).read_manifest()
    suite = suite_folder_name(manifest.get("suite", path.parent.name), str(path / MANIFEST))
    out_dir = Path(out) if out is not None else Path("reports") / suite
    check_writable(out_dir, "--out")
    _write_assets(out_dir)
    title = f"gcbench · {suite} · {path.name} against {base.parent.name}/{base.name}"
    heading, fig = compare_page(pairs, summary, title)
    cols = [c for c in pairs.columns if c not in ("cell_id_base",)]
    rows = script_json(table_data(pairs, set(), cols))
    page = "\n".join([
        HEAD.format(title=html.escape(title), assets=_assets("../", False)),
        "<body>",
        '<nav><a href="index.html">← run</a><a href="../index.html">suite</a></nav>',
        heading,
        _figure_html(fig, "compare") if len(pairs) else "<p>No cells matched.</p>",
        "<h2>Matched cells</h2>",
        '<div id="results"></div>',
        f"<script>gcTable(\"results\", {rows}, null);</script>",
        "</body></html>\n",
    ])  # fmt: skip
    target = out_dir / path.name / _compare_name(base)
    _write_if_changed(target, page.encode())
    return target, pairs, summary
