"""Plotly figures: pure functions of a results DataFrame.

A bar is one cell (the mean over its repetitions, which the title says), never more: a
cell's label names every config column that varies within its panel (`varying`), and
cells that the columns cannot tell apart (say, two versions of one profile file) get
their cell id's first digits, so no two cells share an x position and plotly never
stacks them into one bar. The cells, their labels and the views are `labels`'.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from gcbench import strategies
from gcbench.report.labels import (
    DERIVED,
    MAX_BARS,
    PARTS,
    cell_label,
    esc,
    number_text,
    panel_labels,
    panel_title,
    per_cell,
    row_keys,
    varying,
    views,
)
from gcbench.results.schema import CONFIG_COLUMNS


def _dropdown(
    fig: go.Figure,
    titles: list[str],
    per_view: list[int],
    label: str,
    layouts: list[dict[str, Any]] | None = None,
    legend_only: set[int] | None = None,
) -> None:
    """A dropdown that shows one view's traces (traces are laid out view after view,
    `per_view[i]` of them for view i) and, where given, sets its layout (`layouts[i]`:
    axis ranges); the traces of `legend_only` show in the legend only, a click away. The
    title says what it picks (`label`)."""
    hidden = legend_only or set()
    for i in hidden:
        if fig.data[i].visible is True:
            fig.data[i].visible = "legendonly"
    if len(titles) < 2:
        return
    total = sum(per_view)
    fig.update_layout(title_text=f"{fig.layout.title.text} · menu: {label}")
    buttons = []
    first = 0
    for v, (title, n) in enumerate(zip(titles, per_view, strict=True)):
        visible: list[Any] = [
            ("legendonly" if i in hidden else True) if first <= i < first + n else False
            for i in range(total)
        ]
        if layouts is None:
            buttons.append({"label": esc(title), "method": "restyle",
                            "args": [{"visible": visible}]})  # fmt: skip
        else:
            buttons.append({"label": esc(title), "method": "update",
                            "args": [{"visible": visible}, layouts[v]]})  # fmt: skip
        first += n
    fig.update_layout(
        updatemenus=[
            {
                "buttons": buttons,
                "direction": "down",
                "x": 0,
                "xanchor": "left",
                "y": 1.0,
                "yanchor": "bottom",
                "pad": {"b": 10},
                "showactive": True,
            }
        ],
    )


def aggregate(panel: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """A panel's cells as one row per strategy and compressor: the mean of `columns`,
    `label` naming the group and `cells` counting it."""
    groups = panel.groupby(["strategy", "compressor"], sort=True, dropna=False)
    out = groups[columns].mean()
    out["cells"] = groups.size()
    out = out.reset_index()
    out["label"] = [
        f"{s} · {c}" + (f" (mean of {n} cells)" if n > 1 else "")
        for s, c, n in zip(out["strategy"], out["compressor"], out["cells"], strict=True)
    ]
    out["cell_id"] = ""
    return out


# A bar taller than this many times a panel's fastest (of the strategies one can run) is
# clipped at that height, its value written on it: two slow strategies would otherwise
# squeeze the contenders flat.
CLIP = 3.0


def _where_choices_matter(cells: pd.DataFrame, shown: list[tuple[str, pd.Series]]) -> int:
    """The view of the most GPUs and, among those, the slowest network: where the
    choice of strategy matters most (the breakdown opens on it)."""
    def key(v: int) -> tuple[float, float]:
        mine = cells[shown[v][1]]
        gpus = float(mine["gpus"].max()) if "gpus" in mine and not mine.empty else 0.0
        gbps = float(mine["inter_gbps"].min()) if "inter_gbps" in mine and not mine.empty else 0.0
        return (-gpus, gbps)

    return min(range(len(shown)), key=key)


def _breakdown_panel(
    fig: go.Figure, mine: pd.DataFrame, row: int, v: int, layout: dict[str, Any]
) -> int:
    """One panel of `breakdown_figure` in view `v`: its bars fastest first, the fastest
    one can run starred, outliers clipped at `CLIP` times it (the axis range for the view
    into `layout`); returns the traces added."""
    from gcbench.report.choices import runnable

    n = 0
    total = sum(mine[p].fillna(0) for p, _, _ in PARTS) * 1e3
    mine = mine.assign(_total=total).sort_values("_total", kind="stable")
    labels = [esc(x) for x in mine["label"]]
    can_run = [runnable(s) for s in mine["strategy"]]
    best = can_run.index(True) if any(can_run) else 0
    if any(can_run):
        labels[best] = "★ " + labels[best]
    fastest = float(mine["_total"].iloc[best])  # the one a user can run
    cap = CLIP * fastest if fastest > 0 else 0.0
    clipped = cap > 0 and float(mine["_total"].max()) > cap
    axis = "yaxis" if row == 1 else f"yaxis{row}"
    layout[f"{axis}.range"] = [0, cap * 1.08] if clipped else None
    ids = [cid[:12] for cid in mine["cell_id"]]
    for column, name, colour in PARTS:
        fig.add_bar(
            x=labels,
            y=(mine[column] * 1e3).tolist(),
            name=name,
            marker_color=colour,
            legendgroup=name,
            showlegend=row == 1 and v == 0,
            visible=v == 0,
            row=row,
            col=1,
            customdata=ids,
            hovertemplate="%{x}<br>" + name + ": %{y:.3f} ms<br>cell %{customdata}<extra></extra>",
        )
        n += 1
    if "bubbles_s" in mine.columns:
        fig.add_scatter(
            x=labels,
            y=(mine["bubbles_s"].fillna(0) * 1e3).tolist(),
            name="bubbles (idle gaps on the busiest link)",
            mode="markers",
            marker={"symbol": "diamond", "color": "#54A24B", "size": 9},
            legendgroup="bubbles",
            showlegend=row == 1 and v == 0,
            visible=v == 0,
            row=row,
            col=1,
            hovertemplate="%{x}<br>bubbles: %{y:.3f} ms<extra></extra>",
        )
        n += 1
    over = mine["_total"] > cap if clipped else mine["_total"] < 0
    fig.add_scatter(  # the clipped bars' times, written at the cap
        x=[lab for lab, o in zip(labels, over, strict=True) if o],
        y=[cap] * int(over.sum()),
        text=[f"{t:,.0f}↑" for t in mine["_total"][over]],
        mode="text",
        textposition="top center",
        textfont={"size": 10},
        name="clipped",
        showlegend=False,
        visible=v == 0,
        row=row,
        col=1,
        hoverinfo="skip",
    )
    fig.update_yaxes(title_text="ms / iteration", row=row, col=1)
    if v == 0 and clipped:
        fig.update_yaxes(range=[0, cap * 1.08], row=row, col=1)
    return n + 1


def breakdown_figure(df: pd.DataFrame) -> go.Figure:
    """One stacked bar per cell: compute + exposed compression + exposed communication
    (their sum is the iteration time, by the sweep rule), the busiest link's bubbles as a
    marker beside it. One panel per model, each with its own y-axis, so small models stay
    readable beside large ones; bars fastest first, the fastest strategy one can run
    starred; a bar over `CLIP` times the panel's fastest is clipped, its time written on
    it. A dropdown picks the cluster size and bandwidth when they vary, opening on the
    largest cluster and slowest network (`_where_choices_matter`). A panel of more than
    `MAX_BARS` cells shows per-strategy means, labelled so."""
    from plotly.subplots import make_subplots

    cells = per_cell(df)
    models = list(dict.fromkeys(cells["model"])) if not cells.empty else []
    control = ["gpus", "machines", "gpus_per_machine", "inter_gbps"]
    shown = views(cells, control) if not cells.empty else [("", pd.Series(dtype=bool))]
    if len(shown) > 1:
        first = _where_choices_matter(cells, shown)
        shown = [shown[first], *shown[:first], *shown[first + 1 :]]
    across = [c for c in varying(cells) if c not in control] if not cells.empty else []
    titles = [esc(panel_title(cells[cells["model"] == m], across)) for m in models]
    fig = make_subplots(
        rows=max(1, len(models)),
        cols=1,
        subplot_titles=titles or None,
        vertical_spacing=0.5 / max(1, len(models)),
    )
    per_view = []
    layouts: list[dict[str, Any]] = []
    aggregated = False
    for v, (_, mask) in enumerate(shown):
        n = 0
        layout: dict[str, Any] = {}
        for row, model in enumerate(models, start=1):
            mine = cells[mask & (cells["model"] == model)]
            if mine.empty:
                continue
            if len(mine) > MAX_BARS:
                mine = aggregate(mine, [*(p for p, _, _ in PARTS), "bubbles_s"])
                aggregated = True
            else:  # named by what varies in this panel and view only
                mine = mine.assign(label=panel_labels(mine))
            n += _breakdown_panel(fig, mine, row, v, layout)
        per_view.append(n)
        layouts.append(layout)
    fig.update_xaxes(tickangle=-35, type="category")
    reps = int(cells.attrs.get("repetitions", 1))
    title = "Time per cell, fastest first (★: the fastest one can run; ↑ ms: clipped)" + (
        f" (each bar the mean of its {reps} repetitions)" if reps > 1 else ""
    )
    if aggregated:
        title += f"; panels of over {MAX_BARS} cells show means per strategy (aggregates)"
    fig.update_layout(
        barmode="stack",
        title={"text": title, "y": 1.0, "yanchor": "top", "pad": {"t": 10}},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        height=max(1, len(models)) * 520 + 160,
        margin={"b": 40, "t": 140},
    )
    _dropdown(fig, [t for t, _ in shown], per_view, "cluster and bandwidth", layouts)
    return fig


SHAPE = ("machines", "gpus_per_machine", "gpus")


def _lines(panel: pd.DataFrame, x: str, skip: tuple[str, ...]) -> list[tuple[str, pd.DataFrame]]:
    """A panel's cells as lines over `x`: cells that agree on every varying column but
    `x` and `skip` form one line, named by the strategy and those columns; above
    `MAX_LINES` lines, one line per strategy and compressor of means (named so)."""
    cols = [c for c in varying(panel) if c not in (*skip, *COMPANIONS, x, "model")]
    if "strategy" not in cols:
        cols = ["strategy", *cols]

    def keyed(cols: list[str]) -> pd.DataFrame:
        return panel.assign(_key=[cell_label(r, cols) for _, r in panel.iterrows()])

    lines = keyed(cols)
    crowded = set(lines.loc[lines.duplicated(["_key", x]), "_key"])
    if crowded:  # lines with two cells at one point: name their cells apart
        more = [*cols, *(c for c in varying(panel) if c in COMPANIONS)]
        again = keyed(more)["_key"]
        lines["_key"] = lines["_key"].where(~lines["_key"].isin(crowded), again)
    if lines["_key"].nunique() <= MAX_LINES:
        return [(k, g.sort_values(x)) for k, g in lines.groupby("_key", sort=True)]
    by = ["strategy", "compressor"]
    if len(panel.drop_duplicates(by)) > MAX_LINES:
        by = ["strategy"]
    out = []
    for key, g in panel.groupby(by, sort=True, dropna=False):
        means = g.groupby(x, sort=True).mean(numeric_only=True).reset_index()
        most = int(g.groupby(x).size().max())
        name = " · ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        out.append((name + (f" (mean of up to {most} cells a point)" if most > 1 else ""), means))
    return out


MAX_LINES = 40
# Columns that usually move with the cluster's size (a parameter server per machine):
# left out of a line's name unless two cells would otherwise share a point.
COMPANIONS = ("cpu_servers", "server_gbps")


def scaling_figure(df: pd.DataFrame) -> go.Figure:
    """Throughput and scaling factor against the number of GPUs, one line per strategy
    (and whatever else varies), linear scaling drawn dashed; one row per model, a
    dropdown for the bandwidth when it varies. Cells on one machine count too."""
    from plotly.subplots import make_subplots

    cells = per_cell(df)
    models = list(dict.fromkeys(cells["model"])) if not cells.empty else []
    shown = views(cells, ["inter_gbps"]) if not cells.empty else [("", pd.Series(dtype=bool))]
    titles = [t for m in models for t in (f"{esc(m)}: throughput", f"{esc(m)}: scaling factor")]
    fig = make_subplots(
        rows=max(1, len(models)),
        cols=2,
        subplot_titles=titles or None,
        vertical_spacing=0.4 / max(1, len(models)),
    )
    per_view = []
    legend: set[tuple[int, str]] = set()  # one legend entry a line name and view
    colour = Colours()
    later: set[int] = set()  # traces past a panel's TOP_LINES: a legend click away
    for v, (_, mask) in enumerate(shown):
        n = 0
        for row, model in enumerate(models, start=1):
            mine = cells[mask & (cells["model"] == model)]
            if mine.empty:
                continue
            lines = _lines(mine, "gpus", ("machines",))
            # the lines of the highest throughput at the panel's most GPUs first
            lines.sort(key=lambda nl: -float(nl[1]["throughput"].iloc[-1]))
            for rank, (name, line) in enumerate(lines):
                for col, metric in ((1, "throughput"), (2, "scaling_factor")):
                    if rank >= TOP_LINES:
                        later.add(len(fig.data))
                    fig.add_scatter(
                        x=line["gpus"].tolist(),
                        y=line[metric].tolist(),
                        name=esc(name),
                        mode="lines+markers",
                        line={"color": colour(name), "dash": colour.dash(name)},
                        legendgroup=name,
                        showlegend=col == 1 and (v, name) not in legend,
                        visible=v == 0,
                        row=row,
                        col=col,
                        hovertemplate="%{x} GPUs: %{y:.4g}<extra>" + esc(name) + "</extra>",
                    )
                    n += 1
                legend.add((v, name))
            gpus = sorted(set(mine["gpus"]))
            single = (mine["throughput"] / (mine["gpus"] * mine["scaling_factor"])).dropna()
            linear = {
                "name": "linear scaling", "mode": "lines", "showlegend": False,
                "line": {"dash": "dash", "color": "#888"}, "visible": v == 0, "row": row,
            }  # fmt: skip
            for base in sorted({round(b, 9) for b in single})[:3]:
                fig.add_scatter(
                    x=gpus, y=[base * g for g in gpus], col=1,
                    hovertemplate="linear: %{y:.4g}<extra></extra>", **linear,
                )  # fmt: skip
                n += 1
            fig.add_scatter(x=gpus, y=[1.0] * len(gpus), col=2, hoverinfo="skip", **linear)
            n += 1
            unit = str(mine["sample_unit"].iloc[0]) if "sample_unit" in mine else "samples"
            fig.update_yaxes(title_text=f"{esc(unit)} / s", row=row, col=1)
            fig.update_yaxes(title_text="scaling factor", range=[0, 1.05], row=row, col=2)
            ticks = {"tickvals": gpus, "ticktext": [str(g) for g in gpus]}
            fig.update_xaxes(title_text="GPUs", type="log", row=row, **ticks)
        per_view.append(n)
    fig.update_layout(
        title="Scaling: throughput and scaling factor against GPUs (grey dashes: linear "
        f"scaling; the {TOP_LINES} fastest lines a panel shown, the rest in the legend)",
        height=max(1, len(models)) * 420 + 160,
        margin={"t": 140},
    )
    _dropdown(fig, [t for t, _ in shown], per_view, "bandwidth", legend_only=later)
    return fig


TOP_LINES = 5  # lines a scaling panel draws at first; the others a legend click away


class Colours:
    """Line colours by name, given out in first-seen order, so a line keeps its colour
    across a figure's panels and views and no two of its first 60 lines share one."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        return self.given.setdefault(name, PALETTE[len(self.given) % len(PALETTE)])

    def dash(self, name: str) -> str:
        """A line style for `name` beside its colour: the first ten lines solid, the next
        ten dashed, then dotted, dash-dotted: lines of like colours differ in style."""
        self(name)
        k = list(self.given).index(name)
        return DASHES[(k // 10) % len(DASHES)] if k >= 10 else "solid"


DASHES = ("solid", "dash", "dot", "dashdot")
COLOURS = (
    "#4C78A8", "#F58518", "#E45756", "#72B7B2", "#54A24B", "#EECA3B", "#B279A2",
    "#FF9DA6", "#9D755D", "#BAB0AC", "#1F77B4", "#2CA02C", "#D62728", "#9467BD",
    "#8C564B", "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF", "#393B79",
)  # fmt: skip


def bandwidth_figure(df: pd.DataFrame) -> go.Figure:
    """Throughput against the inter-machine bandwidth (log axis), one line per strategy
    (and whatever else varies); one panel per model, a dropdown for the cluster. Cells on
    one machine, which no inter-machine link slows, are left out."""
    cells = per_cell(df)
    if not cells.empty:
        cells = cells[cells["machines"] > 1].reset_index(drop=True)
    from plotly.subplots import make_subplots

    models = list(dict.fromkeys(cells["model"])) if not cells.empty else []
    shown = views(cells, list(SHAPE)) if not cells.empty else [("", pd.Series(dtype=bool))]
    fig = make_subplots(
        rows=max(1, len(models)),
        cols=1,
        subplot_titles=[esc(m) for m in models] or None,
        vertical_spacing=0.4 / max(1, len(models)),
    )
    per_view = []
    legend: set[tuple[int, str]] = set()
    colour = Colours()
    for v, (_, mask) in enumerate(shown):
        n = 0
        for row, model in enumerate(models, start=1):
            mine = cells[mask & (cells["model"] == model)]
            if mine.empty:
                continue
            for name, line in _lines(mine, "inter_gbps", SHAPE):
                fig.add_scatter(
                    x=line["inter_gbps"].tolist(),
                    y=line["throughput"].tolist(),
                    name=esc(name),
                    mode="lines+markers",
                    line={"color": colour(name)},
                    legendgroup=name,
                    showlegend=(v, name) not in legend,
                    visible=v == 0,
                    row=row,
                    col=1,
                    hovertemplate="%{x} Gbps: %{y:.4g}<extra>" + esc(name) + "</extra>",
                )
                n += 1
                legend.add((v, name))
            bws = sorted(set(mine["inter_gbps"]))
            fig.update_xaxes(tickvals=bws, ticktext=[number_text(b) for b in bws], row=row, col=1)
            fig.update_xaxes(title_text="inter-machine Gbps", type="log", row=row, col=1)
            unit = str(mine["sample_unit"].iloc[0]) if "sample_unit" in mine else "samples"
            fig.update_yaxes(title_text=f"{esc(unit)} / s", row=row, col=1)
        per_view.append(n)
    fig.update_layout(
        title="Bandwidth sweep: throughput against inter-machine bandwidth",
        height=max(1, len(models)) * 420 + 160,
        margin={"t": 140},
    )
    _dropdown(fig, [t for t, _ in shown], per_view, "cluster")
    return fig


PALETTE = (*COLOURS, "#E6550D", "#31A354", "#756BB1", "#636363", "#3182BD", "#FD8D3C",
           "#74C476", "#9E9AC8", "#6BAED6", "#FDAE6B", "#A1D99B", "#BCBDDC", "#843C39",
           "#8CA252", "#BD9E39", "#AD494A", "#A55194", "#637939", "#7B4173", "#5254A3")  # fmt: skip


# Columns a strategy's cell shares with the fp32 cell it is compared with.
_SPEEDUP_SKIP = ("strategy", "compressor", "compressor_kind", "compressor_params", "cpu_servers",
                 "server_gbps", "summation_gbs", "constraints", "compressor_costs")  # fmt: skip


def speedup_table(df: pd.DataFrame) -> pd.DataFrame:
    """Each compressor's best strategy against the best baseline without gradient
    compression on the same workload and hardware (`headline.BASELINES`: fp32,
    fp32-2level, PS and BytePS with their servers): rows with the compressor, the
    scenario's config, `speedup` (the baseline's iteration time ÷ the best one's), the
    best `strategy`, how many cells it was the best of, and the `baseline` named."""
    from gcbench.report.choices import BASELINES, choice_label, runnable

    cells = per_cell(df)
    columns = ["compressor", "speedup", "best", "of", "baseline", "baseline_cell_id", "model",
               "gpus"]  # fmt: skip
    if cells.empty:
        return pd.DataFrame(columns=columns)
    keys = [c for c in CONFIG_COLUMNS if c in cells.columns and c not in _SPEEDUP_SKIP]
    keys = [c for c in keys if c not in DERIVED or c == "gpus"]
    plain = cells["strategy"].isin(BASELINES) & (cells["compressor_kind"] == "none")
    can_run = pd.Series([runnable(x) for x in cells["strategy"]], index=cells.index)
    others = cells[~plain & (cells["compressor_kind"] != "none") & can_run]
    bases = cells[plain]
    if others.empty or bases.empty:
        return pd.DataFrame(columns=columns)
    base: dict[str, tuple[float, str, str]] = {}
    for k, row in zip(row_keys(bases, keys), bases.to_dict("records"), strict=True):
        if k not in base or (row["iteration_s"], row["cell_id"]) < base[k][:2]:  # (as
            # the headline: equal times go by cell id)
            base[k] = (row["iteration_s"], row["cell_id"], choice_label(row))
    rows = []
    o = others.assign(_key=row_keys(others, keys))
    for (comp, k), g in o.groupby(["compressor", "_key"], sort=True):
        if k not in base:
            continue
        best = g.loc[g["iteration_s"].idxmin()]
        t, cid, name = base[k]
        rows.append({"compressor": comp, "speedup": t / best["iteration_s"],
                     "best": best["strategy"], "of": len(g), "baseline": name,
                     "baseline_cell_id": cid,
                     **dict(zip(keys, g.iloc[0][keys], strict=True))})  # fmt: skip
    return pd.DataFrame(rows)


def speedup_figure(df: pd.DataFrame) -> go.Figure:
    """Speed-up over the best baseline without compression, model × GPUs, one panel per
    compressor: each square is the best strategy with that compressor on one workload
    and hardware (the baseline's iteration time ÷ its), the strategy written in the
    square, the baseline in its hover; a dropdown for what else varies (bandwidth,
    cluster shape)."""
    from plotly.subplots import make_subplots

    table = speedup_table(df)
    comps = sorted(set(table["compressor"])) if not table.empty else []
    ncols = min(3, max(1, len(comps)))
    nrows = max(1, math.ceil(len(comps) / ncols))
    fig = make_subplots(
        rows=nrows, cols=ncols, subplot_titles=[esc(c) for c in comps] or None,
        shared_yaxes=True, horizontal_spacing=0.04, vertical_spacing=0.3 / nrows,
    )  # fmt: skip
    rest = [c for c in varying(table) if c not in ("model", "gpus", "compressor", "machines")]
    rest = [c for c in rest if c in CONFIG_COLUMNS and c not in DERIVED]
    # A column that follows from the model (its batch size, its sequence length) is no
    # setting to choose: the rows name the models.
    rest = [c for c in rest if table.groupby("model")[c].nunique(dropna=False).max() > 1]
    shown = views(table, rest) if not table.empty else [("", pd.Series(dtype=bool))]
    per_view = []
    top = float(table["speedup"].max()) if not table.empty else 2.0
    models = list(dict.fromkeys(table["model"])) if not table.empty else []
    gpus = sorted(set(table["gpus"])) if not table.empty else []
    for v, (_, mask) in enumerate(shown):
        n = 0
        for k, comp in enumerate(comps):
            mine = table[mask & (table["compressor"] == comp)]
            z: list[list[float | None]] = [[None] * len(gpus) for _ in models]
            best = [[""] * len(gpus) for _ in models]
            names = [[""] * len(gpus) for _ in models]
            for r in mine.to_dict("records"):
                i, j = models.index(r["model"]), gpus.index(r["gpus"])
                z[i][j] = r["speedup"]
                names[i][j] = esc(r["best"])
                best[i][j] = f"{esc(r['best'])} (best of {r['of']}), over {esc(r['baseline'])}"
            fig.add_heatmap(
                z=z,
                x=[str(g) for g in gpus],
                y=[esc(m) for m in models],
                customdata=best,
                text=names,
                texttemplate="%{z:.2f}×<br>%{text}",
                zmin=0,
                zmax=max(2.0, top),
                zmid=1.0,
                colorscale="RdBu",
                showscale=k == 0,
                colorbar={"title": {"text": "speed-up"}},
                visible=v == 0,
                row=k // ncols + 1,
                col=k % ncols + 1,
                hovertemplate="%{y}, %{x} GPUs: %{z:.3f}× with %{customdata}<extra></extra>",
            )
            n += 1
        per_view.append(n)
    fig.update_xaxes(title_text="GPUs", type="category")
    fig.update_layout(
        title="Speed-up over the best strategy without compression (fp32, fp32-2level, "
        "PS, BytePS): the best strategy per compressor, upper bounds aside (>1: faster)",
        height=160 + nrows * (80 + 40 * max(1, len(models))),
        margin={"t": 140},
    )
    _dropdown(fig, [t for t, _ in shown], per_view, "setting")
    return fig


# The two per-cell figures below are drawn for every cell of a run (the cell page), so
# they are plain plotly figure dicts built without plotly's validation (a test checks
# that `go.Figure` accepts them): validating 10,000 of them would take minutes.


def plan_map_figure(plan: dict[str, Any]) -> dict[str, Any]:
    """One planner cell's plan: each tensor at its position in gradient order (0 is the
    first gradient the backward pass produces, nearest the output) and its size, coloured
    by the option it is communicated with."""
    tensors = plan.get("tensors") or []
    data = []
    options = list(dict.fromkeys(str(t.get("option")) for t in tensors))
    for i, option in enumerate(options):
        mine = [(k, t) for k, t in enumerate(tensors) if str(t.get("option")) == option]
        data.append({
            "type": "scatter",
            "x": [k for k, _ in mine],
            "y": [t.get("numel", 0) for _, t in mine],
            "mode": "markers",
            "name": esc(option),
            "marker": {"color": COLOURS[i % len(COLOURS)], "size": 7},
            "text": [esc(t.get("name", "")) for _, t in mine],
            "hovertemplate": "%{text}<br>%{y:,} elements<extra>" + esc(option) + "</extra>",
        })  # fmt: skip
    predicted = 1e3 * float(plan.get("predicted_iteration_s") or 0)
    title = f"Plan of {plan.get('strategy', '?')}: option per tensor (predicted {predicted:.3f} ms)"
    layout = {
        "title": {"text": esc(title)},
        "xaxis": {"title": {"text": "tensor, in gradient order (0: nearest the output)"}},
        "yaxis": {"title": {"text": "elements"}, "type": "log"},
        "legend": {"title": {"text": "option"}},
    }
    return {"data": data, "layout": layout}


KIND_COLOURS = {
    "forward": "#4C78A8",
    "backward": "#72B7B2",
    "update": "#9D755D",
    "compress": "#F58518",
    "decompress": "#EECA3B",
    "comm": "#E45756",
    "copy": "#B279A2",
}


def timeline_figure(spans: list[dict[str, Any]], worker: int = 0) -> dict[str, Any]:
    """A Gantt chart of one iteration of one worker (by default GPU 0): a row per stream,
    a bar per span, coloured by what it does (compute, (de)compression, communication)."""
    mine = [s for s in spans if s.get("worker", 0) == worker]
    streams = list(dict.fromkeys(str(s["stream"]) for s in mine))
    data = []
    for kind in dict.fromkeys(str(s.get("kind", "")) for s in mine):
        part = [s for s in mine if str(s.get("kind", "")) == kind]
        data.append({
            "type": "bar",
            "orientation": "h",
            "base": [round(s["start_s"] * 1e3, 6) for s in part],  # ms, to the ns
            "x": [round(s["dur_s"] * 1e3, 6) for s in part],
            "y": [esc(s["stream"]) for s in part],
            "name": esc(kind),
            "marker": {"color": KIND_COLOURS.get(kind, "#BAB0AC")},
            "text": [esc(s.get("name", "")) for s in part],
            "customdata": [s.get("bytes", 0) for s in part],
            "hovertemplate": "%{text}<br>%{base:.3f} ms + %{x:.3f} ms<br>%{customdata:,} "
            "bytes<extra>" + esc(kind) + "</extra>",
            "textposition": "none",
        })  # fmt: skip
    layout = {
        "title": {"text": f"One iteration of GPU {worker}, per stream"},
        "barmode": "overlay",
        "xaxis": {"title": {"text": "ms"}},
        "yaxis": {"categoryorder": "array", "categoryarray": [esc(s) for s in streams][::-1]},
        "height": 200 + 40 * max(1, len(streams)),
    }
    return {"data": data, "layout": layout}


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
    cells = per_cell(df)
    if cells.empty or "upper-bound" not in set(cells["strategy"]):
        return pd.DataFrame(columns=columns)
    # columns of the schema this data has (results written before a column was added lack it)
    keys = [c for c in CONFIG_COLUMNS if c not in _BOUND_SKIP and c not in DERIVED
            and c in cells.columns]  # fmt: skip
    cells = cells.assign(_key=row_keys(cells, keys))
    bound = cells["strategy"] == "upper-bound"
    same: dict[str, list[dict[str, Any]]] = {}
    for r in cells[~bound].to_dict("records"):
        same.setdefault(r["_key"], []).append(r)
    no_grid_compressor = {"none", *strategies.own_kinds()}
    rows = []
    for b in cells[bound].to_dict("records"):
        for r in same.get(b["_key"], []):
            if r["compressor_kind"] in no_grid_compressor or r["compressor"] == b["compressor"]:
                rows.append((r["strategy"], r["iteration_s"] / b["iteration_s"], b["cell_id"],
                             r["cell_id"]))  # fmt: skip
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
                name=esc(f"{strategy} ({n} cells)"),
            )
        )
    fig.update_layout(
        title="Iteration time ÷ upper-bound's on the same cell (CDF over cells; an aggregate)",
        xaxis_title="iteration time / upper-bound",
        yaxis_title="fraction of cells",
        yaxis_range=[0, 1],
    )
    return fig
