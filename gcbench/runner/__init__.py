"""The Ray driver: expand a suite, run its cells as Ray tasks, store results, resume."""

from gcbench.runner.cell import execute_cell
from gcbench.runner.run import Progress, RunSummary, run_suite

__all__ = ["Progress", "RunSummary", "execute_cell", "run_suite"]
