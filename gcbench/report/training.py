"""Accuracy beside speed (issue #33): figures and the table of trained cells (`mode:
train`). Pure functions of a results DataFrame, as `figures`' are.

Every accuracy figure is a mean over the cell's seeds (its repetitions) with their
standard deviation; a cell's gap to fp32 is the difference of the two means, and a gap
no larger than the spread (the larger of the two standard deviations) is reported as no
gap. Speed-ups are fp32's iteration over the cell's: on the `project:` cluster where the
suite names one (simulated: the small task's steps on a large cluster's clock, a proxy,
and labelled so), else as measured on the actors that trained.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from gcbench.report.choices import SCENARIO
from gcbench.report.labels import esc, per_cell


def _trained(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "final_metric" not in df.columns:
        return df.iloc[0:0]
    ok = df[(df["status"] == "ok") & df["final_metric"].notna()]
    return ok


def projected(df: pd.DataFrame) -> bool:
    """The speed-ups and times are the `project:` cluster's (else measured)."""
    ok = _trained(df)
    return bool(not ok.empty and ok["projected_iteration_s"].notna().all())


def _scenario(row: pd.Series) -> tuple[str, ...]:
    """A cell's scenario (its config less the choices: model, cluster, network, dataset,
    ...), as text: cells are set against the fp32 of their own."""
    return tuple(str(row.get(c)) for c in SCENARIO)


def accuracy_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per trained cell: its label, seeds, final accuracy (mean, std), gap to
    fp32 and whether it exceeds the spread, steps to target (median of the seeds that
    reached it, how many did), iteration (measured; projected), speed-up over fp32 and
    time to target on the chosen clock."""
    ok = _trained(df)
    columns = ["cell_id", "label", "strategy", "compressor", "seeds", "accuracy", "std",
               "gap", "verdict", "steps_to_target", "reached", "iteration_s",
               "projected_iteration_s", "speedup", "time_to_target_s"]  # fmt: skip
    if ok.empty:
        return pd.DataFrame(columns=columns)
    labels = per_cell(df).set_index("cell_id")["label"]
    models = ok["model"].nunique() > 1  # (a label names the model where the run has two)
    clock = "projected_iteration_s" if projected(df) else "iteration_s"
    rows = []
    for cid, runs in ok.groupby("cell_id", sort=False):
        steps = runs["steps_to_target"].dropna()
        first = runs.iloc[0]
        rows.append({
            "scenario": _scenario(first),
            "cell_id": cid, "label": (f"{first['model']} · " if models else "")
            + str(labels.get(cid, first["compressor"])),
            "strategy": first["strategy"], "compressor": first["compressor"],
            "seeds": len(runs), "accuracy": runs["final_metric"].mean(),
            "std": runs["final_metric"].std(ddof=1) if len(runs) > 1 else 0.0,
            "steps_to_target": steps.median() if len(steps) else math.nan,
            "reached": len(steps), "iteration_s": runs["iteration_s"].mean(),
            "projected_iteration_s": runs["projected_iteration_s"].mean(),
            "clock_s": runs[clock].mean(),
        })  # fmt: skip
    base: dict[tuple[str, ...], dict[str, Any]] = {}  # each scenario's fp32 cell
    for r in rows:
        if r["strategy"] == "fp32" and r["compressor"] == "none":
            base.setdefault(r["scenario"], r)
    for r in rows:
        b = base.get(r["scenario"])
        if b is None:
            r.update(gap=math.nan, speedup=math.nan, verdict="no fp32 cell")
            continue
        gap = r["accuracy"] - b["accuracy"]
        within = abs(gap) <= max(r["std"], b["std"])
        r.update(gap=gap, speedup=b["clock_s"] / r["clock_s"],
                 verdict="no gap" if within else f"{gap * 100:+.1f} pts")  # fmt: skip
    table = pd.DataFrame(rows)
    table["time_to_target_s"] = table["steps_to_target"] * table["clock_s"]
    table = table.sort_values(["accuracy"], ascending=False, kind="stable")
    return table[columns].reset_index(drop=True)


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (higher x and higher y,
    at least as high on one and strictly higher on the other), sorted by x."""
    front = [
        i for i, (x, y) in enumerate(points)
        if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for x2, y2 in points)
    ]  # fmt: skip
    return sorted(front, key=lambda i: points[i][0])


