"""Timeline simulation of one data-parallel iteration (no ray, no plotly)."""

from gcbench.sim.costs import SimResult, simulate_cell
from gcbench.sim.trace import Span

__all__ = ["SimResult", "Span", "simulate_cell"]
