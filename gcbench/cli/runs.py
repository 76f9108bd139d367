"""Suite commands: `run` (a suite's cells on Ray, then its report), `validate`, `schema`
and `report` (a run's offline HTML pages, or a comparison of two runs)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli.common import (
    JSON_HELP,
    MAX_CELLS,
    app,
    by_ctrl_c,
    dumps,
    errors,
    print_error,
    state,
)
from gcbench.cli.progress import iteration_bar, progress_bar
from gcbench.errors import ConfigError, Terminated


@app.command()
def run(
    suite: Annotated[Path, typer.Argument(help="Suite file, e.g. suites/smoke.yaml.")],
    results: Annotated[
        Path, typer.Option(help="Where results go: <results>/<suite>/<run-id>/.")
    ] = Path("results"),
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start a new run instead of continuing the latest one.")
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="Run only cells with key=value (repeatable; the same key twice means "
            "either value), e.g. --only model=resnet50.",
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster address (default: RAY_ADDRESS, else a local Ray on 127.0.0.1)."
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Cells handed to Ray at once (default: twice the cluster's CPUs, so the "
            "next cell is queued when one ends; Ray runs a CPU's worth at a time). An "
            "emulate suite runs one cell at a time whatever this says: each cell's "
            "actors take every core.",
        ),
    ] = None,
    num_cpus: Annotated[
        int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all).")
    ] = None,
    reports: Annotated[
        Path, typer.Option(help="Where the HTML report goes: <reports>/<suite>/index.html.")
    ] = Path("reports"),
    report: Annotated[
        bool, typer.Option(help="Write the HTML report when the run finishes.")
    ] = True,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="If another run is writing this suite's results, wait for it to end "
            "(default: say which process and exit 2).",
        ),
    ] = False,
    max_cells: Annotated[int, MAX_CELLS] = 1_000_000,
) -> None:
    """Run a suite's cells on Ray (continuing its latest run), then write its report.

    Finished cells are written one by one to <results>/<suite>/<run-id>/cells/; run the
    same command again after a crash or Ctrl-C and only the missing (or failed) cells run
    (and those whose file was damaged: it is set aside). One run at a time writes a
    suite's results. The run's manifest and report describe the whole suite, whatever
    --only keeps. A run with nothing left to do writes no results (the report again,
    unless --no-report). Exit code: 0 all cells ok, 1 some cells failed, 2 bad input,
    130 interrupted (Ctrl-C), 143 terminated (SIGTERM: timeout, SLURM, docker stop).
    """
    from gcbench.config import load_suite, parse_only

    with errors():
        s = load_suite(suite)
        filters = parse_only(only or [])
        found = _expand(suite, s, filters, max_cells)
        if report:
            from gcbench.files import check_writable

            check_writable(reports / s.name, "--reports")
    from gcbench.runner import run_suite

    summary = None
    with errors(), contextlib.ExitStack() as stack:
        bar: list[Any] = []

        def on_progress(p: Any) -> None:
            # the bar starts with the first cell, so that a run refused before (a lock,
            # a folder, an address) prints its error line alone
            if not bar:
                bar.append(stack.enter_context(progress_bar(s.name)))
            bar[0](p)

        try:
            summary = run_suite(
                s,
                results,
                fresh=fresh,
                only=filters,
                address=address,
                concurrency=concurrency,
                num_cpus=num_cpus,
                progress=on_progress,
                suite_file=str(suite),
                grid=None if filters else found.cells,  # expanded once, not twice
                wait=wait,
                on_wait=lambda line: typer.echo(line, err=True),
                on_cluster=lambda line: typer.echo(line, err=True),
            )
        except BaseException as e:  # Ctrl-C, possibly wrapped by a library it interrupted
            if not by_ctrl_c(e) or state["debug"]:
                raise
            term = by_ctrl_c(e, Terminated)  # SIGTERM: `timeout`, SLURM, `docker stop`
            again = ("the same command without --fresh" if fresh
                     else "the same command again")  # fmt: skip
            typer.echo(
                f"\n{'terminated' if term else 'interrupted'}: finished cells are saved; run "
                f"{again} to continue.",
                err=True,
            )
            raise typer.Exit(143 if term else 130) from None
    assert summary is not None
    typer.echo(
        f"{summary.total} cells: {summary.ok} ok now, {summary.failed} failed, "
        f"{summary.skipped} finished earlier ({'continued' if summary.resumed else 'new'} run)"
    )
    if summary.grid != summary.total:  # an --only session: the whole run, too
        c = summary.cells
        typer.echo(
            f"the run ({summary.status}): {c['total']} cells, {c['ok']} ok, {c['failed']} "
            f"failed, {c['pending']} not run yet"
        )
    typer.echo(f"results: {summary.run_dir}")
    for line in summary.set_aside:
        typer.echo(f"warning: {line}", err=True)
    for line in summary.failures[:20]:
        print_error(f"cell failed: {line}")
    if report:
        from gcbench.report import write_report

        with errors(), _results_warnings(), _report_progress() as progress:
            page = write_report(summary.run_dir, reports / s.name, progress=progress)
        for line in _headline(page):
            typer.echo(line)
        typer.echo(f"report: {page} (all runs: {page.parent.parent / 'index.html'})")
    if summary.failed:
        raise typer.Exit(1)


def _expand(path: Path, suite: Any, only: list[Any], max_cells: int) -> Any:
    """`config.expand_suite`, with a `warning:` line on stderr per filter that matched no
    cell (before the error, when the filters left none)."""
    from gcbench.config import NoCellsLeft, expand_suite, where

    def warn(warnings: list[Any]) -> None:
        for w in warnings:
            if w.loc[0] == "--only":
                typer.echo(f"warning: {w}", err=True)
            else:
                typer.echo(f"warning: {where(path, w.loc)}: {w.text} matches no cell", err=True)

    try:
        found = expand_suite(suite, only, max_cells, str(path))
    except NoCellsLeft as e:
        warn(e.warnings)
        raise
    warn(found.warnings)
    _check_brute_force(path, found.cells)
    return found


def _check_brute_force(path: Path, cells: list[Any]) -> None:
    """A brute-force cell whose model has more tensors than brute force can take fails
    before anything runs (it would only fail as a cell): one line per model, naming the
    suite's strategy line."""
    from gcbench.config import where
    from gcbench.errors import PlanError

    brute = {(c.model, c.constraints): c for c in cells if c.strategy == "brute-force"}
    if not brute:
        return
    from gcbench.backends.simulate import cell_profile
    from gcbench.plan.brute import check_size
    from gcbench.plan.space import brute_space

    at = where(path, ("grid", "strategy")).split(": ")[0]
    problems = []
    for c in brute.values():
        try:
            check_size(len(cell_profile(c).tensors), len(brute_space(c.constraints)))
        except PlanError as e:
            problems.append(f"{at}: brute-force on {c.model.name}: {e}")
    if problems:
        raise ConfigError(problems)


