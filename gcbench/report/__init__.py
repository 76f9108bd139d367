"""Offline HTML reports from results (plotly figures as pure functions of DataFrames).

`write_report` is imported on first use: the headline's names (`report.headline`) are
read by the one-cell commands, which need neither pandas' report pages nor plotly."""

from typing import Any

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from gcbench.report.html import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
