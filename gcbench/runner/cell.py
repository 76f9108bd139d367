"""What one Ray task does for one cell: run the backend, return plain rows and spans.

No ray import here, so a cell can be executed (and tested) in-process.
"""

from __future__ import annotations

from typing import Any

from gcbench.config.models import Cell


def execute_cell(cell: Cell, repetitions: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Metric rows (one per repetition) and the trace spans of the first repetition.

    The simulator is deterministic, so one simulation serves every repetition.
    """
    from gcbench.sim import simulate_cell

    result = simulate_cell(cell)
    rows = [{**result.metrics, "repetition": rep} for rep in range(repetitions)]
    return rows, [s.to_dict() for s in result.spans]
