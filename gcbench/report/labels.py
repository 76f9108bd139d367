"""A run's cells as the report names them: one row per cell (`per_cell`, the mean over its
repetitions), a label per cell naming every config column that varies within its panel
(`varying`; cells the columns cannot tell apart get their cell id's first digits), the
text of config values, and the report's views. pandas only: the figures (`figures`), the
pages (`html`) and the comparison (`compare`) share it.
"""

from __future__ import annotations

import html
import math
from pathlib import PurePath
from typing import Any

import pandas as pd

from gcbench.config.network_profile import NCCL_PROTOCOL_FIELDS
from gcbench.results.schema import CONFIG_COLUMNS

PARTS = (
    ("compute_s", "compute", "#4C78A8"),
    ("compress_exposed_s", "exposed compression", "#F58518"),
    ("comm_exposed_s", "exposed communication", "#E45756"),
)

# Metrics averaged over a cell's repetitions (the rest are the same in every one).
MEANS = (
    "iteration_s",
    "throughput",
    "scaling_factor",
    "compute_s",
    "compress_exposed_s",
    "comm_exposed_s",
    "bubbles_s",
    "wire_bytes",
    "final_metric",  # trained cells: over their seeds
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
    "precision",
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
    "cpu_gbs",
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
    "cpu_gbs": ("CPUs ", " GB/s"),
    "summation_gbs": ("summation ", " GB/s"),
    "seed": ("seed ", ""),
    "collectives": ("collectives as ", ""),
    "nccl_ll_bandwidth": ("LL bandwidth × ", ""),
    "nccl_ll128_bandwidth": ("LL128 bandwidth × ", ""),
    "compute_contention": ("contention ", ""),
    "compute_jitter": ("jitter ", ""),
    "compute_scale": ("compute × ", ""),
    "iteration_overhead_us": ("iteration + ", " µs"),
    "bucket_overhead_us": ("bucket + ", " µs"),
}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _same(value: Any) -> Any:
    """A value as compared when finding the columns that vary (every missing one alike,
    and an empty string too: a planner's "no constraints" is the others' none)."""
    return None if _missing(value) or value == "" else value


def row_keys(cells: pd.DataFrame, cols: list[str]) -> list[str]:
    """Each row's values of `cols` as one string, every missing value alike (`_same`):
    what matches cells across tables."""
    rows = cells[cols].to_numpy(dtype=object)
    return ["\x1f".join(repr(_same(v)) for v in row) for row in rows]


def varying(cells: pd.DataFrame) -> list[str]:
    """The config columns (derived ones aside) that take more than one value in `cells`,
    in label order."""
    out = []
    for col in ORDER:
        if col in cells.columns:
            values = set(cells[col].tolist())
            if len(values) > 1 and len({_same(v) for v in values}) > 1:
                out.append(col)
    return out


def number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def value_text(value: Any) -> str:
    """A config value as text: numbers short (`10`, `0.8`), a missing or empty one
    `default`."""
    return "default" if _missing(value) or value == "" else number_text(value)


def describe(col: str, value: Any, row: pd.Series | dict[str, Any] | None = None) -> str:
    """How one config value reads in a label or a title, e.g. `batch 32`, `10 Gbps`."""
    if col in ("machines", "gpus_per_machine") and row is not None:
        return f"{number_text(row['machines'])}×{number_text(row['gpus_per_machine'])}"
    if col == "cpu_servers":
        n = 0 if _missing(value) else value
        return "no CPU servers" if not n else f"+ {number_text(n)} CPU server{'s' * (n != 1)}"
    before, after = WORDS.get(col, ("", ""))
    if _missing(value):
        return f"{col} default"
    if col == "profile":
        value = PurePath(str(value)).name
    return f"{before}{number_text(value)}{after}"


def applies(col: str, row: pd.Series | dict[str, Any]) -> bool:
    """Whether `col` means something for `row`: NCCL's protocol corrections only where
    its collectives are NCCL's (a ring cell has no protocols to correct)."""
    return col not in NCCL_PROTOCOL_FIELDS or row.get("collectives") == "nccl"


def _parts(row: pd.Series | dict[str, Any], cols: list[str]) -> list[str]:
    parts = []
    for col in cols:
        if col == "gpus_per_machine" and "machines" in cols:
            continue  # one `M×G` part for both
        if not applies(col, row):
            continue
        parts.append(describe(col, row.get(col), row))
    return parts


