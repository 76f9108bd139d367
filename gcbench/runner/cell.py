"""What one Ray task does for one cell: run the backend, return plain rows and spans.

No ray import here, so a cell can be executed (and tested) in-process.
"""

from __future__ import annotations

from typing import Any

from gcbench.config.models import Cell

CellOutput = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]


def execute_cell(cell: Cell, repetitions: int) -> CellOutput:
    """Metric rows (one per repetition), the trace spans of the first repetition, and the
    plan of a planner strategy (else None).

    The simulator is deterministic, so one simulation serves every repetition; so is an
    emulated cell's virtual clock (and its gradients are seeded), so one emulation does;
    on the wall clock each repetition is an iteration of its own (`cluster.emulate.emulated`).
    """
    from gcbench.backends.simulate import simulate_cell

    if cell.mode == "emulate":
        from gcbench.cluster.emulate import emulated

        runs, spans, plan = emulated(cell, repetitions)
        rows = [{**m, "repetition": rep} for rep, m in enumerate(runs)]
        return rows, [s.to_dict() for s in spans], plan
    result = simulate_cell(cell)
    rows = [{**result.metrics, "repetition": rep} for rep in range(repetitions)]
    return rows, [s.to_dict() for s in result.spans], result.plan
