"""Timeline simulation of one data-parallel iteration (no ray, no plotly)."""

from gcbench.sim.trace import Span
from gcbench.sim.wfbp import SimResult, simulate_cell

__all__ = ["SimResult", "Span", "simulate_cell"]
