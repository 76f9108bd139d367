"""Run a suite's cells as Ray tasks with bounded concurrency; the driver alone writes.

Tasks return plain rows; each finished cell is written at once (atomically) by
`RunStore`, so an interrupted run loses at most the cells in flight, and a rerun
continues with the cells that have no file yet (and those that failed, and those whose
file was damaged). One run at a time writes a suite's results (`SuiteLock`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gcbench
from gcbench.config import Cell, Suite, expand, matches
from gcbench.errors import ConfigError, RunFailed
from gcbench.files import check_writable
from gcbench.results.schema import record
from gcbench.results.store import RunStore, SuiteLock, Unreadable, read_cell
from gcbench.runner.backends import Backend, backend_for
from gcbench.runner.cell import CellOutput, execute_cell

CellFn = Callable[[Cell, int], CellOutput]


@dataclass
class Progress:
    total: int  # cells of this session (the suite's, or those --only keeps), earlier ones too
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
    total: int  # cells this session was asked for: the suite's, or those --only keeps
    ok: int  # ... that ran now and succeeded
    failed: int  # ... that ran now and failed
    skipped: int  # ... finished ok earlier
    resumed: bool
    failures: list[str] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)  # unreadable cell files, one line each
    grid: int = 0  # cells of the run's grid (the whole suite, whatever --only kept)
    pending: int = 0  # ... not run yet (or failed to be read and set aside, not rerun)
    status: str = ""  # the manifest's status after this session
    cells: dict[str, int] = field(default_factory=dict)  # the manifest's counts: the grid's


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _task(cell_json: str, repetitions: int, cell_fn: CellFn) -> dict[str, Any]:
    """Body of the Ray task for one cell (runs in a Ray worker process)."""
    import ray

    started = time.time()
    cell = Cell.model_validate_json(cell_json)
    rows, spans, plan = cell_fn(cell, repetitions)
    return {
        "rows": rows,
        "spans": spans,
        "plan": plan,
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


def _scan(
    store: RunStore, ids: Iterable[str], now: set[str]
) -> tuple[dict[str, str], list[str]]:
    """The status (`ok` or `failed`) of each of `ids` that has a cell file, and one line
    per file that could not be read back as written: those are set aside (renamed) so
    that their cells run again (in this session if in `now`). Rows of another results
    format are a ConfigError."""
    status: dict[str, str] = {}
    set_aside: list[str] = []
    checked = False
    for cid in sorted(ids):
        path = store.cell_path(cid)
        try:
            table = read_cell(path)
        except Unreadable as e:
            if not checked:  # renaming needs a writable run folder
                check_writable(store.cells_dir, "--results")
                checked = True
            moved = store.set_aside(path)
            when = "now" if cid in now else "with the next run that includes it"
            set_aside.append(f"{e}: set aside as {moved.name}; the cell runs again {when}")
            continue
        ok = "status" in table.column_names and "ok" in table.column("status").to_pylist()
        status[cid] = "ok" if ok else "failed"
    return status, set_aside


def _counts(grid: list[str], status: dict[str, str]) -> dict[str, int]:
    ok = sum(status.get(c) == "ok" for c in grid)
    failed = sum(status.get(c) == "failed" for c in grid)
    return {"total": len(grid), "ok": ok, "failed": failed, "pending": len(grid) - ok - failed}


def _status(counts: dict[str, int]) -> str:
    """A run's status once a session ends: `incomplete` while cells of its grid have not
    run (an --only session), else `failed` if some failed, else `finished`."""
    if counts["pending"]:
        return "incomplete"
    return "failed" if counts["failed"] else "finished"


def _make_folder(folder: Path) -> list[Path]:
    """Create `folder` and its missing parents (after checking that they can be written);
    returns the folders made, outermost first, so that a run that fails to start can
    remove them again."""
    try:
        if folder.is_dir():
            return []
    except OSError:  # a name too long, say: check_writable says which
        pass
    check_writable(folder, "--results")
    made = []
    for parent in reversed([folder, *folder.parents]):
        if not parent.exists():
            try:
                parent.mkdir()
            except FileExistsError:  # another run made it meanwhile: it is not ours
                continue
            made.append(parent)
    return made


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
    wait: bool = False,
    on_wait: Callable[[str], None] | None = None,
    grid: list[Cell] | None = None,
    on_cluster: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run every cell of `suite` (or those `only` keeps) not finished yet; returns counts
    and the run folder.

    The suite's results folder is locked for the whole session (`SuiteLock`): a second
    run on it is a ConfigError naming the holder, or with `wait` waits for it. The run's
    manifest describes the whole suite, whatever `only` keeps: its `grid` (every cell id
    of the suite: what `load_results` and the report show), counts and status. A cell
    file that cannot be read is set aside and the cell runs again (`RunSummary.set_aside`).
    A run with nothing left to do writes nothing (the manifest only if it changed) and
    starts no Ray; otherwise the results folder is checked to be writable before Ray
    starts.

    Starts a local Ray instance on loopback unless this process is connected already or
    an address is given (never joining another cluster on the host); `on_cluster` gets
    one line saying which cluster the run uses. At most
    `concurrency` cells (default: twice the cluster's CPUs) are handed to Ray at once.
    A cell that raises becomes rows with `status=failed`; the run goes on. Ctrl-C
    cancels the cells in flight and re-raises KeyboardInterrupt once the manifest says
    `interrupted`.

    `grid`: the suite's cells when the caller has expanded them already (`expand(suite)`,
    every cell, no `only` filter), so that a huge grid is expanded once.
    """
    grid = expand(suite) if grid is None else grid
    filters = [dict(f) for f in only]
    selected = [c for c in grid if all(matches(c.flat(), f) for f in filters)]
    suite_dir = Path(results) / suite.name
    made = _make_folder(suite_dir)
    lock = SuiteLock(suite_dir, wait=wait, on_wait=on_wait)
    lock.acquire()  # if another run holds it, the folder is that run's: leave it
    try:
        return _run_locked(
            suite,
            Path(results),
            grid,
            selected,
            filters,
            fresh=fresh,
            address=address,
            concurrency=concurrency,
            num_cpus=num_cpus,
            progress=progress,
            cell_fn=cell_fn,
            suite_file=suite_file,
            on_cluster=on_cluster,
        )
    except BaseException:
        for folder in reversed(made):  # a run that did not start leaves nothing
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    finally:
        lock.release()


