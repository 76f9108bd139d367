"""Offline HTML reports from results (plotly figures as pure functions of DataFrames)."""

from gcbench.report.html import write_report

__all__ = ["write_report"]
