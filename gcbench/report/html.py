"""Write an offline HTML report: plotly's JavaScript once beside the pages (never a CDN),
one page per results folder, openable from file:// with no network."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from gcbench.files import atomic_write
from gcbench.report.figures import breakdown_figure, per_cell
from gcbench.results.store import RunStore, load_results, resolve_run

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
<p class="meta">{meta}</p>
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
    if not path.is_file() or path.stat().st_size != len(js):
        atomic_write(path, js)


def _table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p>No finished cells yet.</p>"
    bad = df[df["status"] != "ok"].drop_duplicates("cell_id")
    cells = pd.concat([per_cell(df), bad], ignore_index=True)
    cols = [c for c in TABLE_COLUMNS if c in cells.columns]
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


def write_report(results: Path | str, out: Path | str | None = None) -> Path:
    """Write `index.html` for a run folder (or a suite's latest run); returns its path."""
    run = resolve_run(Path(results))
    store = RunStore(run)
    manifest = store.read_manifest()
    suite = manifest.get("suite", store.suite)
    out_dir = Path(out) if out is not None else Path("reports") / suite
    out_dir.mkdir(parents=True, exist_ok=True)
    df = load_results(run)
    _write_plotly_js(out_dir)
    fig = breakdown_figure(df)
    figure = fig.to_html(
        full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True}
    )
    n_failed = int((df.drop_duplicates("cell_id")["status"] != "ok").sum()) if not df.empty else 0
    meta = (
        f"run {html.escape(store.run_id)} · {df['cell_id'].nunique() if not df.empty else 0} "
        f"cells · status {html.escape(str(manifest.get('status', '?')))} · "
        f"gcbench {html.escape(str(manifest.get('gcbench_version', '?')))} · "
        f"cluster: {html.escape(_resources(manifest))}"
    )
    failed = f'<p class="failed">{n_failed} cell(s) failed; see the table.</p>' if n_failed else ""
    page = PAGE.format(
        title=html.escape(f"gcbench · {suite}"),
        js=PLOTLY_JS,
        meta=meta,
        failed=failed,
        figure=figure,
        table=_table(df),
    )
    index = out_dir / "index.html"
    atomic_write(index, page.encode())
    return index