def _run_locked(
    suite: Suite,
    results: Path,
    grid: list[Cell],
    selected: list[Cell],
    filters: list[dict[str, Any]],
    *,
    fresh: bool,
    address: str | None,
    concurrency: int | None,
    num_cpus: int | None,
    progress: Callable[[Progress], None] | None,
    cell_fn: CellFn,
    suite_file: str | None,
    on_cluster: Callable[[str], None] | None = None,
) -> RunSummary:
    from gcbench.runner.local import cluster_info, connect, describe

    store, resumed = RunStore.open(results, suite.name, fresh=fresh)
    manifest = store.read_manifest() or {"started_at": _now(), "sessions": 0}
    grid_ids = [c.id for c in grid]
    status, set_aside = _scan(store, set(grid_ids) & store.finished(), {c.id for c in selected})
    todo = [c for c in selected if status.get(c.id) != "ok"]
    skipped = len(selected) - len(todo)
    state = Progress(total=len(selected), done=skipped, skipped=skipped)
    described = {
        "suite": suite.name,
        "description": suite.description,
        "suite_hash": suite.digest(),
        "suite_file": suite_file,
        "grid": grid_ids,
    }

    def summary(ok: int = 0, failures: list[str] | None = None) -> RunSummary:
        failures = failures or []
        return RunSummary(
            store.path,
            len(selected),
            ok,
            len(failures),
            skipped,
            resumed,
            failures,
            set_aside,
            len(grid_ids),
            _counts(grid_ids, status)["pending"],
            manifest.get("status", ""),
            _counts(grid_ids, status),
        )

    if not todo:  # nothing left to run: no Ray, and no write unless the run changed
        counts = _counts(grid_ids, status)
        done = {**described, "cells": counts, "status": _status(counts)}
        if any(manifest.get(k) != v for k, v in done.items()):
            check_writable(store.path, "--results")
            manifest.update(done)
            store.write_manifest(manifest)
        return summary()
    check_writable(store.path, "--results")  # before Ray starts
    started_here = connect(address, num_cpus=num_cpus)
    import ray

    backend = backend_for(suite)
    _refuse_unplaceable(backend, todo, started_here)  # before any cell
    info = cluster_info()
    if on_cluster:
        on_cluster(describe(info, started_here))
    manifest.update(
        described,
        gcbench_version=gcbench.__version__,
        versions={"python": platform.python_version(), "ray": ray.__version__},
        cluster=info,
        status="running",
        sessions=manifest.get("sessions", 0) + 1,
        cells=_counts(grid_ids, status),
        only=filters,
        last_session={"cells": len(todo)},
    )
    store.write_manifest(manifest)

    # Each task takes a CPU, so Ray runs at most the cluster's CPUs at once; by default
    # as many again wait queued, so that a worker finishing a cell starts the next at once
    # instead of waiting for the driver's round trip (cheap cells: issue #13's overhead).
    cpus = max(1, int(info["resources"].get("CPU", 1)))
    limit = concurrency or 2 * cpus
    if backend.one_at_a_time:  # each cell's actors use every core (and its memory)
        limit = 1
    # every cell of a suite runs on the suite's backend (cells take the suite's mode): its
    # task asks for the CPUs the backend says (an emulated cell's task only drives its
    # actors, which need the CPUs)
    task = ray.remote(num_cpus=backend.task_cpus, max_retries=0)(_task)
    pending = list(reversed(todo))
    in_flight: dict[Any, Cell] = {}
    failures: list[str] = []
    t0 = time.monotonic()
    if progress:
        progress(state)

    def submit(cell: Cell) -> Any:
        return task.remote(cell.model_dump_json(), suite.repetitions, cell_fn)

    def finish(ref: Any, cell: Cell) -> bool:
        return _finish_cell(ref, cell, suite, store, status, state, failures, backend)

    try:
        ok = _drive(submit, finish, pending, in_flight, limit, state, progress, t0)
    except ClusterLost as e:
        ok = state.done - state.skipped - state.failed
        counts = _counts(grid_ids, status)
        _interrupted(store, manifest, counts, in_flight, started_here)
        raise RunFailed(
            f"ray: the Ray instance died mid-run ({e}); the {ok} cells finished in this "
            f"session are saved, {counts['pending']} not run: run the same command "
            f"{'without --fresh' if fresh else 'again'} to continue"
        ) from None
    except OSError as e:
        kept = _interrupted(store, manifest, _counts(grid_ids, status), in_flight, started_here)
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise _no_space(e, store, state.done - state.skipped - state.failed, kept) from None
    except BaseException:
        _interrupted(store, manifest, _counts(grid_ids, status), in_flight, started_here)
        raise
    counts = _counts(grid_ids, status)
    manifest.update(
        status=_status(counts),
        finished_at=_now(),
        cells=counts,
        last_session={"cells": len(todo), "ok": ok, "failed": len(failures)},
    )
    store.write_manifest(manifest)
    if started_here:
        ray.shutdown()
    return summary(ok, failures)


