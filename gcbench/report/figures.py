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
    servers = row.get("cpu_servers") or 0
    fusion = row.get("fusion") or "ddp"
    return (
        f"{row['model']} · {row['strategy']}"
        + (f" · {row['compressor']}" if row["compressor"] != "none" else "")
        + f" · {row['machines']}×{row['gpus_per_machine']}"
        + (f" + {servers:g} CPU server{'s' if servers > 1 else ''}" if servers else "")
        + f" · {row['inter_gbps']:g} Gbps"
        + (f" · fusion {fusion}" if fusion != "ddp" else "")
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
    (their sum is the iteration time, by the sweep rule). One panel per model, each with
    its own y-axis, so small models stay readable beside large ones."""
    from plotly.subplots import make_subplots

    cells = per_cell(df)
    models = list(dict.fromkeys(cells["model"])) if not cells.empty else []
    fig = make_subplots(
        rows=max(1, len(models)),
        cols=1,
        subplot_titles=models or None,
        vertical_spacing=0.5 / max(1, len(models)),
    )
    for row, model in enumerate(models, start=1):
        mine = cells[cells["model"] == model]
        labels = mine["label"].str.removeprefix(f"{model} · ")  # the panel names the model
        for column, name, colour in PARTS:
            fig.add_bar(
                x=labels,
                y=mine[column] * 1e3,
                name=name,
                marker_color=colour,
                legendgroup=name,
                showlegend=row == 1,
                row=row,
                col=1,
                hovertemplate="%{x}<br>" + name + ": %{y:.3f} ms<extra></extra>",
            )
        fig.update_yaxes(title_text="ms / iteration", row=row, col=1)
    fig.update_xaxes(tickangle=-35)
    fig.update_layout(
        barmode="stack",
        title="Iteration time breakdown per cell",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        height=max(1, len(models)) * 520 + 120,
        margin={"b": 40},
    )
    return fig