def tradeoff_figure(df: pd.DataFrame) -> go.Figure:
    """Speed-up over fp32 (x) against the accuracy gap in points (y), one point per
    trained cell with its seeds' spread as an error bar; the Pareto front drawn."""
    table = accuracy_table(df).dropna(subset=["speedup", "gap"])
    where = "projected onto the project: cluster (a proxy)" if projected(df) else "measured"
    fig = go.Figure()
    xs, ys = table["speedup"].tolist(), (table["gap"] * 100).tolist()
    labels = [esc(t) for t in table["label"]]
    fig.add_scatter(
        x=xs, y=ys, mode="markers", name="cells", text=labels,
        error_y={"type": "data", "array": (table["std"] * 100).tolist()},
        hovertemplate="%{text}<br>speed-up %{x:.3g}x<br>gap %{y:+.2f} pts<extra></extra>",
    )  # fmt: skip
    front = pareto(list(zip(xs, ys, strict=True)))  # named on the plot; the rest on hover
    fig.add_scatter(x=[xs[i] for i in front], y=[ys[i] for i in front], mode="lines+text",
                    name="Pareto front", line={"dash": "dot"}, text=[labels[i] for i in front],
                    textposition="top left", hoverinfo="skip")  # fmt: skip
    fig.update_layout(
        title=f"Speed-up over fp32 ({where}) against accuracy gap",
        xaxis_title="speed-up over fp32 (x)", yaxis_title="final accuracy − fp32's (points)",
    )  # fmt: skip
    return fig


def _curves(runs: pd.DataFrame) -> tuple[list[int], list[float | None], list[float | None]]:
    """A cell's curves, averaged over its seeds (steps, loss, accuracy)."""
    steps = json.loads(runs.iloc[0]["curve_step"])
    loss = [json.loads(v) for v in runs["curve_loss"]]
    acc = [json.loads(v) for v in runs["curve_metric"]]
    return steps, _mean(loss), _mean(acc)


def _mean(curves: list[list[float | None]]) -> list[float | None]:
    """The seeds' mean at each point; None (a gap in the line) where a run diverged."""
    return [None if None in c else sum(c) / len(c) for c in zip(*curves, strict=True)]


def curves_figure(df: pd.DataFrame) -> go.Figure:
    """Training loss and held-out accuracy per cell against steps, and accuracy against
    wall time (steps x the cell's iteration on the chosen clock); means over seeds."""
    from plotly.subplots import make_subplots

    ok = _trained(df)
    table = accuracy_table(df).set_index("cell_id")
    clock = "projected" if projected(df) else "measured"
    titles = ["training loss", "held-out accuracy", f"held-out accuracy against {clock} time (s)"]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles)
    for i, (cid, runs) in enumerate(ok.groupby("cell_id", sort=False)):
        steps, loss, acc = _curves(runs)
        row = table.loc[cid]
        per_step = row["projected_iteration_s"] if clock == "projected" else row["iteration_s"]
        name, group = esc(row["label"]), f"c{i}"
        common: dict[str, Any] = {"mode": "lines", "name": name, "legendgroup": group}
        fig.add_scatter(x=steps, y=loss, showlegend=True, row=1, col=1, **common)
        fig.add_scatter(x=steps, y=acc, showlegend=False, row=1, col=2, **common)
        fig.add_scatter(x=[s * per_step for s in steps], y=acc, showlegend=False, row=1, col=3,
                        **common)  # fmt: skip
    fig.update_yaxes(type="log", row=1, col=1)  # a diverging run would flatten the rest
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    return fig


def table_html(df: pd.DataFrame) -> str:
    """The final-accuracy table against fp32, as HTML (escaped)."""
    import html

    table = accuracy_table(df)
    clock = "projected" if projected(df) else "measured"
    head = ["cell", "seeds", "accuracy", "± std", "gap to fp32", "steps to target",
            f"speed-up ({clock})", f"time to target ({clock}, s)"]  # fmt: skip

    def num(v: Any, fmt: str) -> str:
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    rows = [
        [r["label"], str(r["seeds"]), num(r["accuracy"] * 100, ".1f") + "%",
         num(r["std"] * 100, ".1f"), r["verdict"],
         f"{num(r['steps_to_target'], '.0f')} ({r['reached']}/{r['seeds']} reached)",
         num(r["speedup"], ".2f") + "x", num(r["time_to_target_s"], ".3g")]
        for _, r in table.iterrows()
    ]  # fmt: skip
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                    for row in rows)  # fmt: skip
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f'<table class="accuracy"><thead><tr>{header}</tr></thead><tbody>{cells}</tbody></table>'
