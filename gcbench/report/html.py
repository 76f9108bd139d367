"""Write an offline HTML report: plotly's JavaScript once beside the pages (never a CDN),
one page per results folder, openable from file:// with no network.

The page shows the cells of the run's current grid (`all_cells=True`: every cell on
disk), says what every cell shares, and its table has a column for every config column
that varies. It is a pure function of the results, so a report of unchanged results is
not rewritten.
"""

from __future__ import annotations

import html
import warnings
from pathlib import Path

import pandas as pd

from gcbench.files import atomic_write, check_writable
from gcbench.report.figures import (
    DERIVED,
    ORDER,
    breakdown_figure,
    per_cell,
    value_text,
    varying,
)
from gcbench.results.store import (
    ResultsWarning,
    RunStore,
    read_cells,
    resolve_run,
    suite_folder_name,
)

PLOTLY_JS = "plotly.min.js"
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
    "error",
)
CONFIG_TABLE = set(ORDER) | set(DERIVED)

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<script src="{js}"></script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; position: sticky; top: 0; }}
td:first-child, th:first-child {{ text-align: left; }}
.meta {{ color: #666; }}
.failed {{ color: #b00; }}
</style></head>
<body>
<h1>{title}</h1>
{description}
<p class="meta">{meta}</p>
{common}
{notes}
{failed}
{figure}
<h2>Results</h2>
{table}
</body></html>
"""


def _write_plotly_js(out: Path) -> None:
    import plotly.offline

    path = out / PLOTLY_JS
    js = plotly.offline.get_plotlyjs().encode()
    _write_if_changed(path, js)


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except OSError:
        pass
    atomic_write(path, data)


def _table(df: pd.DataFrame) -> str:
    """Every cell, failed ones included, with the fixed columns and every other config
    column that varies."""
    if df.empty:
        return "<p>No finished cells yet.</p>"
    bad = df[df["status"] != "ok"].drop_duplicates("cell_id")
    cells = pd.concat([per_cell(df), bad], ignore_index=True)
    config = [c for c in TABLE_COLUMNS if c in CONFIG_TABLE]
    extra = [c for c in varying(cells) if c not in config and c not in DERIVED]
    wanted = [*config, *extra, *(c for c in TABLE_COLUMNS if c not in config)]
    cols = [c for c in wanted if c in cells.columns]
    table = cells[cols].astype(object).where(cells[cols].notna(), "")
    return table.to_html(
        index=False, float_format=lambda v: f"{v:.4g}", border=0, na_rep="", escape=True
    )


def _resources(manifest: dict) -> str:
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


def write_report(
    results: Path | str, out: Path | str | None = None, *, all_cells: bool = False
) -> Path:
    """Write `index.html` for a run folder (or a suite's latest run); returns its path.

    Shows the cells of the run's grid (the latest `gcbench run`'s suite), or with
    `all_cells` every cell on disk. Without `out`, writes to reports/<suite> (the
    manifest's suite, checked to be a folder name). A cell file that cannot be read is
    left out, said on the page and in a `ResultsWarning`. The folder is checked to be
    writable first (ConfigError); unchanged files are not rewritten.
    """
    run = resolve_run(Path(results))
    store = RunStore(run)
    manifest = store.read_manifest()
    named = run.resolve()  # `gcbench report .` in a run folder: the folders' own names
    suite = suite_folder_name(manifest.get("suite", named.parent.name), str(store.manifest_path))
    out_dir = Path(out) if out is not None else Path("reports") / suite
    check_writable(out_dir, "--out")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        tables = read_cells(run, all_cells)
    left_out = [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]
    for line in left_out:  # on to the caller
        warnings.warn(line, ResultsWarning, stacklevel=2)
    frames = [t.to_pandas() for t in tables]
    df = (
        pd.concat(frames, ignore_index=True).sort_values(["cell_id", "repetition"], kind="stable")
        if frames
        else pd.DataFrame()
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_plotly_js(out_dir)
    fig = breakdown_figure(df)
    figure = fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id="breakdown",  # a fixed id: the same results give the same page
        config={"displaylogo": False, "responsive": True},
    )
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
        f"run {html.escape(named.name)} · {html.escape(scope)} · "
        f"status {html.escape(str(manifest.get('status', '?')))} · "
        f"gcbench {html.escape(str(manifest.get('gcbench_version', '?')))} · "
        f"cluster: {html.escape(_resources(manifest))}"
    )
    failed = f'<p class="failed">{n_failed} cell(s) failed; see the table.</p>' if n_failed else ""
    notes = "".join(
        f'<p class="failed">Left out: {html.escape(line)}</p>' for line in left_out
    )
    description = str(manifest.get("description") or "").strip()
    page = PAGE.format(
        title=html.escape(f"gcbench · {suite}"),
        description=f"<p>{html.escape(description)}</p>" if description else "",
        js=PLOTLY_JS,
        meta=meta,
        common=_common(df),
        notes=notes,
        failed=failed,
        figure=figure,
        table=_table(df),
    )
    index = out_dir / "index.html"
    _write_if_changed(index, page.encode())
    return index