@app.command()
def validate(
    suites: Annotated[list[Path] | None, typer.Argument(help="Suite files to check.")] = None,
    cluster: Annotated[
        list[Path] | None,
        typer.Option(
            "--cluster",
            help="Ray cluster-launcher file to check against Ray's schema (repeatable).",
        ),
    ] = None,
    max_cells: Annotated[int, MAX_CELLS] = 1_000_000,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="List every reason grid points were dropped, with counts."
        ),
    ] = False,
) -> None:
    """Check suite files (and cluster files) without running anything.

    Reports every mistake as file:line: path: message and exits 2 if there is one: the
    same mistakes `gcbench run` refuses (filters that leave no cell, a grid larger than
    --max-cells). A filter that matches no cell is a warning. Grid points whose strategy,
    compressor and cluster do not pair are dropped, counted in one line (--verbose: why).
    """
    from gcbench.config import load_suite

    if not suites and not cluster:
        print_error("nothing to validate: give suite files and/or --cluster FILE")
        raise typer.Exit(2)
    problems: list[str] = []
    for path in suites or []:
        try:
            s = load_suite(path)
            found = _expand(path, s, [], max_cells)
            typer.echo(f"ok: {path}: suite {s.name!r}, {len(found.cells)} cells")
            if verbose:
                for why, n in sorted(found.dropped.items()):
                    typer.echo(f"  dropped {n} grid point{'s' if n > 1 else ''}: {why}")
            elif found.dropped:
                n, k = sum(found.dropped.values()), len(found.dropped)
                typer.echo(f"  dropped {n} grid point{'s' * (n != 1)} that do not pair, for "
                           f"{k} reason{'s' * (k != 1)} (--verbose lists them)")  # fmt: skip
        except ConfigError as e:
            problems += e.messages
    for path in cluster or []:
        from gcbench.config.cluster import validate_cluster_file

        try:
            validate_cluster_file(path)
            typer.echo(f"ok: {path}: valid Ray cluster-launcher file")
        except ConfigError as e:
            problems += e.messages
    for line in problems:
        print_error(line)
    if problems:
        raise typer.Exit(2)