def cell_label(row: pd.Series | dict[str, Any], cols: list[str] | None = None) -> str:
    """A cell's label: its strategy, then its value of each column in `cols` (by default
    the strategy, compressor, cluster, servers, inter bandwidth and fusion)."""
    if cols is None:
        cols = ["compressor", "machines", "gpus_per_machine", "cpu_servers", "inter_gbps"]
        cols += ["fusion"]
    return " · ".join([str(row["strategy"]), *_parts(row, [c for c in cols if c != "strategy"])])


def panel_labels(panel: pd.DataFrame) -> list[str]:
    """One distinct label per cell of a panel (a model): the strategy and every column
    that varies there; cells still alike get the first digits of their cell ids."""
    cols = [c for c in varying(panel) if c not in ("strategy", "model")]
    labels = [cell_label(row, cols) for row in panel.to_dict("records")]
    counts = pd.Series(labels).value_counts()
    return [
        f"{label} · #{cid[:8]}" if counts[label] > 1 else label
        for label, cid in zip(labels, panel["cell_id"], strict=True)
    ]


def per_cell(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over repetitions of each ok cell, labelled (`panel_labels`, per model), in a
    stable, readable order. Its `attrs` say so (`per_cell` of it, or of rows taken from
    it, returns it as it is: a page computes it once for all its figures) and hold the
    number of repetitions averaged."""
    if df.attrs.get("per_cell"):
        return df
    columns = ["cell_id", "label", *(p for p, _, _ in PARTS)]
    if df.empty:
        return pd.DataFrame(columns=columns)
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=[*df.columns, "label"])
    keys = ["cell_id"]
    firsts = ok.groupby(keys, sort=False).first()
    numeric = [c for c in MEANS if c in ok.columns]
    means = ok.groupby(keys, sort=False)[numeric].mean()
    out = firsts.drop(columns=means.columns).join(means).reset_index()
    order = ["model", *(c for c in varying(out) if c != "model"), "cell_id"]
    out = out.sort_values(order, kind="stable", na_position="first").reset_index(drop=True)
    out["label"] = ""
    for _, panel in out.groupby("model", sort=False, dropna=False):
        out.loc[panel.index, "label"] = panel_labels(panel)
    reps = int(df["repetition"].nunique()) if "repetition" in df.columns else 1
    out.attrs.update(per_cell=True, repetitions=reps)
    return out


def panel_title(panel: pd.DataFrame, across: list[str]) -> str:
    """A panel's title: its model, and the values shared by its cells of the columns
    in `across` (those that vary over the whole report)."""
    first = panel.iloc[0]
    own = set(varying(panel))
    shared = [c for c in across if c not in own and c != "model" and c != "strategy"]
    return " · ".join([str(first["model"]), *_parts(first, shared)])


def esc(text: Any) -> str:
    """Text for a plotly label, title or hover: plotly renders a subset of HTML in
    them, so user-controlled strings (suite names, labels, model names from profile
    files) are escaped and show as the characters they are."""
    return html.escape(str(text), quote=False)


# Above this many cells in one panel (one model, one view), a figure draws one mark per
# strategy and compressor: the mean over the panel's cells, labelled an aggregate (a
# hundred bars are about as many as a page's width can label).
MAX_BARS = 100


def _view_text(row: pd.Series, cols: list[str]) -> str:
    return " · ".join(_parts(row, cols))


def views(cells: pd.DataFrame, cols: list[str]) -> list[tuple[str, pd.Series]]:
    """The report's controls: one view per combination of the columns in `cols` that
    vary (say, cluster size and bandwidth), as (title, mask over `cells`); a single
    view of everything when none varies."""
    moving = [c for c in cols if c in varying(cells)]
    if cells.empty or not moving:
        return [("", pd.Series(True, index=cells.index))]
    keys = cells[moving].astype(object).where(cells[moving].notna(), None)
    out = []
    for _, first in cells.drop_duplicates(moving).sort_values(moving).iterrows():
        mask = (keys == first[moving].astype(object).where(first[moving].notna(), None)).all(axis=1)
        out.append((_view_text(first, moving), mask))
    return out
