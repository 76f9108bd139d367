"""What one Ray task does for one cell: run its backend, return plain rows and spans.

No ray import here, so a cell can be executed (and tested) in-process.
"""

from __future__ import annotations

from gcbench.config.models import Cell
from gcbench.runner.backends import CellOutput, backend_for

__all__ = ["CellOutput", "execute_cell"]


def execute_cell(cell: Cell, repetitions: int) -> CellOutput:
    """Metric rows (one per repetition), the trace spans of the first repetition, and the
    plan of a planner strategy (else None), from the cell's backend (`runner.backends`)."""
    return backend_for(cell).run(cell, repetitions)
