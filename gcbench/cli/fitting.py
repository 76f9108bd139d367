"""Fitting commands: `calibrate` (a network profile fitted to measured points) and
`reproduce` (the papers' published figures, fitted on one and predicted on the others)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gcbench.cli.common import JSON_HELP, app, dumps, errors, opt


@app.command()
def calibrate(
    points: Annotated[
        Path | None,
        typer.Argument(
            help="Measurements: a POINTS YAML file (docs/calibration.md) or an nccl-tests "
            "*_perf output, read as is (or --from a measured run)."
        ),
    ] = None,
    from_run: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="A run folder of measured cells (mode: measure): fit on every other cell, "
            "score on the rest, and print both errors beside the default's.",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the fitted network profile here.")
    ] = None,
    fit: Annotated[
        str,
        typer.Option(
            "--fit",
            help="Parameters to fit, comma-separated: inter_efficiency, inter_latency_us, "
            "intra_efficiency, intra_latency_us, compute_scale, iteration_overhead_us, "
            "bucket_overhead_us, compute_jitter, compute_contention; with --collectives "
            "nccl also nccl_ll_bandwidth, nccl_ll128_bandwidth (NCCL's LL and LL128 "
            "bandwidths, from a sweep across sizes).",
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
        opt(
            "--inter-gbps",
            "The machines' line rate the points were measured at (Gbit/s), "
            "over POINTS' and --network's.",
        ),
    ] = None,
    collectives: Annotated[
        str | None,
        opt(
            "--collectives",
            "How the points' collectives are costed: ring or nccl (NCCL's algorithm and "
            "protocol for the size), over POINTS' and --network's (default ring).",
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
    from gcbench.errors import ConfigError
    from gcbench.files import atomic_write, check_writable

    params = [p.strip() for p in fit.split(",") if p.strip()]
    if from_run is not None or points is None:
        _calibrate_from(points, from_run, params, out, json_out)
        return
    with errors():
        if out is not None:
            check_writable(out, "--out", file=True)
            if out.exists() and points.exists() and out.resolve() == points.resolve():
                raise ConfigError([f"--out: {out} is POINTS itself: writing the profile "
                                   "there would lose the points; name another file"])
        fitted = cal.calibrate(points, params, network, inter_gbps, collectives)
        if out is not None:
            atomic_write(out, dump_network_profile(fitted).encode())
    profile = fitted.model_dump(exclude_none=True)
    if json_out:
        typer.echo(dumps(profile, indent=1))
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
    for p in report.get("weakly_identified", []):
        typer.echo(
            f"warning: the points barely identify {p} (a 10% change moves no prediction by "
            "1%): its value is not a measurement; add points it moves (small messages "
            "for a latency, large ones for an efficiency)",
            err=True,
        )
    for p in report["bound_hits"]:
        typer.echo(
            f"warning: {p} ended on a bound of its range; the points may want a value "
            "gcbench does not allow (check the line rates)",
            err=True,
        )
    if out is not None:
        typer.echo(f"profile: {out}")


def _calibrate_from(points: Path | None, run: Path | None, params: list[str],
                    out: Path | None, json_out: bool) -> None:  # fmt: skip
    """`calibrate --from RUN`: fitted on some measured cells, scored on the others."""
    from gcbench.calibrate_run import from_run
    from gcbench.config.network_profile import dump_network_profile
    from gcbench.errors import ConfigError
    from gcbench.files import atomic_write, check_writable

    with errors():
        if (points is None) == (run is None):
            raise ConfigError(["give POINTS or --from RUN, one of them"])
        assert run is not None
        if out is not None:
            check_writable(out, "--out", file=True)
        profile, report = from_run(run, params)
        if out is not None:
            atomic_write(out, dump_network_profile(profile).encode())
    if json_out:
        typer.echo(dumps(profile.model_dump(exclude_none=True), indent=1))
        return
    values = ", ".join(f"{k} = {v:g}" for k, v in report["parameters"].items())
    typer.echo(f"fitted {values} on {report['fitted_on']} measured cells; scored on "
               f"{report['scored_on']} others")  # fmt: skip
    for split in ("out_of_sample", "in_sample"):
        e = report[split]
        typer.echo(f"  {split.replace('_', ' ')}: median |error| {e['default']:.1%} with the "
                   f"cells' own network, {e['fitted']:.1%} fitted")  # fmt: skip
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

    from gcbench import repro
    from gcbench.files import check_writable

    with errors():
        check_writable(out, "--out")
        causes = repro.load_causes(published)  # checked before any figure is simulated
        rows, fits = repro.reproduce(published, only)
        page = repro.write_page(rows, fits, causes, out)
    s = repro.summary(rows)
    if json_out:
        typer.echo(dumps({"summary": s, "fits": fits, "figures": repro.rows_json(rows)}, indent=1))
        return
    med = s["median_abs_error_out_of_sample"]
    typer.echo(
        f"{s['figures']} figures, {s['expressible']} expressible, {s['out_of_sample']} out of "
        f"sample: median |error| {'n/a' if med is None else f'{med:.1%}'}, "
        f"{len(s['beyond_25pct'])} beyond 25%"
    )
    for name, f in fits.items():
        values = ", ".join(f"{k} = {v:.4g}" for k, v in f["parameters"].items())
        typer.echo(f"  {name}: fitted on {f['figure']}: {values}; {repro.testbed_line(name, s)}")
        if "consistency" in f:
            typer.echo(f"    {repro.consistency_line(f['consistency'], short=True)}")
    for r in rows:
        if r.error is not None:
            mark = " (in sample)" if r.in_sample else ""
            typer.echo(
                f"  {r.error:+7.1%}  {r.published:10.4g} → {r.predicted:10.4g}  "
                f"{repro.unit_of(r.metric):<24s} {r.id}{mark}"
            )
    typer.echo(f"page: {page}")