@app.command()
def schema() -> None:
    """Print the JSON Schema of suite files (for editors: schema/suite.schema.json)."""
    from gcbench.config import suite_schema

    typer.echo(json.dumps(suite_schema(), indent=2, sort_keys=True))


@app.command()
def report(
    results_dir: Annotated[
        Path, typer.Argument(help="A run folder, or a suite folder (its latest run).")
    ],
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default: reports/<suite>).")
    ] = None,
    all_cells: Annotated[
        bool,
        typer.Option(
            "--all-cells",
            help="Show every cell on disk, also those no longer in the suite's grid.",
        ),
    ] = False,
    self_contained: Annotated[
        bool,
        typer.Option(
            "--self-contained",
            help="Inline plotly, the script and the rows into the run page: one file to "
            "mail (its links to cell pages need the folder).",
        ),
    ] = False,
    compare: Annotated[
        Path | None,
        typer.Option(
            "--compare",
            metavar="OTHER_RUN",
            help="Compare with another run (the baseline): per-cell Δ% of iteration time, "
            "throughput and wire bytes, written beside the run's page.",
        ),
    ] = None,
    on: Annotated[
        str | None,
        typer.Option(
            "--on",
            metavar="KEY,...",
            help="With --compare: match cells on these config columns (e.g. "
            "model,strategy,machines) instead of by cell id.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Write the offline HTML report of a run: reports/<suite>/<run-id>/index.html with
    its figures, results table, downloads and cell pages; reports/<suite>/index.html
    lists the suite's runs. Open them from file://, no server or network needed.

    Shows the cells of the suite as its latest `gcbench run` had it (--all-cells: every
    cell of the run folder). A cell file that cannot be read is left out, with a warning.
    With --compare OTHER_RUN, also prints and writes the per-cell differences of this run
    against OTHER_RUN: matched by cell id (the same config in two gcbench versions), or
    with --on on the named columns (two settings).
    """
    from gcbench.report.compare import compare_runs
    from gcbench.report.html import write_compare, write_report

    if on is not None and compare is None:
        print_error("--on: only with --compare")
        raise typer.Exit(2)
    keys = [k.strip() for k in on.split(",") if k.strip()] if on is not None else None
    with errors(), _results_warnings():
        # the comparison first: a bad OTHER_RUN or --on is refused before anything is written
        compared = compare_runs(results_dir, compare, keys) if compare is not None else None
    with errors(), _results_warnings(), _report_progress() as progress:
        page = write_report(
            results_dir, out, all_cells=all_cells, self_contained=self_contained,
            progress=progress,
        )  # fmt: skip
        if compare is not None:
            target, pairs, summary = write_compare(results_dir, compare, keys, out, compared)
    if compare is None:
        if json_out:
            typer.echo(dumps({"report": str(page), "headline": _headline(page, lines=False)},
                             indent=1))  # fmt: skip
            return
        for line in _headline(page):
            typer.echo(line)
        typer.echo(f"report: {page}")
        return
    if json_out:
        rows = pairs.astype(object).where(pairs.notna(), None).to_dict("records")
        typer.echo(dumps({"summary": summary, "cells": rows}, indent=2, default=str))
        return
    from gcbench.report.compare import summary_lines

    typer.echo(f"report: {page}")
    for line in summary_lines(pairs, summary):
        typer.echo(line)
    typer.echo(f"comparison: {target}")


def _headline(page: Path, lines: bool = True) -> Any:
    """The headline the report wrote beside its run page (`report.headline`): its lines
    for a terminal, or its entries."""
    from gcbench.report.headline import headline_lines

    entries = json.loads((page.parent / "headline.json").read_text())
    return headline_lines(entries) if lines else entries


@contextlib.contextmanager
def _report_progress() -> Iterator[Any]:
    """A progress line for a long report (reading cell files, writing cell pages), on a
    terminal only, started by the first tick: a report that fails at once prints its
    one error line and nothing else."""
    if not sys.stderr.isatty():
        yield None
        return
    with contextlib.ExitStack() as stack:
        shown: list[Any] = []

        def tick(what: str, done: int, total: int) -> None:
            if not shown:
                shown.append(stack.enter_context(iteration_bar("report")))
            shown[0](done, total, last=what)

        yield tick


@contextlib.contextmanager
def _results_warnings() -> Iterator[None]:
    """Print each `ResultsWarning` (a cell file left out) as one `warning:` line."""
    import warnings

    from gcbench.results.store import ResultsWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, ResultsWarning):
                    typer.echo(f"warning: {w.message}", err=True)
