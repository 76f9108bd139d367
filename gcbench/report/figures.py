"""Plotly figures: pure functions of a results DataFrame."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

PARTS = (
    ("compute_s", "compute", "#4C78A8"),
    ("compress_exposed_s", "exposed compression", "#F58518"),
    ("comm_exposed_s", "exposed communication", "#E45756"),
)


def cell_label(row: pd.Series) -> str:
    return (
        f"{row['model']} · {row['strategy']}"
        + (f" · {row['compressor']}" if row["compressor"] != "none" else "")
        + f" · {row['machines']}×{row['gpus_per_machine']} · {row['inter_gbps']:g} Gbps"
    )


def per_cell(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over repetitions of each ok cell, in a stable, readable order."""
    if df.empty:
        return pd.DataFrame(columns=["cell_id", "label", *(p for p, _, _ in PARTS)])
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return ok
    keys = ["cell_id"]
    firsts = ok.groupby(keys, sort=False).first()
    means = ok.groupby(keys, sort=False)[[p for p, _, _ in PARTS] + ["iteration_s"]].mean()
    out = firsts.drop(columns=means.columns).join(means).reset_index()
    out["label"] = out.apply(cell_label, axis=1)
    order = ["model", "strategy", "compressor", "gpus", "inter_gbps", "cell_id"]
    return out.sort_values(order, kind="stable").reset_index(drop=True)


def breakdown_figure(df: pd.DataFrame) -> go.Figure:
    """One stacked bar per cell: compute + exposed compression + exposed communication
    (their sum is the iteration time, by the sweep rule)."""
    cells = per_cell(df)
    fig = go.Figure()
    for column, name, colour in PARTS:
        fig.add_bar(
            x=cells["label"] if not cells.empty else [],
            y=(cells[column] * 1e3) if not cells.empty else [],
            name=name,
            marker_color=colour,
            hovertemplate="%{x}<br>" + name + ": %{y:.3f} ms<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        title="Iteration time breakdown per cell",
        yaxis_title="milliseconds per iteration",
        xaxis_tickangle=-40,
        legend={"orientation": "h", "y": 1.08},
        height=560,
        margin={"b": 220},
    )
    return fig
