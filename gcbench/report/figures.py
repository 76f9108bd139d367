"""Plotly figures: pure functions of a results DataFrame.

A bar is one cell (the mean over its repetitions, which the title says), never more: a
cell's label names every config column that varies within its panel (`varying`), and
cells that the columns cannot tell apart (say, two versions of one profile file) get
their cell id's first digits, so no two cells share an x position and plotly never
stacks them into one bar.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from gcbench.config.strategies import OWN_KINDS
from gcbench.results.schema import CONFIG_COLUMNS

PARTS = (
    ("compute_s", "compute", "#4C78A8"),
    ("compress_exposed_s", "exposed compression", "#F58518"),
    ("comm_exposed_s", "exposed communication", "#E45756"),
)

# Config columns that follow from others (gpus = machines x gpus_per_machine; the
# compressor's kind and parameters from its label): never what alone tells cells apart.
DERIVED = ("gpus", "compressor_kind", "compressor_params")
# The order a label names a cell's columns in; columns added to the schema later follow.
LABEL_ORDER = (
    "strategy",
    "compressor",
    "machines",
    "gpus_per_machine",
    "cpu_servers",
    "inter_gbps",
    "intra",
    "batch_size",
    "seq_len",
    "fusion",
    "device",
    "profile",
    "intra_gbs",
    "intra_latency_us",
    "intra_efficiency",
    "inter_latency_us",
    "inter_efficiency",
    "nics_per_machine",
    "server_gbps",
    "cpu_cores",
    "summation_gbs",
    "seed",
    "mode",
    "model",
)
ORDER = (
    *LABEL_ORDER,
    *(c for c in CONFIG_COLUMNS if c not in LABEL_ORDER and c not in DERIVED),
)
# How a value reads in a label: text before and after it.
WORDS: dict[str, tuple[str, str]] = {
    "inter_gbps": ("", " Gbps"),
    "batch_size": ("batch ", ""),
    "seq_len": ("seq ", ""),
    "fusion": ("fusion ", ""),
    "profile": ("profile ", ""),
    "intra_gbs": ("intra ", " GB/s"),
    "intra_latency_us": ("intra ", " µs"),
    "intra_efficiency": ("intra efficiency ", ""),
    "inter_latency_us": ("inter ", " µs"),
    "inter_efficiency": ("inter efficiency ", ""),
    "nics_per_machine": ("", " NICs"),
    "server_gbps": ("servers ", " Gbps"),
    "cpu_cores": ("", " CPU cores"),
    "summation_gbs": ("summation ", " GB/s"),
    "seed": ("seed ", ""),
}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _same(value: Any) -> Any:
    """A value as compared when finding the columns that vary (every missing one alike)."""
    return None if _missing(value) else value


def varying(cells: pd.DataFrame) -> list[str]:
    """The config columns (derived ones aside) that take more than one value in `cells`,
    in label order."""
    out = []
    for col in ORDER:
        if col in cells.columns and len({_same(v) for v in cells[col]}) > 1:
            out.append(col)
    return out


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def value_text(value: Any) -> str:
    """A config value as text: numbers short (`10`, `0.8`), a missing one `default`."""
    return "default" if _missing(value) else _number(value)


def describe(col: str, value: Any, row: pd.Series | None = None) -> str:
    """How one config value reads in a label or a title, e.g. `batch 32`, `10 Gbps`."""
    if col in ("machines", "gpus_per_machine") and row is not None:
        return f"{_number(row['machines'])}×{_number(row['gpus_per_machine'])}"
    if col == "cpu_servers":
        n = 0 if _missing(value) else value
        return "no CPU servers" if not n else f"+ {_number(n)} CPU server{'s' * (n != 1)}"
    before, after = WORDS.get(col, ("", ""))
    if _missing(value):
        return f"{col} default"
    if col == "profile":
        value = PurePath(str(value)).name
    return f"{before}{_number(value)}{after}"


def _parts(row: pd.Series, cols: list[str]) -> list[str]:
    parts = []
    for col in cols:
        if col == "gpus_per_machine" and "machines" in cols:
            continue  # one `M×G` part for both
        parts.append(describe(col, row.get(col), row))
    return parts


def cell_label(row: pd.Series, cols: list[str] | None = None) -> str:
    """A cell's label: its strategy, then its value of each column in `cols` (by default
    the strategy, compressor, cluster, servers, inter bandwidth and fusion)."""
    if cols is None:
        cols = ["compressor", "machines", "gpus_per_machine", "cpu_servers", "inter_gbps"]
        cols += ["fusion"]
    return " · ".join([str(row["strategy"]), *_parts(row, [c for c in cols if c != "strategy"])])


def _labels(panel: pd.DataFrame) -> list[str]:
    """One distinct label per cell of a panel (a model): the strategy and every column
    that varies there; cells still alike get the first digits of their cell ids."""
    cols = [c for c in varying(panel) if c not in ("strategy", "model")]
    labels = [cell_label(row, cols) for _, row in panel.iterrows()]
    counts = pd.Series(labels).value_counts()
    return [
        f"{label} · #{cid[:8]}" if counts[label] > 1 else label
        for label, cid in zip(labels, panel["cell_id"], strict=True)
    ]


def per_cell(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over repetitions of each ok cell, labelled (`_labels`, per model), in a
    stable, readable order."""
    columns = ["cell_id", "label", *(p for p, _, _ in PARTS)]
    if df.empty:
        return pd.DataFrame(columns=columns)
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=[*df.columns, "label"])
    keys = ["cell_id"]
    firsts = ok.groupby(keys, sort=False).first()
    means = ok.groupby(keys, sort=False)[[p for p, _, _ in PARTS] + ["iteration_s"]].mean()
    out = firsts.drop(columns=means.columns).join(means).reset_index()
    order = ["model", *(c for c in varying(out) if c != "model"), "cell_id"]
    out = out.sort_values(order, kind="stable", na_position="first").reset_index(drop=True)
    out["label"] = ""
    for _, panel in out.groupby("model", sort=False, dropna=False):
        out.loc[panel.index, "label"] = _labels(panel)
    return out


