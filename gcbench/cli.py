"""The `gcbench` command: parse, call the library, render. The only place that prints or
exits (STYLE §7): ConfigError -> `error: file:line: ...` and exit 2; failed cells -> exit
1; Ctrl-C -> exit 130. `--debug` shows tracebacks instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.errors import ConfigError, GcbenchError

app = typer.Typer(
    name="gcbench",
    help=(
        "Which gradient-compression strategy makes data-parallel training fastest on your "
        "cluster, at your scale, and by how much?\n\n"
        "Run a suite (a YAML grid of model × compressor × network × cluster × strategy) on "
        "Ray, store one result row per cell, and browse the HTML report.\n\n"
        "Example: gcbench run suites/smoke.yaml && open reports/smoke/index.html"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

_state = {"debug": False}


def _err(line: str) -> None:
    typer.echo(f"error: {line}", err=True)


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Turn gcbench's errors into one line each and an exit code."""
    try:
        yield
    except ConfigError as e:
        if _state["debug"]:
            raise
        for line in e.messages:
            _err(line)
        raise typer.Exit(2) from None
    except GcbenchError as e:
        if _state["debug"]:
            raise
        _err(str(e))
        raise typer.Exit(getattr(e, "status", 1)) from None


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks; re-raise failures.")
    ] = False,
) -> None:
    _state["debug"] = debug


# Both `run` and `validate` refuse a grid larger than this before expanding it.
_MAX_CELLS = typer.Option(
    "--max-cells",
    min=1,
    help="Refuse a suite whose grid has more points than this (counted from the axis "
    "lengths, before anything is expanded; 10^6 cells take about 1.3 GB and 20 s).",
)


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
    max_cells: Annotated[int, _MAX_CELLS] = 1_000_000,
) -> None:
    """Run a suite's cells on Ray (continuing its latest run), then write its report.

    Finished cells are written one by one to <results>/<suite>/<run-id>/cells/; run the
    same command again after a crash or Ctrl-C and only the missing (or failed) cells run
    (and those whose file was damaged: it is set aside). One run at a time writes a
    suite's results. The run's manifest and report describe the whole suite, whatever
    --only keeps. A run with nothing left to do writes nothing.
    Exit code: 0 all cells ok, 1 some cells failed, 2 bad input, 130 interrupted.
    """
    from gcbench.config import load_suite, parse_only

    with _errors():
        s = load_suite(suite)
        filters = parse_only(only or [])
        found = _expand(suite, s, filters, max_cells)
        if report:
            from gcbench.files import check_writable

            check_writable(reports / s.name, "--reports")
    from gcbench.runner import run_suite

    summary = None
    with _errors(), contextlib.ExitStack() as stack:
        bar: list[Any] = []

        def on_progress(p: Any) -> None:
            # the bar starts with the first cell, so that a run refused before (a lock,
            # a folder, an address) prints its error line alone
            if not bar:
                bar.append(stack.enter_context(_progress_bar(s.name)))
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
        except KeyboardInterrupt:
            if _state["debug"]:
                raise
            typer.echo(
                "\ninterrupted: finished cells are saved; run the same command again to continue.",
                err=True,
            )
            raise typer.Exit(130) from None
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
        _err(f"cell failed: {line}")
    if report:
        from gcbench.report import write_report

        with _errors(), _results_warnings(), _report_progress() as progress:
            page = write_report(summary.run_dir, reports / s.name, progress=progress)
        typer.echo(f"report: {page} (all runs: {page.parent.parent / 'index.html'})")
    if summary.failed:
        raise typer.Exit(1)


@contextlib.contextmanager
def _progress_bar(name: str, console: Any = None) -> Iterator[Any]:
    """A progress line fed by the runner's progress callback: done/total, failures,
    elapsed, the runner's ETA and the cell that just finished (`_live_line`)."""
    with _live_line(name, console) as set_fields:

        def update(p: Any) -> None:
            eta = "eta --" if p.eta_s is None else f"eta {_duration(p.eta_s)}"
            set_fields(
                p.done,
                p.total,
                failed=p.failed,
                clock=f"{_duration(p.elapsed_s)} {eta}",
                last=p.last or "",
            )

        yield update


