"""How a cell runs, chosen here and nowhere else: simulated (the timeline of `gcbench.sim`
under the cell's strategy, `backends.simulate`), emulated on Ray actors holding real
tensors (`cluster.emulate`, on the virtual or the wall clock), measured: the model
trained with DDP on Ray actors, the compressor a DDP hook (`cluster.measure`), or trained
on a dataset by the same workers, its loss and accuracy logged (`cluster.train`).

A backend says what a cell needs from Ray (the CPUs of its task; whether cells run one
at a time), refuses before anything starts a cell it cannot run, and runs one cell into
plain rows, spans and a plan (`CellOutput`). `backend_for` picks it from the cell's (or
the suite's) `emulated`, `measured_ddp` and `trained` (`config.models.Cell`, the one place that
reads `mode`).
"""

from __future__ import annotations

from typing import Any, Protocol

CellOutput = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]


class Backend(Protocol):
    name: str
    task_cpus: float  # the CPUs a cell's Ray task asks for
    one_at_a_time: bool  # a cell takes the whole cluster: cells run one after another

    def check(self, cell: Any) -> None:
        """Raise ConfigError (one line) for a cell this backend cannot run, before Ray
        starts."""

    def refuse_placement(self, cells: list[Any], nodes: list[dict[str, Any]]) -> None:
        """Raise ConfigError for a cell that can never be placed on the Ray cluster's
        live `nodes` (`ray.nodes()`), before any cell runs."""

    def run(self, cell: Any, repetitions: int) -> CellOutput:
        """Metric rows (one per repetition), the spans of the first, the plan of a
        planner strategy (else None). Ray must be connected for an emulated cell."""

    def release(self, cell: Any) -> None:
        """Free what a failed cell's task left on the Ray cluster (the driver calls it)."""


class Simulate:
    """The simulator is deterministic: one simulation serves every repetition."""

    name = "simulate"
    task_cpus = 1.0
    one_at_a_time = False

    def check(self, cell: Any) -> None:
        return None

    def refuse_placement(self, cells: list[Any], nodes: list[dict[str, Any]]) -> None:
        return None

    def release(self, cell: Any) -> None:
        return None

    def run(self, cell: Any, repetitions: int) -> CellOutput:
        from gcbench.backends.simulate import simulate_cell

        result = simulate_cell(cell)
        rows = [{**result.metrics, "repetition": rep} for rep in range(repetitions)]
        return rows, [s.to_dict() for s in result.spans], result.plan


class Emulate:
    """One Ray actor per GPU (and per summation server): the task only drives them, so it
    asks for no CPU, and each cell's actors take every core, so cells run one at a time.
    The virtual clock is deterministic (and the gradients seeded): one emulation serves
    every repetition; on the wall clock each repetition is an iteration of its own."""

    name = "emulate"
    task_cpus = 0.0
    one_at_a_time = True

    def check(self, cell: Any) -> None:
        from gcbench.cluster.emulate import check_cell

        check_cell(cell)

    def refuse_placement(self, cells: list[Any], nodes: list[dict[str, Any]]) -> None:
        from gcbench.cluster.emulate import refuse_placement

        for cell in cells:
            refuse_placement(cell, nodes)

    def release(self, cell: Any) -> None:
        from gcbench.cluster.emulate import remove_placement_groups

        remove_placement_groups(cell.id)  # a task that died could not remove them

    def run(self, cell: Any, repetitions: int) -> CellOutput:
        from gcbench.cluster.emulate import emulated

        runs, spans, plan = emulated(cell, repetitions)
        rows = [{**m, "repetition": rep} for rep, m in enumerate(runs)]
        return rows, [s.to_dict() for s in spans], plan


class Measure(Emulate):
    """DDP on one Ray actor per GPU (`cluster.measure`), placed as emulation places its
    workers; each repetition a timed iteration."""

    name = "measure"

    def check(self, cell: Any) -> None:
        from gcbench.cluster.measure import check_cell

        check_cell(cell)

    def refuse_placement(self, cells: list[Any], nodes: list[dict[str, Any]]) -> None:
        from gcbench.cluster.measure import refuse_placement

        for cell in cells:
            refuse_placement(cell, nodes)

    def run(self, cell: Any, repetitions: int) -> CellOutput:
        from gcbench.cluster.measure import measured

        rows = measured(cell, repetitions)
        return [{**m, "repetition": rep} for rep, m in enumerate(rows)], [], None


class Train(Measure):
    """Measure's DDP workers training on a dataset (`cluster.train`); each repetition a
    training run from its own seed."""

    name = "train"

    def check(self, cell: Any) -> None:
        from gcbench.cluster.train import check_train_cell

        check_train_cell(cell)

    def run(self, cell: Any, repetitions: int) -> CellOutput:
        from gcbench.cluster.train import trained

        rows = trained(cell, repetitions)
        return [{**m, "repetition": rep} for rep, m in enumerate(rows)], [], None


def backend_for(cell_or_suite: Any) -> Backend:
    """The backend that runs a cell (or every cell of a suite)."""
    if cell_or_suite.trained:
        return Train()
    if cell_or_suite.measured_ddp:
        return Measure()
    return Emulate() if cell_or_suite.emulated else Simulate()