def panel_title(panel: pd.DataFrame, across: list[str]) -> str:
    """A panel's title: its model, and the values shared by its cells of the columns
    in `across` (those that vary over the whole report)."""
    first = panel.iloc[0]
    own = set(varying(panel))
    shared = [c for c in across if c not in own and c != "model" and c != "strategy"]
    return " · ".join([str(first["model"]), *_parts(first, shared)])


def breakdown_figure(df: pd.DataFrame) -> go.Figure:
    """One stacked bar per cell: compute + exposed compression + exposed communication
    (their sum is the iteration time, by the sweep rule). One panel per model, each with
    its own y-axis, so small models stay readable beside large ones."""
    from plotly.subplots import make_subplots

    cells = per_cell(df)
    models = list(dict.fromkeys(cells["model"])) if not cells.empty else []
    across = varying(cells) if not cells.empty else []
    titles = [panel_title(cells[cells["model"] == m], across) for m in models]
    fig = make_subplots(
        rows=max(1, len(models)),
        cols=1,
        subplot_titles=titles or None,
        vertical_spacing=0.5 / max(1, len(models)),
    )
    for row, model in enumerate(models, start=1):
        mine = cells[cells["model"] == model]
        for column, name, colour in PARTS:
            fig.add_bar(
                x=list(mine["label"]),
                y=mine[column] * 1e3,
                name=name,
                marker_color=colour,
                legendgroup=name,
                showlegend=row == 1,
                row=row,
                col=1,
                customdata=[cid[:12] for cid in mine["cell_id"]],
                hovertemplate="%{x}<br>"
                + name
                + ": %{y:.3f} ms<br>cell %{customdata}<extra></extra>",
            )
        fig.update_yaxes(title_text="ms / iteration", row=row, col=1)
    fig.update_xaxes(tickangle=-35, type="category")
    reps = int(df["repetition"].nunique()) if "repetition" in df.columns and len(df) else 1
    fig.update_layout(
        barmode="stack",
        title="Iteration time breakdown per cell"
        + (f" (each bar the mean of its {reps} repetitions)" if reps > 1 else ""),
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        height=max(1, len(models)) * 520 + 120,
        margin={"b": 40},
    )
    return fig


# Columns that tell a cell's workload and hardware apart, for matching strategies with
# `upper-bound` on the same cell: all but the strategy, the compressor (strategies without
# one, or with their own, are compared with every compressor's bound) and the CPU servers
# (which upper-bound never uses).
_BOUND_SKIP = ("strategy", "compressor", "cpu_servers", "server_gbps", "summation_gbs")


def gap_to_upper_bound(df: pd.DataFrame) -> pd.DataFrame:
    """ByteComp Fig. 13's data: for every ok `upper-bound` cell and every other strategy
    run on the same workload and hardware (the same compressor, for strategies that take
    one), that strategy's mean iteration ÷ the bound's. Columns: `strategy`, `ratio`,
    `bound_cell_id`, `cell_id`."""
    columns = ["strategy", "ratio", "bound_cell_id", "cell_id"]
    if df.empty or "upper-bound" not in set(df["strategy"]):
        return pd.DataFrame(columns=columns)
    ok = df[df["status"] == "ok"]
    means = ok.groupby("cell_id", sort=False).agg(
        {"iteration_s": "mean", **{c: "first" for c in CONFIG_COLUMNS}}
    )
    keys = [c for c in CONFIG_COLUMNS if c not in _BOUND_SKIP and c not in DERIVED]
    bounds = means[means["strategy"] == "upper-bound"]
    others = means[means["strategy"] != "upper-bound"]
    rows = []
    for bound_id, bound in bounds.iterrows():
        same = (others[keys].fillna("") == bound[keys].fillna("")).all(axis=1)
        matched = others[same]
        taken = matched["compressor_kind"].isin({"none", *OWN_KINDS})  # no grid compressor
        matched = matched[taken | (matched["compressor"] == bound["compressor"])]
        for cell_id, row in matched.iterrows():
            rows.append((row["strategy"], row["iteration_s"] / bound["iteration_s"], bound_id,
                         cell_id))  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def gap_figure(df: pd.DataFrame) -> go.Figure:
    """ByteComp Fig. 13's view: per strategy, the CDF over cells of its iteration time ÷
    upper-bound's on the same cell (1 = the bound; left is better)."""
    gaps = gap_to_upper_bound(df)
    fig = go.Figure()
    for strategy, part in gaps.groupby("strategy", sort=True):
        ratios = sorted(part["ratio"])
        n = len(ratios)
        fig.add_trace(
            go.Scatter(
                x=ratios,
                y=[(i + 1) / n for i in range(n)],
                mode="lines",
                line_shape="hv",
                name=f"{strategy} ({n} cells)",
            )
        )
    fig.update_layout(
        title="Iteration time ÷ upper-bound's on the same cell (CDF over cells; an aggregate)",
        xaxis_title="iteration time / upper-bound",
        yaxis_title="fraction of cells",
        yaxis_range=[0, 1],
    )
    return fig
