"""How the report names a cell's choice (`choice_label`: "BytePS with 8 servers") and which
choices are baselines without gradient compression (`BASELINES`) or bounds no one can run
(`runnable`), and what a scenario is. Neither pandas nor plotly: the one-cell commands
read it too."""

from __future__ import annotations

from typing import Any

from gcbench.results.schema import CONFIG_COLUMNS

# What a user chooses between within a scenario (and what follows from those choices);
# the rest of a cell's config is its scenario (a model on one cluster, network, device).
CHOICES = (
    "strategy", "compressor", "compressor_kind", "compressor_params", "fusion",
    "constraints", "cpu_servers", "summation_gbs", "server_gbps",
)  # fmt: skip
SCENARIO = tuple(c for c in CONFIG_COLUMNS if c not in CHOICES)
# Strategies that send every gradient uncompressed (with compressor `none`).
BASELINES = ("fp32", "fp32-2level", "ps", "byteps")
# Two times closer than this are a tie: gcbench's out-of-sample median error against the
# papers' published figures (`gcbench reproduce`, BENCHMARKS.md: 8.9%), rounded up.
TIE = 0.09
NAMES = {"fp32": "fp32", "fp32-2level": "fp32-2level", "ps": "PS", "byteps": "BytePS"}


def choice_label(row: dict[str, Any]) -> str:
    """A cell's choice as a sentence names it: `bytecomp with dgc-1pct`, `BytePS with 8
    servers`, `fp32`."""
    strategy = str(row["strategy"])
    text = NAMES.get(strategy, strategy)
    compressor = row.get("compressor")
    if compressor and compressor != "none" and row.get("compressor_kind") != strategy:
        text += f" with {compressor}"
    servers = plain(row.get("cpu_servers"))
    if isinstance(servers, (int, float)) and servers == servers and servers > 0:
        n = int(servers)
        text += f" {'and' if ' with ' in text else 'with'} {n} server{'s' * (n != 1)}"
    return text


def plain(value: Any) -> Any:
    """A pandas value as JSON takes it: numpy scalars as Python's, NaN as None."""
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and value != value else value


def runnable(strategy: Any) -> bool:
    """Whether a strategy is one a user can run (not a bound such as `upper-bound`); a
    name the registry no longer has counts as runnable."""
    from gcbench import strategies

    found = strategies.find(strategy) if isinstance(strategy, str) else None
    return found is None or found.runnable


