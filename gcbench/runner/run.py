"""Run a suite's cells as Ray tasks with bounded concurrency; the driver alone writes.

Tasks return plain rows; each finished cell is written at once (atomically) by
`RunStore`, so an interrupted run loses at most the cells in flight, and a rerun
continues with the cells that have no file yet (and those that failed).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gcbench
from gcbench.config import Cell, Suite, expand
from gcbench.results.schema import record
from gcbench.results.store import RunStore
from gcbench.runner.cell import execute_cell

CellFn = Callable[[Cell, int], tuple[list[dict[str, Any]], list[dict[str, Any]]]]


@dataclass
class Progress:
    total: int  # cells in this run, including those finished earlier
    done: int = 0  # finished, earlier or now, ok or failed
    failed: int = 0
    skipped: int = 0  # finished in an earlier session of this run
    elapsed_s: float = 0.0
    last: str | None = None  # label of the cell that just finished

    @property
    def eta_s(self) -> float | None:
        ran = self.done - self.skipped
        if ran <= 0:
            return None
        return self.elapsed_s / ran * (self.total - self.done)


@dataclass
class RunSummary:
    run_dir: Path
    total: int
    ok: int
    failed: int
    skipped: int
    resumed: bool
    failures: list[str] = field(default_factory=list)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _task(cell_json: str, repetitions: int, cell_fn: CellFn) -> dict[str, Any]:
    """Body of the Ray task for one cell (runs in a Ray worker process)."""
    import ray

    started = time.time()
    cell = Cell.model_validate_json(cell_json)
    rows, spans = cell_fn(cell, repetitions)
    return {
        "rows": rows,
        "spans": spans,
        "meta": {
            "run_started_at": started,
            "run_wall_s": time.time() - started,
            "run_pid": os.getpid(),
            "run_node": ray.get_runtime_context().get_node_id(),
        },
    }


def _label(cell: Cell) -> str:
    f = cell.flat()
    return (
        f"{f['model']} {f['strategy']} {f['compressor']} "
        f"{f['machines']}x{f['gpus_per_machine']} {f['inter_gbps']:g}Gbps"
    )


def _previously_failed(store: RunStore, ids: Iterable[str]) -> set[str]:
    import pyarrow.parquet as pq

    out = set()
    for cid in ids:
        status = pq.read_table(store.cells_dir / f"{cid}.parquet", columns=["status"]).column(0)
        if "ok" not in status.to_pylist():
            out.add(cid)
    return out


def run_suite(
    suite: Suite,
    results: Path | str = "results",
    *,
    fresh: bool = False,
    only: Iterable[Mapping[str, Any]] = (),
    address: str | None = None,
    concurrency: int | None = None,
    num_cpus: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    cell_fn: CellFn = execute_cell,
    suite_file: str | None = None,
) -> RunSummary:
    """Run every cell of `suite` not finished yet; returns counts and the run folder.

    Starts a local Ray instance unless one is running or an address is given. At most
    `concurrency` cells (default: the cluster's CPUs) run at once. A cell that raises
    becomes rows with `status=failed`; the run goes on. Ctrl-C cancels the cells in
    flight and re-raises KeyboardInterrupt once the manifest says `interrupted`.
    """
    from gcbench.runner.local import cluster_info, connect

    cells = expand(suite, only)
    store, resumed = RunStore.open(Path(results), suite.name, fresh=fresh)
    wanted = {c.id for c in cells}
    finished = store.finished() & wanted
    retry = _previously_failed(store, finished)
    todo = [c for c in cells if c.id not in finished or c.id in retry]
    state = Progress(total=len(cells), done=len(cells) - len(todo), skipped=len(cells) - len(todo))

    manifest = store.read_manifest() or {"started_at": _now(), "sessions": 0}
    if not todo:  # nothing left to run: no need to start Ray
        manifest.update(status="finished", cells={"total": len(cells), "failed": 0})
        store.write_manifest(manifest)
        return RunSummary(store.path, len(cells), 0, 0, state.skipped, resumed)
    started_here = connect(address, num_cpus=num_cpus)
    import ray

    info = cluster_info()
    manifest.update(
        suite=suite.name,
        suite_hash=suite.digest(),
        suite_file=suite_file,
        gcbench_version=gcbench.__version__,
        versions={"python": platform.python_version(), "ray": ray.__version__},
        cluster=info,
        status="running",
        sessions=manifest.get("sessions", 0) + 1,
        cells={"total": len(cells)},
    )
    store.write_manifest(manifest)

    limit = concurrency or max(1, int(info["resources"].get("CPU", 1)))
    remote = ray.remote(num_cpus=1, max_retries=0)(_task)
    pending = list(reversed(todo))
    in_flight: dict[Any, Cell] = {}
    failures: list[str] = []
    t0 = time.monotonic()
    ok = 0
    if progress:
        progress(state)
    try:
        while pending or in_flight:
            while pending and len(in_flight) < limit:
                cell = pending.pop()
                ref = remote.remote(cell.model_dump_json(), suite.repetitions, cell_fn)
                in_flight[ref] = cell
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
            for ref in ready:
                cell = in_flight.pop(ref)
                rows, spans, error = _collect(ref, cell, suite.repetitions)
                rows = [_record(cell, r, store, suite, error) for r in rows]
                store.write_cell(cell.id, rows, spans)
                state.done += 1
                if error is None:
                    ok += 1
                else:
                    state.failed += 1
                    failures.append(f"{_label(cell)}: {error}")
                state.last = _label(cell)
            state.elapsed_s = time.monotonic() - t0
            if progress:
                progress(state)
    except BaseException:
        manifest.update(status="interrupted", interrupted_at=_now())
        store.write_manifest(manifest)
        if started_here:
            # Shutting down our own Ray ends its workers; cancelling first races with
            # tasks that are finishing (Ray 2.x aborts with "Tried to complete task that
            # was not pending").
            ray.shutdown()
        else:  # someone else's cluster: stop the work we gave it
            for ref in in_flight:
                ray.cancel(ref, force=True)
        raise
    manifest.update(
        status="finished" if not failures else "failed",
        finished_at=_now(),
        cells={"total": len(cells), "failed": state.failed},
    )
    store.write_manifest(manifest)
    if started_here:
        ray.shutdown()
    return RunSummary(store.path, len(cells), ok, state.failed, state.skipped, resumed, failures)


def _collect(
    ref: Any, cell: Cell, repetitions: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    import ray

    try:
        out = ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = e.cause if getattr(e, "cause", None) is not None else e
        message = f"{type(cause).__name__}: {cause}".splitlines()[0]
        return [{"repetition": r} for r in range(repetitions)], [], message
    except ray.exceptions.RayError as e:  # worker died, task cancelled, ...
        message = f"{type(e).__name__}: {e}".splitlines()[0]
        return [{"repetition": r} for r in range(repetitions)], [], message
    rows = [{**row, **out["meta"]} for row in out["rows"]]
    return rows, out["spans"], None


def _record(
    cell: Cell, row: dict[str, Any], store: RunStore, suite: Suite, error: str | None
) -> dict[str, Any]:
    """A Record (`gcbench.results.schema`): the cell's config columns, status, metrics."""
    return record(
        suite=suite.name,
        cell_id=cell.id,
        config=cell.flat(),
        metrics=row,
        error=error,
        repetition=row["repetition"],
        gcbench_version=gcbench.__version__,
        run_id=store.run_id,
        meta=row,
    )