def _status_text(name: str, f: dict[str, Any], width: int) -> Any:
    """One line of at most `width` cells: `name ━━━━ done/total · N failed · clock · last`.
    Done/total always shows; what does not fit goes — the last cell first, then the bar,
    the clock and the failures — and a long name or cell is cut with an ellipsis."""
    from rich.text import Text

    done, total = f.get("done", 0), f.get("total")
    count = f"{done}/{'?' if total is None else total}"
    label = Text(name)
    label.truncate(max(8, width // 3), overflow="ellipsis")
    line = Text()
    line.append(label.plain, style="bold")
    room = width - line.cell_len - 1 - len(count)
    extras = []
    for e in ([f"{f['failed']} failed"] if "failed" in f else []) + (
        [f["clock"]] if f.get("clock") else []
    ):
        if room >= len(e) + 3:
            extras.append(e)
            room -= len(e) + 3
    last = f.get("last") or ""
    # the bar takes what the whole last cell leaves, else shares the room with it
    spare = room - 1 - (Text(last).cell_len + 3 if last else 0)
    bar = min(40, spare if spare >= 10 else (room - 1) // 2)
    if bar >= 6:
        filled = round(bar * min(done, total) / total) if total else 0
        line.append(" ")
        line.append("━" * filled, style="bar.finished" if filled == bar else "bar.complete")
        line.append("━" * (bar - filled), style="bar.back")
        room -= bar + 1
    line.append(" ")
    line.append(count, style="green")
    for e in extras:
        line.append(f" · {e}")
    if last and room >= 6:
        rest = Text(last)
        rest.truncate(room - 3, overflow="ellipsis")
        line.append(" · ")
        line.append_text(rest)
    line.no_wrap = True
    return line


@contextlib.contextmanager
def _live_line(name: str, console: Any = None) -> Iterator[Any]:
    """A one-line live display on stderr: `set_fields(done, total, **fields)` updates it.

    The line fits the console (`_status_text`), so done/total stays visible at 80
    columns and narrower. Ctrl-C stops the display before anything else prints (a SIGINT
    handler while it runs), so its last state shows once, above the caller's message."""
    import signal
    import threading

    from rich.console import Console
    from rich.live import Live

    console = console or Console(stderr=True)
    fields: dict[str, Any] = {}

    class Line:
        def __rich__(self) -> Any:
            return _status_text(name, fields, max(console.width - 1, 20))

    live = Live(Line(), console=console, refresh_per_second=4, transient=False)

    def set_fields(done: int, total: int, **more: Any) -> None:
        fields.update(more, done=done, total=total)

    def on_sigint(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):
            live.stop()
        if callable(previous) and previous is not on_sigint:
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    if main_thread:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        with live:
            yield set_fields
    finally:
        if main_thread and signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, previous or signal.default_int_handler)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


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
    max_cells: Annotated[int, _MAX_CELLS] = 1_000_000,
) -> None:
    """Check suite files (and cluster files) without running anything.

    Reports every mistake as file:line: path: message and exits 2 if there is one: the
    same mistakes `gcbench run` refuses (filters that leave no cell, a grid larger than
    --max-cells). A filter that matches no cell is a warning.
    """
    from gcbench.config import load_suite

    if not suites and not cluster:
        _err("nothing to validate: give suite files and/or --cluster FILE")
        raise typer.Exit(2)
    problems: list[str] = []
    for path in suites or []:
        try:
            s = load_suite(path)
            found = _expand(path, s, [], max_cells)
            typer.echo(f"ok: {path}: suite {s.name!r}, {len(found.cells)} cells")
            for why, n in sorted(found.dropped.items()):
                typer.echo(f"  dropped {n} grid point{'s' if n > 1 else ''}: {why}")
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
        _err(line)
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
        _err("--on: only with --compare")
        raise typer.Exit(2)
    keys = [k.strip() for k in on.split(",") if k.strip()] if on is not None else None
    with _errors(), _results_warnings():
        # the comparison first: a bad OTHER_RUN or --on is refused before anything is written
        compared = compare_runs(results_dir, compare, keys) if compare is not None else None
    with _errors(), _results_warnings(), _report_progress() as progress:
        page = write_report(
            results_dir, out, all_cells=all_cells, self_contained=self_contained,
            progress=progress,
        )  # fmt: skip
        if compare is not None:
            target, pairs, summary = write_compare(results_dir, compare, keys, out, compared)
    if compare is None:
        typer.echo(_dumps({"report": str(page)}) if json_out else f"report: {page}")
        return
    if json_out:
        rows = pairs.astype(object).where(pairs.notna(), None).to_dict("records")
        typer.echo(_dumps({"summary": summary, "cells": rows}, indent=2, default=str))
        return
    from gcbench.report.compare import summary_lines

    typer.echo(f"report: {page}")
    for line in summary_lines(pairs, summary):
        typer.echo(line)
    typer.echo(f"comparison: {target}")


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
                shown.append(stack.enter_context(_iteration_bar("report")))
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


# Every --json output (and every JSON file the CLI writes) is strict JSON (RFC 8259): a
# number that is not finite is written as the string "inf", "-inf" or "nan", never as the
# bare Infinity/NaN that Python's json emits and other parsers reject.
JSON_HELP = 'Machine-readable output (strict JSON; non-finite numbers as "inf", "-inf", "nan").'


def _finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by "inf", "-inf" or "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _dumps(data: Any, indent: int | None = None, default: Any = None) -> str:
    """Strict JSON text of `data` (see JSON_HELP)."""
    if default is not None:  # objects json cannot write, as `default` renders them
        data = json.loads(json.dumps(data, default=default))
    return json.dumps(_finite(data), indent=indent, allow_nan=False)


@app.command()
def calibrate(
    points: Annotated[
        Path,
        typer.Argument(
            help="Measurements: a POINTS YAML file (docs/calibration.md) or an nccl-tests "
            "*_perf output, read as is."
        ),
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the fitted network profile here.")
    ] = None,
    fit: Annotated[
        str,
        typer.Option(
            "--fit",
            help="Parameters to fit, comma-separated: inter_efficiency, inter_latency_us, "
            "intra_efficiency, intra_latency_us, compute_scale.",
        ),
    ] = "inter_efficiency",
    network: Annotated[
        str | None,
        typer.Option(
            "--network",
            help="The testbed's network (a profile's name or file) where POINTS gives none, "
            "e.g. for an nccl-tests output; POINTS' own network fields override it.",
        ),
    ] = None,
    inter_gbps: Annotated[
        float | None,
        _opt(
            "--inter-gbps",
            "The machines' line rate the points were measured at (Gbit/s), "
            "over POINTS' and --network's.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Fit a network profile to measured points: collective timings (yours, or
    nccl-tests output) or end-to-end iteration times, scaling factors or throughputs.
    Prints the fit (values, R², each point's residual); --out writes the profile, which
    suites name as `network: {profile: FILE}` and simulate as --network FILE."""
    from gcbench import calibrate as cal
    from gcbench.config.network_profile import dump_network_profile
    from gcbench.files import atomic_write, check_writable

    params = [p.strip() for p in fit.split(",") if p.strip()]
    with _errors():
        if out is not None:
            check_writable(out, "--out", file=True)
        fitted = cal.calibrate(points, params, network, inter_gbps)
        if out is not None:
            atomic_write(out, dump_network_profile(fitted).encode())
    profile = fitted.model_dump(exclude_none=True)
    if json_out:
        typer.echo(_dumps(profile, indent=1))
        return
    report = profile["fit"]
    values = ", ".join(f"{k} = {v:g}" for k, v in report["parameters"].items())
    typer.echo(f"fitted {values} on {len(report['points'])} points ({report['method']})")
    typer.echo(
        f"R² {'n/a' if report['r2'] is None else format(report['r2'], '.4f')} (relative "
        "weights); median |relative error| "
        f"{report['median_abs_relative_error']:.1%}"
    )
    worst = sorted(report["points"], key=lambda r: -abs(r["relative_error"]))[:5]
    for r in worst:
        typer.echo(
            f"  {r['relative_error']:+7.1%}  measured {r['measured']:.6g}  predicted "
            f"{r['predicted']:.6g}  {r['point']}"
        )
    for p in report["bound_hits"]:
        typer.echo(
            f"warning: {p} ended on a bound of its range; the points may want a value "
            "gcbench does not allow (check the line rates)",
            err=True,
        )
    if out is not None:
        typer.echo(f"profile: {out}")


@app.command()
def reproduce(
    published: Annotated[
        Path, typer.Option("--published", help="The published figures (a YAML data file).")
    ] = Path("suites/repro/published.yaml"),
    out: Annotated[
        Path, typer.Option("--out", help="Where the page goes: <out>/index.html.")
    ] = Path("reports/reproduction"),
    only: Annotated[
        str | None, typer.Option("--only", help="One testbed (e.g. acpsgd-10gbe).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Reproduce the papers' published figures: per testbed, fit at most two network
    parameters on one designated figure, predict the others, and write a page of
    published against gcbench (in-sample rows marked, misses with their causes)."""
    import yaml

    from gcbench import repro
    from gcbench.files import check_writable

    with _errors():
        check_writable(out, "--out")
        rows, fits = repro.reproduce(published, only)
        causes_path = published.with_name("causes.yaml")
        causes = yaml.safe_load(causes_path.read_text()) if causes_path.is_file() else {}
        page = repro.write_page(rows, fits, causes or {}, out)
    s = repro.summary(rows)
    if json_out:
        typer.echo(_dumps({"summary": s, "fits": fits, "figures": repro.rows_json(rows)}, indent=1))
        return
    med = s["median_abs_error_out_of_sample"]
    typer.echo(
        f"{s['figures']} figures, {s['expressible']} expressible, {s['out_of_sample']} out of "
        f"sample: median |error| {'n/a' if med is None else f'{med:.1%}'}, "
        f"{len(s['beyond_25pct'])} beyond 25%"
    )
    for name, f in fits.items():
        values = ", ".join(f"{k} = {v:.4g}" for k, v in f["parameters"].items())
        typer.echo(f"  {name}: fitted on {f['figure']}: {values}")
    for r in rows:
        if r.error is not None:
            mark = " (in sample)" if r.in_sample else ""
            typer.echo(
                f"  {r.error:+7.1%}  {r.published:10.4g} → {r.predicted:10.4g}  {r.id}{mark}"
            )
    typer.echo(f"page: {page}")


@app.command()
def networks(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the shipped network profiles (suites: `network: {profile: NAME}`; simulate:
    --network NAME): each one's values and where they come from."""
    from gcbench.config.network_profile import preset_names, read_network_profile

    rows = []
    for name in preset_names():
        profile, _, digest = read_network_profile(name)
        rows.append({**profile.model_dump(exclude_none=True), "sha256": digest})
    if json_out:
        typer.echo(_dumps(rows, indent=1))
        return
    for r in rows:
        values = " ".join(f"{k}={v}" for k, v in r["network"].items())
        extra = f" compute_scale={r['compute_scale']:g}" if r["compute_scale"] != 1 else ""
        typer.echo(f"{r['name']}: {values}{extra}")
        typer.echo(f"  {r['source']}")


@app.command()
def devices(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the device table: peak rates and bandwidths (datasheet figures, with their
    source) and where each device's efficiencies come from (fitted, measured or
    borrowed from the V100 fit)."""
    from dataclasses import asdict

    from gcbench.zoo.devices import DEVICES

    if json_out:
        typer.echo(_dumps([asdict(d) for d in DEVICES.values()], indent=1))
        return
    typer.echo(
        f"{'device':<10} {'FP32':>6} {'TF32':>6} {'FP16':>6} {'memory':>7} {'PCIe':>6} "
        f"{'NVLink':>6}  efficiencies"
    )
    typer.echo(f"{'':<10} {'TFLOP/s':>20} {'':>6} {'GB/s':>7} {'GB/s':>6} {'GB/s':>6}")
    for d in DEVICES.values():
        tf32 = f"{d.peak_tf32_tflops:g}" if d.peak_tf32_tflops else "-"
        nvlink = f"{d.nvlink_gbs:g}" if d.nvlink_gbs else "-"
        typer.echo(
            f"{d.name:<10} {d.peak_fp32_tflops:>6g} {tf32:>6} {d.peak_fp16_tflops:>6g} "
            f"{d.mem_bandwidth_gbs:>7g} {d.pcie_gbs:>6g} {nvlink:>6}  {d.efficiencies}"
        )
    typer.echo("\nsources:")
    for d in DEVICES.values():
        typer.echo(f"  {d.name}: {d.source}")


@app.command()
def models(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the zoo's models: default batch and sequence length, parameters, size."""
    from gcbench.zoo.catalog import MODELS

    rows = [
        {
            "name": m.name,
            "batch_size": m.batch_size,
            "seq_len": m.seq_len,
            "sample_unit": m.sample_unit,
            "params": m.params,
            "mib": round(m.params * 4 / 2**20, 2),
            "description": m.description,
            "reference": m.reference,
        }
        for m in MODELS.values()
    ]
    if json_out:
        typer.echo(_dumps(rows, indent=2))
        return
    typer.echo(f"{'model':<17} {'batch':>5} {'seq':>5} {'params':>12} {'MiB':>9}  description")
    for r in rows:
        seq = r["seq_len"] or "-"
        typer.echo(
            f"{r['name']:<17} {r['batch_size']:>5} {seq:>5} {r['params']:>12,} "
            f"{r['mib']:>9.2f}  {r['description']}"
        )


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise ConfigError([f"{flag} must be > 0, got {value}"])


def _known_model(name: str) -> None:
    import difflib

    from gcbench.zoo.catalog import MODELS

    if name not in MODELS:
        close = difflib.get_close_matches(name, list(MODELS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError([f"unknown model {name!r}{hint}; valid: {', '.join(sorted(MODELS))}"])


def _print_profile(p: Any, params_total: int) -> None:
    typer.echo(f"model      {p.name}  ({p.source} profile on {p.device})")
    seq = f", seq_len {p.seq_len}" if p.seq_len else ""
    unit = "sequences" if p.sample_unit == "tokens" else p.sample_unit
    typer.echo(f"batch      {p.batch_size} {unit}{seq}")
    typer.echo(
        f"params     {params_total:,}  ({params_total * 4 / 2**20:,.2f} MiB fp32), "
        f"{len(p.tensors)} tensors"
    )
    typer.echo(
        f"time       forward {p.forward_s * 1e3:.2f} ms · backward {p.backward_s * 1e3:.2f} ms"
        f" · update {p.update_s * 1e3:.2f} ms · iteration {p.compute_s * 1e3:.2f} ms"
    )
    for note in p.notes:
        typer.echo(f"note       {note}")
    typer.echo("")
    typer.echo(f"{'#':>4} {'tensor':<48} {'shape':<20} {'numel':>12} {'backward ms':>12}  layer")
    for i, t in enumerate(p.tensors):
        shape = "x".join(map(str, t.shape))
        typer.echo(
            f"{i:>4} {t.name:<48} {shape:<20} {t.numel:>12,} {t.backward_s * 1e3:>12.4f}  {t.layer}"
        )


@app.command()
def model(
    name: Annotated[str, typer.Argument(help="A zoo model (see `gcbench models`).")],
    batch: Annotated[
        int | None, typer.Option("--batch", help="Per-GPU batch (default: the zoo's).")
    ] = None,
    seq_len: Annotated[
        int | None, typer.Option("--seq-len", help="Sequence length (sequence models).")
    ] = None,
    device: Annotated[
        str,
        typer.Option("--device", help="Device-table entry (see `gcbench devices`)."),
    ] = "v100",
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Show a zoo model's FLOP-based profile: parameters, fp32 size, forward, backward and
    update times on a device, and every gradient tensor in the order it becomes ready."""
    with _errors():
        from gcbench.zoo.devices import DEVICES

        _known_model(name)
        _positive(batch, "--batch")
        _positive(seq_len, "--seq-len")
        if device not in DEVICES:
            raise ConfigError([f"unknown device {device!r}; valid: {', '.join(sorted(DEVICES))}"])
        from gcbench.zoo.catalog import MODELS
        from gcbench.zoo.profile import model_profile
        from gcbench.zoo.profile_io import to_json

        if seq_len is not None and MODELS[name].seq_len is None:
            raise ConfigError([f"--seq-len: {name} is not a sequence model"])
        p = model_profile(name, batch, device, seq_len)
    if json_out:
        out = to_json(p)
        out.update(params=p.numel, mib=p.numel * 4 / 2**20, backward_s=p.backward_s)
        typer.echo(_dumps(out, indent=1))
        return
    _print_profile(p, p.numel)


@app.command()
def profile(
    name: Annotated[str, typer.Argument(help="A zoo model (see `gcbench models`).")],
    torch_device: Annotated[
        str, typer.Option("--torch-device", help="Where torch runs: cpu or cuda[:N].")
    ] = "cpu",
    batch: Annotated[
        int | None, typer.Option("--batch", help="Per-GPU batch (default: the zoo's).")
    ] = None,
    seq_len: Annotated[
        int | None, typer.Option("--seq-len", help="Sequence length (sequence models).")
    ] = None,
    iterations: Annotated[int, typer.Option("--iterations", help="Timed iterations.")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed iterations first.")] = 2,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write the profile file here (default: profiles/MODEL-DEVICE.json)."
        ),
    ] = None,
) -> None:
    """Measure a model on this host: real forward/backward/update iterations on random
    data, with a hook timestamping each gradient as it becomes ready. Writes a profile file
    (JSON, docs/profile-format.md) that a suite can use as the model's profile."""
    with _errors():
        _known_model(name)
        _positive(batch, "--batch")
        _positive(seq_len, "--seq-len")
        _positive(iterations, "--iterations")
        if warmup < 0:
            raise ConfigError([f"--warmup must be >= 0, got {warmup}"])
        _torch_device(torch_device)
        from gcbench.zoo.measure import measure_profile
        from gcbench.zoo.profile_io import write_profile

        target = out or Path("profiles") / f"{name}-{torch_device.replace(':', '')}.json"
        _writable(target, "--out")
        with _iteration_bar(f"profile {name}") as tick:
            p = measure_profile(name, batch, seq_len, torch_device, warmup, iterations, tick)
        write_profile(p, target)
    _print_profile(p, p.numel)
    typer.echo(f"\nprofile: {target}")


def _opt(flag: str, help: str) -> Any:
    return typer.Option(flag, help=help, show_default=False)


# `gcbench simulate` flags for every field of a cell's network and cluster (a test checks
# that none is missing); None means "the suite's default".
NETWORK_FLAGS = {
    "intra": "--intra",
    "intra_gbs": "--intra-gbs",
    "intra_latency_us": "--intra-latency-us",
    "intra_efficiency": "--intra-efficiency",
    "inter_gbps": "--inter-gbps",
    "inter_latency_us": "--inter-latency-us",
    "inter_efficiency": "--inter-efficiency",
    "nics_per_machine": "--nics-per-machine",
    "server_gbps": "--server-gbps",
    "profile": "--network",
    "compute_scale": "--compute-scale",
}
# Network fields no flag sets: the profile's digest (filled in from it) and its
# per-collective overrides (a profile file holds them).
NETWORK_UNFLAGGED = ("profile_sha256", "overrides")
CLUSTER_FLAGS = {
    "machines": "--machines",
    "gpus_per_machine": "--gpus-per-machine",
    "cpu_servers": "--cpu-servers",
    "cpu_cores": "--cpu-cores",
    "summation_gbs": "--summation-gbs",
}
MODEL_FLAGS = {"name": "--model", "batch_size": "--batch", "seq_len": "--seq-len"}
# Every built-in strategy and its aliases (`gcbench.strategies`; a test checks; spelt out
# so that the CLI starts without importing the registry).
STRATEGY_HELP = (
    "fp32 (default), fp32-2level, fp16, allgather, allgather-2level (alias hitopkcomm), "
    "allreduce, ps, byteps, byteps-compress, hipress, powersgd, acpsgd, covap; the "
    "planner's: bytecomp, bytecomp-greedy, brute-force, upper-bound."
)


@app.command()
def simulate(
    model: Annotated[str, typer.Option("--model", help="A zoo model (gcbench models).")],
    inter_gbps: Annotated[
        float | None,
        _opt(
            "--inter-gbps",
            "Gbit/s per machine between machines (required unless --network gives it).",
        ),
    ] = None,
    network: Annotated[
        str | None,
        _opt(
            "--network",
            "A network profile: a preset's name (gcbench networks) or a YAML "
            "file; the other network flags override its values.",
        ),
    ] = None,
    compute_scale: Annotated[
        float | None, _opt("--compute-scale", "Multiply the device's compute times (1).")
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            help=STRATEGY_HELP,
            show_default=False,
        ),
    ] = None,
    option: Annotated[
        str | None,
        typer.Option(
            "--option",
            help="Run every bucket with this option instead of the strategy's, in the form "
            "`gcbench options` lists, e.g. 'intra:rs gc inter:ag* gd intra:ag'.",
        ),
    ] = None,
    plan_file: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="Time this plan instead of a strategy's: a gcbench plan record (`gcbench "
            "plan --json` output or a stored plans/<cell-id>.json.gz) or the ByteComp "
            "authors' planner output (codes 0-10).",
        ),
    ] = None,
    fusion: Annotated[str, typer.Option("--fusion", help="ddp, tensor, or fixed:<bytes>.")] = "ddp",
    compressor: Annotated[
        str | None,
        _opt(
            "--compressor",
            "Preset or kind:param=value (default: none, or the strategy's own compressor "
            "for powersgd, acpsgd and covap).",
        ),
    ] = None,
    machines: Annotated[int, typer.Option("--machines", help="Machines.")] = 1,
    gpus_per_machine: Annotated[
        int, typer.Option("--gpus-per-machine", help="GPUs per machine.")
    ] = 8,
    cpu_servers: Annotated[
        int | None, _opt("--cpu-servers", "CPU summation servers (ps, byteps; default 0).")
    ] = None,
    cpu_cores: Annotated[
        int | None, _opt("--cpu-cores", "CPU-compression cores per machine (default 16).")
    ] = None,
    summation_gbs: Annotated[
        float | None, _opt("--summation-gbs", "GB/s a CPU server sums (default: ample).")
    ] = None,
    intra: Annotated[str | None, _opt("--intra", "nvlink (default) or pcie.")] = None,
    intra_gbs: Annotated[
        float | None, _opt("--intra-gbs", "GB/s per GPU inside a machine (default by --intra).")
    ] = None,
    intra_latency_us: Annotated[
        float | None, _opt("--intra-latency-us", "Per-step latency inside a machine (5).")
    ] = None,
    intra_efficiency: Annotated[
        float | None, _opt("--intra-efficiency", "Achieved / line rate inside a machine (0.8).")
    ] = None,
    inter_latency_us: Annotated[
        float | None, _opt("--inter-latency-us", "Per-step latency between machines (25).")
    ] = None,
    inter_efficiency: Annotated[
        float | None,
        _opt("--inter-efficiency", "Achieved / line rate between machines (0.7)."),
    ] = None,
    nics_per_machine: Annotated[
        int | None, _opt("--nics-per-machine", "NICs sharing inter_gbps (1).")
    ] = None,
    server_gbps: Annotated[
        float | None, _opt("--server-gbps", "Gbit/s of a CPU server's NICs (inter_gbps).")
    ] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Per-GPU batch.")] = None,
    seq_len: Annotated[
        int | None, _opt("--seq-len", "Sequence length (sequence models; default the zoo's).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="Device-table entry.")] = "v100",
    compressor_costs: Annotated[
        Path | None,
        _opt(
            "--compressor-costs",
            "A GPU compressor cost table (gcbench bench compressors --torch-device cuda "
            "--out FILE) for --device, instead of its roofline.",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Write a Chrome trace (Trace Event Format) to this file (its folder is "
            "created if missing).",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="simulate (the timeline model), or emulate: run the cell on local Ray "
            "actors, one per GPU, with real gradients, compressors and gloo collectives "
            "on loopback, timed on the virtual clock; prints the aggregation error too.",
        ),
    ] = "simulate",
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Simulate one training iteration of a single cell and print its metrics: iteration
    time, throughput, scaling factor and the compute / compression / communication
    breakdown. Every network and cluster field of a suite cell has a flag, validated as
    in suites. --trace writes the timeline for chrome://tracing or Perfetto. --mode
    emulate runs the cell on Ray actors instead (see --mode)."""
    with _errors():
        if mode not in ("simulate", "emulate"):
            raise ConfigError([f"--mode: simulate or emulate, got {mode!r}"])
        if mode == "emulate":
            used = [f for f, v in (("--option", option), ("--plan", plan_file),
                                   ("--trace", trace)) if v is not None]  # fmt: skip
            if used:
                raise ConfigError([f"{', '.join(used)}: not with --mode emulate yet"])
        given = [f for f, v in (("--strategy", strategy), ("--option", option),
                                ("--plan", plan_file)) if v is not None]  # fmt: skip
        if len(given) > 1:
            raise ConfigError([f"{' and '.join(given)}: give one of --strategy, --option, --plan"])
        # an option or a plan runs with any compressor, as under the allgather strategy
        # (byteps-compress where the cluster has CPU servers: it takes them)
        replaced = option is not None or plan_file is not None
        if strategy is None:
            strategy = ("byteps-compress" if cpu_servers else "allgather") if replaced else "fp32"
        cell = _flags_cell({**locals(), "strategy": strategy})
        from gcbench.backends.simulate import simulate_cell
        from gcbench.sim.chrome import chrome_trace, shown_note, symmetric_spans

        chosen = None
        if option is not None:
            from gcbench.sim.options import Option

            chosen = Option.parse(option)
        planned = None
        if plan_file is not None:
            from gcbench.backends.simulate import cell_profile
            from gcbench.compress.specs import ADDITIVE
            from gcbench.plan.io import read_plan_file

            planned = read_plan_file(
                plan_file,
                cell_profile(cell),
                additive=cell.compressor.kind in ADDITIVE,
                compressor=cell.compressor.label(),
                fusion=cell.fusion,
            )
        if compressor is not None and planned is None:
            _compressor_used(compressor, cell, chosen)
        if trace is not None:
            _writable(trace, "--trace")
        if cell.mode == "emulate":
            from gcbench.backends.simulate import SimResult
            from gcbench.cluster.emulate import check_cell, emulated
            from gcbench.runner.local import connect

            check_cell(cell)  # before Ray starts
            started = connect()
            try:
                rows, spans, plan = emulated(cell)
                result = SimResult(rows[0], spans, plan)
            finally:
                if started:
                    import ray

                    ray.shutdown()
        else:
            result = simulate_cell(cell, chosen, planned)
        if trace is not None:
            from gcbench.files import atomic_write

            cl = cell.cluster
            data = chrome_trace(
                symmetric_spans(result.spans, cl.machines, cl.gpus_per_machine),
                cl.gpus_per_machine,
                machines=cl.machines,
            )
            atomic_write(trace, _dumps(data).encode())
    m = result.metrics
    if json_out:
        flat = cell.flat()
        if chosen is not None or planned is not None:
            flat["strategy"] = None  # replaced by the option or the plan
        out = {
            "cell": flat,
            "option": chosen.name if chosen else None,
            "plan": str(plan_file) if plan_file else None,
            "metrics": m,
        }
        typer.echo(_dumps(out, indent=1, default=str))
        return
    unit = m["sample_unit"]
    how = (
        f"option {chosen.name}"
        if chosen is not None
        else (f"plan {plan_file}" if plan_file is not None else cell.strategy)
    )
    n, cl = cell.network, cell.cluster  # as the cell has them (a --network fills flags left out)
    typer.echo(
        f"{model} · {how} · {cell.compressor.label()} · {cl.machines}x{cl.gpus_per_machine} "
        f"{n.intra} · {n.inter_gbps:g} Gbps · {cell.device}"
        + (f" · network {n.profile}" if n.profile else "")
    )
    typer.echo(
        f"iteration {m['iteration_s'] * 1e3:.2f} ms · {m['throughput']:,.0f} {unit}/s · "
        f"scaling factor {m['scaling_factor']:.3f}"
    )
    typer.echo(
        f"compute {m['compute_s'] * 1e3:.2f} ms · exposed compression "
        f"{m['compress_exposed_s'] * 1e3:.2f} ms · exposed communication "
        f"{m['comm_exposed_s'] * 1e3:.2f} ms"
    )
    typer.echo(
        f"communication total {m['comm_total_s'] * 1e3:.2f} ms · compression total "
        f"{m['compress_total_s'] * 1e3:.2f} ms · {m['wire_bytes'] / 2**20:,.1f} MiB sent per "
        f"GPU · {m['buckets']} buckets"
    )
    if "agg_error" in m:
        typer.echo(
            f"emulated on {cell.cluster.gpus} Ray actors: aggregation error "
            f"{m['agg_error']:.3g} (one iteration), {m['agg_error_steps']:.3g} (summed over "
            "the emulated iterations, with error feedback)"
        )
    if trace is not None:
        note = shown_note(cell.cluster.machines, cell.cluster.gpus_per_machine)
        typer.echo(f"trace: {trace}" + (f" ({note})" if note else ""))


def _flags_cell(given: dict[str, Any]) -> Any:
    """The Cell that `simulate`'s (and `plan`'s) flags describe; ConfigError naming the
    flag of each mistake."""
    from pydantic import ValidationError

    from gcbench import strategies
    from gcbench.compress.specs import NoneSpec
    from gcbench.config.models import Cell

    def pick(flags: dict[str, str]) -> dict[str, Any]:
        return {
            field: given[flag[2:].replace("-", "_")]
            for field, flag in flags.items()
            if flag != "--model" and given[flag[2:].replace("-", "_")] is not None
        }

    strategy, compressor = given["strategy"], given["compressor"]
    spec: dict[str, Any] = {"name": given["model"], **pick(MODEL_FLAGS)}
    if given["batch"] is not None:
        spec["batch_size"] = given["batch"]
    chosen_compressor: Any = compressor
    found = strategies.find(strategy) if strategy else None
    if compressor is None and found is not None:
        chosen_compressor = strategies.pair_compressor(found.name, NoneSpec(kind="none"))[0]
    try:
        return Cell.model_validate(
            {
                "model": spec,
                "compressor": chosen_compressor or "none",
                "strategy": strategy,
                "fusion": given["fusion"],
                "device": given["device"],
                "network": pick(NETWORK_FLAGS),
                "cluster": pick(CLUSTER_FLAGS),
                "compressor_costs": (
                    None if given["compressor_costs"] is None else str(given["compressor_costs"])
                ),
                "constraints": _constraints(given.get("constraints")),
                "mode": given.get("mode") or "simulate",
            }
        )
    except ValidationError as e:
        from gcbench.config.loader import message

        lines = []
        for err in e.errors():
            flag = _cell_flag(err["loc"], err["msg"])
            text = "required" if err["type"] == "missing" else message(err, Cell)
            lines.append(f"{flag}: {text.removeprefix(flag[2:].replace('-', '_') + ': ')}")
        raise ConfigError(lines) from None


def _constraints(text: str | None) -> Any:
    """`--constraints 'key=value ...'` as a Constraints (ConfigError on a bad one)."""
    if text is None:
        return None
    from pydantic import ValidationError

    from gcbench.config.models import Constraints

    try:
        return Constraints.parse(text)
    except ValidationError as e:
        from gcbench.config.loader import message

        raise ConfigError(
            [
                f"--constraints: {'.'.join(map(str, err['loc']))}: {message(err, Constraints)}"
                for err in e.errors()
            ]
        ) from None


def plan(**given: Any) -> None:
    """Plan one cell with the ByteComp planner (--strategy bytecomp, the default;
    bytecomp-greedy, brute-force or upper-bound) and print the option each tensor takes,
    grouped, with the predicted iteration time and the planner's own time (planner_s).
    Takes the cell flags of `gcbench simulate`; --json prints the whole plan (each
    tensor's option and the buckets), as `gcbench run` stores it in
    results/<suite>/<run-id>/plans/<cell-id>.json.gz."""
    with _errors():
        from gcbench import strategies

        given["strategy"] = given["strategy"] or "bytecomp"
        found = strategies.find(given["strategy"])
        if found is None or not found.planner:
            raise ConfigError(
                [
                    f"--strategy: {given['strategy']!r} is not a planner; plan takes "
                    f"{', '.join(sorted(strategies.planner_names()))}"
                ]
            )
        cell = _flags_cell(given)
        if given["compressor"] is not None:
            _compressor_used(given["compressor"], cell, None)
        from gcbench.backends.simulate import simulate_cell

        result = simulate_cell(cell)
    record = result.plan
    assert record is not None
    m = result.metrics
    if given["json_out"]:
        typer.echo(_dumps({"cell": cell.flat(), "plan": record, "metrics": m}, indent=1))
        return
    cl = cell.cluster
    typer.echo(
        f"{cell.model.name} · {cell.strategy} · {cell.compressor.label()} · "
        f"{cl.machines}x{cl.gpus_per_machine} {cell.network.intra} · "
        f"{cell.network.inter_gbps:g} Gbps · {cell.device}"
    )
    constraints = cell.constraints.label() if cell.constraints is not None else ""
    typer.echo(f"options: {constraints or 'the whole space (no constraints)'}")
    typer.echo(
        f"predicted iteration {m['iteration_s'] * 1e3:.2f} ms · planner "
        f"{m['planner_s'] * 1e3:.1f} ms · {m['buckets']} buckets"
    )
    groups: dict[str, list[int]] = {}
    for t in record["tensors"]:
        groups.setdefault(t["option"], []).append(t["numel"])
    width = max(len(o) for o in groups)
    typer.echo(f"{'option':<{width}}  tensors        MiB")
    for option, numels in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        typer.echo(f"{option:<{width}}  {len(numels):>7}  {sum(numels) * 4 / 2**20:>9.1f}")


def _plan_signature() -> None:
    """`plan` takes `simulate`'s flags, less --option, --trace, --plan and --mode (a plan
    is made by the simulator's planner), with --strategy's default bytecomp: typer reads
    the signature and annotations set here."""
    import inspect

    sig = inspect.signature(simulate, eval_str=True)  # typer reads evaluated annotations
    dropped = ("option", "trace", "plan_file", "mode")
    params = [p for name, p in sig.parameters.items() if name not in dropped]
    help_ = "bytecomp (default), bytecomp-greedy, brute-force (at most 10 tensors), upper-bound."
    strategy = Annotated[str | None, typer.Option("--strategy", help=help_, show_default=False)]
    params = [p.replace(annotation=strategy) if p.name == "strategy" else p for p in params]
    constraints = Annotated[
        str | None,
        typer.Option(
            "--constraints",
            help="What the planner may choose, as key=value pairs: space=all|named (all, "
            "the default: every GPU path of ByteComp's decision tree; named: the five "
            "named options, faster to plan), max_compressions=N, "
            "collectives=allreduce,allgather,..., levels=flat|hierarchical, gpu_only=true. "
            "E.g. 'space=named max_compressions=1'.",
            show_default=False,
        ),
    ]
    at = next(i for i, p in enumerate(params) if p.name == "json_out")
    params.insert(
        at,
        inspect.Parameter("constraints", params[at].kind, default=None, annotation=constraints),
    )
    plan.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    plan.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    app.command("plan")(plan)


_plan_signature()


def _cell_flag(loc: tuple[Any, ...], msg: str) -> str:
    """The `simulate` flag a Cell validation error at `loc` is about."""
    parts = [str(x) for x in loc]
    if not parts:  # a rule across fields: the strategy's pairs, the cost table's device,
        # the constraints
        if "constraint" in msg:
            return "--constraints"
        if "emulat" in msg:
            return "--mode"
        return "--compressor-costs" if "compressor cost table" in msg else "--strategy"
    tables = {"model": MODEL_FLAGS, "network": NETWORK_FLAGS, "cluster": CLUSTER_FLAGS}
    if parts[0] not in tables:
        return "--" + parts[0].replace("_", "-")  # compressor, strategy, fusion, device
    flags = tables[parts[0]]
    if len(parts) > 1 and parts[1] in flags:
        return flags[parts[1]]
    # a rule across one section's fields: the field its message names, else the section's
    for field in sorted(flags, key=len, reverse=True):
        if field in msg and field != "name":
            return flags[field]
    return {"model": "--model", "network": "--inter-gbps", "cluster": "--machines"}[parts[0]]


def _compressor_used(given: str, cell: Any, option: Any) -> None:
    """An explicit --compressor must be one the cell compresses with: a strategy without
    a compressor runs with `none`, one with its own compressor with that kind, and an
    option without compressed phases compresses nothing, so naming another compressor
    would print its name over numbers it had no part in."""
    from pydantic import TypeAdapter

    from gcbench import strategies
    from gcbench.compress.specs import CompressorSpec

    spec = TypeAdapter(CompressorSpec).validate_python(given)  # valid: the cell took it
    if option is not None:
        if spec.kind != "none" and not option.compressed:
            raise ConfigError(
                [f"--compressor: option {option.name!r} compresses nothing; got {given}"]
            )
        return
    if spec == cell.compressor:
        return
    info = strategies.get(cell.strategy)
    if info.compressor == "none":
        why = f"{cell.strategy} uses no compressor"
    else:
        why = f"{cell.strategy} uses its own compressor ({info.own})"
    raise ConfigError([f"--compressor: {why}; got {given}"])


def _writable(path: Path, flag: str) -> None:
    """Check, before any work, that `atomic_write` can put a file at `path`
    (`files.check_writable`); ConfigError: one line naming `flag`."""
    from gcbench.files import check_writable

    check_writable(path, flag, file=True)


bench_app = typer.Typer(
    help="Measure gcbench's building blocks on this host.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")


# `bench compressors --sizes`: exponents of two, or element counts in the same range.
SIZE_EXPONENTS = (10, 26)


def _sizes(text: str) -> tuple[int, ...]:
    """`10,12,26` (powers of two, 10..26) or `1024,65536` (element counts, 2^10..2^26)."""
    lo, hi = SIZE_EXPONENTS
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError([f"--sizes: expected comma-separated integers, got {text!r}"]) from None
    if not values:
        raise ConfigError([f"--sizes: expected comma-separated integers, got {text!r}"])
    for v in values:
        if not (lo <= v <= hi or 2**lo <= v <= 2**hi):
            raise ConfigError(
                [
                    f"--sizes: {v} is neither a power of two {lo}..{hi} nor an element count "
                    f"{2**lo}..{2**hi}"
                ]
            )
    return tuple(2**v if v <= hi else v for v in values)


def _torch_device(text: str) -> str:
    """Check --torch-device (cpu, cuda or cuda:N) against this torch build and its GPUs."""
    kind, sep, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (sep and (kind == "cpu" or not index.isdigit())):
        raise ConfigError([f"--torch-device: must be cpu or cuda (cuda:N: GPU N), got {text!r}"])
    if kind == "cpu":
        return text
    import torch

    if not torch.cuda.is_available():
        why = "torch here is a CPU build" if torch.version.cuda is None else "no GPU is visible"
        raise ConfigError([f"--torch-device: no CUDA device for {text} ({why}); use cpu"])
    count = torch.cuda.device_count()
    if sep and int(index) >= count:
        raise ConfigError(
            [f"--torch-device: no {text}; torch sees {count} CUDA device(s), cuda:0..{count - 1}"]
        )
    return text


@bench_app.command("compressors")
def bench_compressors(
    sizes: Annotated[
        str,
        typer.Option(
            "--sizes",
            help="Powers of two (10..26) or element counts (1024..67108864), comma-separated.",
        ),
    ] = "10,12,14,16,18,20,22,24,26",
    only: Annotated[
        str, typer.Option("--only", help="Compressors to time, comma-separated (default: all).")
    ] = "",
    torch_device: Annotated[
        str, typer.Option("--torch-device", help="Where torch runs: cpu or cuda[:N].")
    ] = "cpu",
    device: Annotated[
        str | None,
        typer.Option(
            "--device", help="Print a device-table GPU's roofline cost table instead of measuring."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the cost table (JSON).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Time every compressor's compress and decompress over tensor sizes (warm-up, median
    of interleaved repeats) and fit fixed + per-byte cost models, the table the simulator
    and planner use for CPU compression; or, with --device, a GPU's roofline table."""
    with _errors():
        from gcbench.compress import names
        from gcbench.compress.costs import gpu_table, measure

        known = names()
        chosen = [n for n in only.split(",") if n] or known
        unknown = [n for n in chosen if n not in known]
        if unknown:
            raise ConfigError(
                [f"--only: unknown compressor {unknown[0]!r}; valid: {', '.join(known)}"]
            )
        if out is not None:
            _writable(out, "--out")
        if device is not None:
            from gcbench.zoo.devices import DEVICES

            if device not in DEVICES or device == "cpu":
                gpus = ", ".join(d for d in DEVICES if d != "cpu")
                raise ConfigError([f"--device: unknown GPU {device!r}; valid: {gpus}"])
            table = gpu_table(device)
        else:
            size_list = _sizes(sizes)
            _torch_device(torch_device)
            with _iteration_bar("bench compressors") as tick:
                done = [0]
                total = len(chosen) * len(size_list)

                def point(_name: str, _n: int) -> None:
                    done[0] += 1
                    tick(done[0], total)

                table = measure(chosen, size_list, torch_device, point)
        data = table.to_json()
        if out is not None:
            from gcbench.files import atomic_write

            atomic_write(out, (_dumps(data, indent=1) + "\n").encode())
    if json_out:
        typer.echo(_dumps(data, indent=1))
        return
    typer.echo(f"{table.device}: {table.source}")
    typer.echo(f"{'compressor':<12} {'compress: fixed us + ns/MiB':>30} {'decompress':>26}")
    for name in table.compress:
        c, d = table.compress[name].segments[-1], table.decompress[name].segments[-1]
        typer.echo(
            f"{name:<12} {c.fixed_s * 1e6:>12.1f} + {c.per_byte_s * 2**20 * 1e9:>12.0f}"
            f"   {d.fixed_s * 1e6:>10.1f} + {d.per_byte_s * 2**20 * 1e9:>12.0f}"
        )
    if out is not None:
        typer.echo(f"\ncost table: {out}")


@contextlib.contextmanager
def _iteration_bar(name: str, console: Any = None) -> Iterator[Any]:
    """A progress line (`_live_line`) fed by `tick(done, total)`."""
    with _live_line(name, console) as set_fields:
        yield set_fields


@app.command()
def compressors(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List compressor kinds with their parameters and properties (family, additive,
    splittable, rounds, data-dependent wire size), and the named presets."""
    from gcbench.compress.registry import REGISTRY, names
    from gcbench.compress.specs import KINDS, PRESETS

    names()  # load every family
    kinds = {
        k: {
            n: (None if f.is_required() else f.default)
            for n, f in t.model_fields.items()
            if n != "kind"
        }
        for k, t in KINDS.items()
    }
    props: dict[str, dict[str, Any]] = {
        k: {
            "family": REGISTRY[k].family,
            "additive": REGISTRY[k].additive,
            "splittable": REGISTRY[k].splittable,
            "rounds": REGISTRY[k].rounds,
            "data_dependent": REGISTRY[k].data_dependent,
        }
        for k in KINDS
    }
    presets = {name: spec.model_dump() for name, spec in PRESETS.items()}
    if json_out:
        out = {"kinds": kinds, "properties": props, "presets": presets}
        typer.echo(_dumps(out, indent=2))
        return
    typer.echo("kinds (parameters and defaults; on the command line: kind:param=value):")
    for k, params in kinds.items():
        p = props[k]
        flags: list[str] = [p["family"]] + [f for f in ("additive", "splittable") if p[f]]
        flags += [f"{p['rounds']} rounds"] if p["rounds"] > 1 else []
        flags += ["data-dependent size"] if p["data_dependent"] else []
        args = ", ".join(f"{n}={v}" for n, v in params.items())
        typer.echo(f"  {k:<10} {args:<50} [{', '.join(flags)}]")
    typer.echo("presets:")
    for name, spec in presets.items():
        typer.echo(f"  {name:<14} {spec}")


@app.command("strategies")
def strategies_(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the strategies (suites: `strategy:`; simulate: --strategy): what each does,
    the compressors and CPU servers it takes, its aliases and its source (the paper and
    section). Your own strategies come from the `gcbench.strategies` entry points
    (docs/architecture.md, "Your own strategy")."""
    from gcbench import strategies

    with _errors():
        rows = [s.info() for s in strategies.registry().values()]
        plugins = strategies.plugins()
    if json_out:
        typer.echo(_dumps(rows, indent=1))
        return
    takes = {"none": "no compressor", "own": "its own compressor", "any": "any compressor",
             "additive": "additive compressors"}  # fmt: skip
    for r in rows:
        extras = [takes[r["compressor"]] + (f" ({r['own']})" if r["own"] else "")]
        extras += [] if r["servers"] == "none" else [f"CPU servers {r['servers']}"]
        extras += ["planner"] if r["planner"] else []
        extras += [f"alias {a}" for a in r["aliases"]]
        typer.echo(f"{r['name']}: {r['description']}")
        typer.echo(f"  [{'; '.join(extras)}] {r['source']}")
    if plugins:
        typer.echo("\nfrom entry points: " + ", ".join(plugins))


@app.command()
def options(
    compressor: Annotated[
        str, typer.Option("--compressor", help="Preset or kind:param=value, e.g. dgc-1pct.")
    ] = "dgc",
    show_all: Annotated[
        bool, typer.Option("--all", help="List every option (with placements), not only paths.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """The compression-option space of ByteComp §4.2 for one compressor: every
    communication path (flat or hierarchical phases, compressed or not, forwarded or
    recompressed between compressed phases) and, with --all, every GPU/CPU placement of
    its compressions and decompressions. Additive compressors may also allreduce or
    reduce-scatter their payloads; the others give ByteComp's 174 paths and 4,341 options.
    Any listed option runs with `gcbench simulate --option '...'`."""
    with _errors():
        from gcbench.compress import create
        from gcbench.compress.specs import parse_compressor
        from gcbench.sim.options import counts, enumerate_options, enumerate_paths

        try:
            spec = parse_compressor(compressor)
        except ValueError as e:
            raise ConfigError([f"--compressor: {e}"]) from None
        kind = spec["kind"] if isinstance(spec, dict) else compressor
        c = create(kind, **{k: v for k, v in spec.items() if k != "kind"})
        additive, splittable = c.additive, c.splittable
        n = counts(additive=additive)
        paths = enumerate_paths(additive=additive)
        every = enumerate_options(additive=additive) if (show_all or json_out) else []
    props = {"compressor": kind, "additive": additive, "splittable": splittable}
    if json_out:
        typer.echo(
            _dumps(
                {
                    **props,
                    "counts": n,
                    "paths": [p.name for p in paths],
                    "options": [o.name for o in every],
                },
                indent=1,
            )
        )
        return
    traits = [
        "additive (compressed allreduce and reduce-scatter allowed)"
        if additive
        else "not additive",
        "splittable" if splittable else "not splittable (alltoall by per-chunk compression)",
    ]
    typer.echo(f"{kind}: {', '.join(traits)}")
    typer.echo(
        f"{n['paths']:,} paths ({n['flat_paths']:,} flat, {n['hierarchical_paths']:,} "
        f"hierarchical), {n['options']:,} options with GPU/CPU placements "
        f"({n['flat_options']:,} flat, {n['hierarchical_options']:,} hierarchical)"
    )
    typer.echo(
        "phases level:collective (* compressed); gc/cc compress on GPU/CPU, gd/cd "
        "decompress; placements = 2^(operations)"
    )
    for o in every if show_all else paths:
        k = 2 ** len(o.ops)
        placements = "" if show_all else f"  [{k} placement{'s' if k > 1 else ''}]"
        typer.echo(f"  {o.name}{placements}")


def main() -> None:
    try:  # the click typer runs on: its own copy in recent versions
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions as cx  # type: ignore[no-redef]
    try:
        code = app(standalone_mode=False)
    except cx.NoArgsIsHelpError as e:  # a bare command: its help
        typer.echo(e.format_message())
        sys.exit(2)
    except cx.UsageError as e:  # a flag misspelt or mistyped: one line, as ours are
        where = e.ctx.command_path if e.ctx is not None else "gcbench"
        _err(f"{e.format_message()} (see {where} --help)")
        sys.exit(2)
    except cx.ClickException as e:
        _err(e.format_message())
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("interrupted", err=True)
        sys.exit(130)
    # without standalone mode click returns an Exit's code, or what a command returns
    # (gcbench's commands return None and end early with typer.Exit)
    sys.exit(code if isinstance(code, int) else 0)
