"""`gcbench report RUN --compare OTHER_RUN [--on key,...]`: per-cell differences between
two runs, for regressions between gcbench versions (cells matched by id: the same config)
or between settings (cells matched on the values of the named config columns, e.g.
`--on model,strategy,machines` to set a run at 25 Gbps beside one at 100 Gbps).

Δ% is RUN against OTHER_RUN, the baseline: (RUN − OTHER) / OTHER × 100, so a positive
Δ of the iteration time is a slow-down. Each side is the mean over a cell's repetitions;
failed cells take no part. A key that matches two cells on one side is refused (naming
the columns that tell them apart), never averaged.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd

from gcbench.errors import ConfigError
from gcbench.report.labels import per_cell, row_keys, value_text, varying
from gcbench.results.schema import CONFIG_COLUMNS
from gcbench.results.store import load_results, resolve_run

METRICS = ("iteration_s", "throughput", "wire_bytes")


def _keys(on: list[str] | None) -> list[str]:
    if not on:
        return ["cell_id"]
    unknown = [k for k in on if k not in CONFIG_COLUMNS]
    if unknown:
        raise ConfigError(
            f"--on: {', '.join(unknown)}: not a config column (one of: {', '.join(CONFIG_COLUMNS)})"
        )
    return list(dict.fromkeys(on))


def _side(cells: pd.DataFrame, keys: list[str], name: str) -> pd.DataFrame:
    """One side's cells keyed by `keys`, each key naming one cell."""
    keyed = cells.assign(_key=row_keys(cells, keys))
    twice = keyed[keyed.duplicated("_key", keep=False)]
    if not twice.empty:
        first = twice[twice["_key"] == twice["_key"].iloc[0]]
        where = " ".join(f"{k}={value_text(first[k].iloc[0])}" for k in keys)
        apart = [c for c in varying(first) if c not in keys]
        raise ConfigError(
            f"--on: {len(first)} cells of {name} share {where}; add the columns that "
            f"tell them apart to --on: {', '.join(apart) or 'cell_id'}"
        )
    return keyed


def compare_runs(
    run: Path | str, other: Path | str, on: list[str] | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The matched cells of two runs and a summary. Rows: the key columns, then for each
    metric in `METRICS` its value in `other` (`<metric>_base`), in `run`, and `Δ%`
    (`<metric>_delta_pct`), sorted by |Δ%| of the iteration time, largest first."""
    keys = _keys(on)
    paths = [resolve_run(Path(run)), resolve_run(Path(other))]
    sides = []
    for path in paths:
        cells = per_cell(load_results(path))
        if cells.empty:
            raise ConfigError(f"{path}: no finished cells to compare")
        sides.append(_side(cells, keys, str(path)))
    mine, base = sides
    shown = [k for k in keys if k != "cell_id"] or ["model", "strategy", "compressor"]
    cols = ["_key", *(c for c in shown if c in mine.columns), "label", "cell_id"]
    merged = mine[cols + list(METRICS)].merge(
        base[["_key", "cell_id", *METRICS]], on="_key", suffixes=("", "_base")
    )
    for m in METRICS:
        merged[f"{m}_delta_pct"] = (merged[m] - merged[f"{m}_base"]) / merged[f"{m}_base"] * 100
    order = merged["iteration_s_delta_pct"].abs().sort_values(ascending=False, kind="stable")
    merged = merged.loc[order.index].drop(columns="_key").reset_index(drop=True)
    deltas = merged["iteration_s_delta_pct"]
    summary = {
        "run": str(paths[0]),
        "baseline": str(paths[1]),
        "on": keys,
        "matched": len(merged),
        "only_in_run": int((~mine["_key"].isin(base["_key"])).sum()),
        "only_in_baseline": int((~base["_key"].isin(mine["_key"])).sum()),
        "iteration_delta_pct_median": float(deltas.median()) if len(deltas) else None,
        "slower": int((deltas > 0).sum()),
        "faster": int((deltas < 0).sum()),
    }
    return merged, summary


def summary_lines(pairs: pd.DataFrame, summary: dict[str, Any], top: int = 10) -> list[str]:
    """The terminal's view: counts, the median Δ%, and the largest changes."""
    lines = [
        f"{summary['matched']} cells matched on {','.join(summary['on'])} "
        f"({summary['only_in_run']} only in the run, {summary['only_in_baseline']} only in "
        "the baseline)",
    ]
    if summary["matched"]:
        lines.append(
            f"iteration time Δ% median {summary['iteration_delta_pct_median']:+.2f}%: "
            f"{summary['slower']} slower, {summary['faster']} faster"
        )
    for r in pairs.head(top).to_dict("records"):
        lines.append(
            f"  {r['iteration_s_delta_pct']:+8.2f}%  {r['iteration_s_base'] * 1e3:10.3f} → "
            f"{r['iteration_s'] * 1e3:10.3f} ms  {r.get('model', '')} · {r['label']}"
        )
    return lines


def compare_page(pairs: pd.DataFrame, summary: dict[str, Any], title: str) -> tuple[str, Any]:
    """The comparison page's heading and summary (HTML) and its figure: a bar per
    matched cell of its Δ% (`html.write_compare` adds the table)."""
    import plotly.graph_objects as go

    from gcbench.report.labels import MAX_BARS, esc

    fig = go.Figure()
    top = pairs.head(MAX_BARS)
    models = top["model"] if "model" in top.columns else [""] * len(top)
    bars = [f"{m} · {x}" for m, x in zip(models, top["label"], strict=True)]
    fig.add_bar(
        x=[esc(x) for x in bars],
        y=top["iteration_s_delta_pct"].tolist(),
        marker_color=["#E45756" if d > 0 else "#4C78A8" for d in top["iteration_s_delta_pct"]],
        hovertemplate="%{x}<br>%{y:+.2f}%<extra></extra>",
        name="Δ% iteration time",
    )
    shown = "" if len(top) == len(pairs) else f" (the {len(top)} largest of {len(pairs)})"
    fig.update_layout(
        title=f"Iteration time Δ% against the baseline per cell{shown}; above 0: slower",
        xaxis={"type": "category", "tickangle": -35},
        yaxis_title="Δ% iteration time",
    )
    lines = summary_lines(pairs, summary, top=0)
    text = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    names = (
        f'<p class="meta">run {html.escape(summary["run"])} against the baseline '
        f"{html.escape(summary['baseline'])}</p>"
    )
    return f"<h1>{html.escape(title)}</h1>{names}{text}", fig