def _drive(
    submit: Callable[[Cell], Any],
    finish: Callable[[Any, Cell], bool],
    pending: list[Cell],
    in_flight: dict[Any, Cell],
    limit: int,
    state: Progress,
    progress: Callable[[Progress], None] | None,
    t0: float,
) -> int:
    """Keep `limit` cells in flight (`submit` each; `in_flight` maps their refs), write
    each as it finishes (`finish`: whether it succeeded), until none is left; how many
    succeeded. A Ray that dies under it is `ClusterLost`."""
    import ray

    ok = 0
    while pending or in_flight:
        while pending and len(in_flight) < limit:
            cell = pending.pop()
            in_flight[submit(cell)] = cell
        try:
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
        except _lost_errors() as e:
            raise ClusterLost(f"{type(e).__name__}: {e}".splitlines()[0][:200]) from None
        for ref in ready:
            if finish(ref, in_flight.pop(ref)):
                ok += 1
        state.elapsed_s = time.monotonic() - t0
        if progress:
            progress(state)
    return ok


def _refuse_unplaceable(backend: Backend, todo: list[Cell], started_here: bool) -> None:
    """Refuse, before any cell runs, a cell whose placement can never fit the cluster's
    live nodes (an emulated cell's actors: `Backend.refuse_placement` raises); a Ray this
    run started is shut down first."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    try:
        backend.refuse_placement(todo, alive)
    except Exception:
        if started_here:
            ray.shutdown()
        raise


def _finish_cell(
    ref: Any,
    cell: Cell,
    suite: Suite,
    store: RunStore,
    status: dict[str, str],
    state: Progress,
    failures: list[str],
    backend: Backend,
) -> bool:
    """Write the finished task `ref`'s cell (its rows, or its error's) and count it in
    `status`, `state` and `failures`; whether it succeeded. A failed cell's leftovers on
    the cluster (a dead emulation's placement groups) are released (`Backend.release`)."""
    rows, spans, plan, error = _collect(ref, cell, suite.repetitions)
    if error is not None:
        backend.release(cell)
    rows = [_record(cell, r, store, suite, error) for r in rows]
    store.write_cell(cell.id, rows, spans, plan)
    status[cell.id] = "ok" if error is None else "failed"
    state.done += 1
    if error is not None:
        state.failed += 1
        failures.append(f"{_label(cell)}: {error}")
    state.last = _label(cell)
    return error is None


def _no_space(e: OSError, store: RunStore, ok: int, kept: bool) -> ConfigError:
    """A full disk (or quota) as one line: what could not be written, what is kept."""
    return ConfigError(
        [f"{store.path}: {e.strerror or 'no space left'} writing {e.filename or 'a cell'}; "
         f"the {ok} cells written this session are kept"
         f"{'' if kept else ' (the manifest could not be updated)'}: free some space and "
         "run again to continue"]
    )  # fmt: skip


def _interrupted(
    store: RunStore,
    manifest: dict[str, Any],
    counts: dict[str, int],
    in_flight: dict[Any, Cell],
    started_here: bool,
) -> bool:
    """Record an interrupted session (the manifest's status and cell counts, `counts`),
    remove its temporaries, and stop its work: shut down a Ray this run started, else
    cancel the tasks `in_flight` on someone else's cluster. Whether the manifest was
    written (a full disk may refuse it, even once the temporaries are gone)."""
    import ray

    # a write the interrupt caught between creating its temporary and the `try` that
    # removes it leaves that temporary behind (seen once in CI): this run holds the
    # suite's lock, so every temporary in its folders is its own; removed first, they
    # free room on a full disk for the manifest
    store.remove_temporaries()
    manifest.update(status="interrupted", interrupted_at=_now(), cells=counts)
    try:
        store.write_manifest(manifest)
        written = True
    except OSError:
        written = False
    if started_here:
        # Shutting down our own Ray ends its workers; cancelling first races with
        # tasks that are finishing (Ray 2.x aborts with "Tried to complete task that
        # was not pending").
        ray.shutdown()
    else:  # someone else's cluster: stop the work we gave it
        for ref in in_flight:
            ray.cancel(ref, force=True)
    return written


class ClusterLost(Exception):
    """The Ray instance a run uses died under it (its local raylet): no cell's failure."""


def _lost_errors() -> tuple[type[BaseException], ...]:
    import ray

    # (not RaySystemError: a Ctrl-C in `ray.wait` may surface as one, and is an interrupt)
    return (ray.exceptions.LocalRayletDiedError,)


def _collect(
    ref: Any, cell: Cell, repetitions: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None, str | None]:
    import ray

    try:
        out = ray.get(ref)
    except _lost_errors() as e:  # no cell's fault: the run stops, the cell stays to run again
        raise ClusterLost(f"{type(e).__name__}: {e}".splitlines()[0][:200]) from None
    except ray.exceptions.RayTaskError as e:
        cause = e.cause if getattr(e, "cause", None) is not None else e
        message = f"{type(cause).__name__}: {cause}".splitlines()[0]
        return [{"repetition": r} for r in range(repetitions)], [], None, message
    except ray.exceptions.RayError as e:  # worker died, task cancelled, ...
        message = f"{type(e).__name__}: {e}".splitlines()[0]
        return [{"repetition": r} for r in range(repetitions)], [], None, message
    rows = [{**row, **out["meta"]} for row in out["rows"]]
    return rows, out["spans"], out.get("plan"), None


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
