"""Figures that set one way of running a cell against another: emulated cells against
their simulated twins, measured cells (`mode: measure`) against the simulator's
prediction. Pure functions of a results DataFrame, as `figures`' are."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from gcbench.report.labels import esc, per_cell, row_keys
from gcbench.results.schema import CONFIG_COLUMNS

# Columns an emulated cell shares with its simulated twin.
_TWIN_SKIP = ("mode", "clock", "compute_time")


def agreement_table(df: pd.DataFrame) -> pd.DataFrame:
    """Each emulated cell beside the simulated cell of the same config (mode, clock and
    compute time aside): both iteration times and wire bytes."""
    cells = per_cell(df)
    columns = ["cell_id", "sim_cell_id", "label", "iteration_s", "sim_iteration_s",
               "wire_bytes", "sim_wire_bytes"]  # fmt: skip
    if cells.empty or "mode" not in cells or not {"emulate", "simulate"} <= set(cells["mode"]):
        return pd.DataFrame(columns=columns)
    keys = [c for c in CONFIG_COLUMNS if c in cells.columns and c not in _TWIN_SKIP]
    text = pd.Series(row_keys(cells, keys), index=cells.index)
    sim = cells[cells["mode"] == "simulate"]
    twins = dict(zip(text[sim.index], sim.index, strict=True))
    rows = []
    for i, r in cells[cells["mode"] == "emulate"].iterrows():
        j = twins.get(text[i])
        if j is None:
            continue
        s = cells.loc[j]
        rows.append([r["cell_id"], s["cell_id"], f"{r['model']} · {r['label']}",
                     r["iteration_s"], s["iteration_s"], r.get("wire_bytes"),
                     s.get("wire_bytes")])  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def agreement_figure(df: pd.DataFrame) -> go.Figure:
    """Emulate against simulate where a run holds both for one config: iteration time
    and wire bytes, emulated (y) against simulated (x), one point per pair, y = x drawn."""
    from plotly.subplots import make_subplots

    pairs = agreement_table(df)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["iteration (ms)", "wire bytes per GPU"])
    for col, (y, x, scale) in enumerate(
        (("iteration_s", "sim_iteration_s", 1e3), ("wire_bytes", "sim_wire_bytes", 1.0)), start=1
    ):
        xs = pairs[x].astype(float) * scale
        ys = pairs[y].astype(float) * scale
        fig.add_scatter(
            x=xs.tolist(), y=ys.tolist(), mode="markers", name="cell pairs", showlegend=col == 1,
            text=[esc(t) for t in pairs["label"]], row=1, col=col,
            hovertemplate="%{text}<br>simulated %{x:.6g}<br>emulated %{y:.6g}<extra></extra>",
        )  # fmt: skip
        lo = float(min(xs.min(), ys.min())) if len(pairs) else 0.0
        hi = float(max(xs.max(), ys.max())) if len(pairs) else 1.0
        fig.add_scatter(
            x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", showlegend=col == 1,
            line={"dash": "dash", "color": "#888"}, row=1, col=col, hoverinfo="skip",
        )  # fmt: skip
        fig.update_xaxes(title_text="simulated", row=1, col=col)
        fig.update_yaxes(title_text="emulated", row=1, col=col)
    fig.update_layout(title=f"Emulate against simulate, the same config ({len(pairs)} pairs)")
    return fig


def prediction_figure(df: pd.DataFrame) -> go.Figure:
    """Measured cells (`mode: measure`) against the simulator's prediction for the same
    cell: the iteration measured (y, mean over repetitions) against predicted (x), one
    point per cell with its error, y = x drawn; log axes (predictions can be far off)."""
    cells = per_cell(df)
    cells = cells[cells["predicted_iteration_s"].notna()] if "predicted_iteration_s" in cells \
        else cells.iloc[0:0]  # fmt: skip
    xs = (cells["predicted_iteration_s"].astype(float) * 1e3).tolist()
    ys = (cells["iteration_s"].astype(float) * 1e3).tolist()
    text = [esc(f"{m} · {lab}: {y / x - 1:+.0%}") for m, lab, x, y
            in zip(cells["model"], cells["label"], xs, ys, strict=True)]  # fmt: skip
    fig = go.Figure()
    fig.add_scatter(x=xs, y=ys, mode="markers", name="measured cells", text=text,
                    hovertemplate="%{text}<br>predicted %{x:.4g} ms<br>measured %{y:.4g} ms"
                    "<extra></extra>")  # fmt: skip
    lo, hi = (min(xs + ys), max(xs + ys)) if xs else (1.0, 10.0)
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", hoverinfo="skip",
                    line={"dash": "dash", "color": "#888"})  # fmt: skip
    errors = sorted(abs(y / x - 1) for x, y in zip(xs, ys, strict=True) if x > 0)
    median = errors[len(errors) // 2] if errors else float("nan")
    fig.update_xaxes(title_text="predicted ms / iteration (simulate)", type="log")
    fig.update_yaxes(title_text="measured ms / iteration", type="log")
    fig.update_layout(title=f"Measured against predicted ({len(xs)} cells; median "
                            f"|error| {median:.0%})")  # fmt: skip
    return fig


def _parts(cells: pd.DataFrame, group: str) -> list[tuple[str, pd.Series]]:
    """(part, seconds) of each cell's iteration as measured or predicted: forward,
    backward compute, exposed communication, update. Measured: backward less the seconds
    inside gcbench's synchronous hooks (their communication); under torch's asynchronous
    hooks backward keeps DDP's wait for them, and a row from before the parts were
    measured keeps compute and exposed alone."""
    zero = pd.Series(0.0, index=cells.index)

    def col(name: str) -> pd.Series:
        return cells[name].astype(float) if name in cells else pd.Series(float("nan"), cells.index)

    if group == "predicted":
        fwd, bwd, upd = col("predicted_forward_s"), col("predicted_backward_s"), \
            col("predicted_update_s")  # fmt: skip
        split = fwd.notna()
        exposed = col("predicted_exposed_s").fillna(0.0)
        compute = col("predicted_compute_s").fillna(col("predicted_iteration_s"))
    else:
        fwd, bwd, upd = col("forward_s"), col("backward_s"), col("update_s")
        split = fwd.notna()
        exposed = col("comm_exposed_s").fillna(0.0)
        bwd = bwd - exposed
        compute = col("compute_s").fillna(col("iteration_s") - exposed)
    return [("forward", fwd.where(split, zero)),
            ("backward", bwd.where(split, compute)),  # (unsplit rows: compute whole)
            ("exposed communication", exposed),
            ("update", upd.where(split, zero))]  # fmt: skip


COLOURS = {"forward": "#72B7B2", "backward": "#4C78A8", "exposed communication": "#E45756",
           "update": "#F58518"}  # fmt: skip


def prediction_breakdown_figure(df: pd.DataFrame) -> go.Figure:
    """Each measured cell's iteration split as measured and as predicted, side by side:
    forward, backward, exposed communication and update (measured: `cluster.measure`'s
    marks and gcbench's synchronous hooks' timestamps; under torch's asynchronous hooks
    backward holds DDP's wait for the communication)."""
    cells = per_cell(df)
    if "predicted_compute_s" in cells:
        cells = cells[cells["predicted_compute_s"].notna()]
    else:
        cells = cells.iloc[0:0]
    labels = [esc(f"{m} · {lab}") for m, lab in zip(cells["model"], cells["label"], strict=True)]
    fig = go.Figure()
    for group in ("measured", "predicted"):
        for part, seconds in _parts(cells, group):
            fig.add_bar(x=[labels, [group] * len(cells)], y=(seconds * 1e3).tolist(),
                        name=part if group == "measured" else None, legendgroup=part,
                        showlegend=group == "measured", marker_color=COLOURS[part])  # fmt: skip
    fig.update_layout(barmode="stack", title="Breakdown, measured and predicted (ms / "
                      "iteration; torch's hooks: backward holds the communication)")
    fig.update_yaxes(title_text="ms / iteration")
    return fig
