"""What a cell chooses from: `compressors`, `strategies`, `options` (ByteComp's option
space for one compressor) and `bench compressors` (their costs measured on this host)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli.common import JSON_HELP, app, check_torch_device, dumps, errors, writable
from gcbench.cli.progress import iteration_bar
from gcbench.errors import ConfigError

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
    with errors():
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
            writable(out, "--out")
        if device is not None:
            from gcbench.zoo.devices import DEVICES

            if device not in DEVICES or device == "cpu":
                gpus = ", ".join(d for d in DEVICES if d != "cpu")
                raise ConfigError([f"--device: unknown GPU {device!r}; valid: {gpus}"])
            table = gpu_table(device)
        else:
            size_list = _sizes(sizes)
            check_torch_device(torch_device)
            with iteration_bar("bench compressors") as tick:
                done = [0]
                total = len(chosen) * len(size_list)

                def point(_name: str, _n: int) -> None:
                    done[0] += 1
                    tick(done[0], total)

                table = measure(chosen, size_list, torch_device, point)
        data = table.to_json()
        if out is not None:
            from gcbench.files import atomic_write

            atomic_write(out, (dumps(data, indent=1) + "\n").encode())
    if json_out:
        typer.echo(dumps(data, indent=1))
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


@app.command()
def compressors(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List compressor kinds with their parameters and properties (family, additive,
    splittable, rounds, data-dependent wire size), and the named presets. Every kind
    but the casts and acpsgd also takes `ef=false`: error feedback off."""
    from gcbench.compress.registry import REGISTRY, names
    from gcbench.compress.specs import KINDS, NO_EF_CHOICE, PRESETS

    names()  # load every family
    kinds = {
        k: {
            n: (None if f.is_required() else f.default)
            for n, f in t.model_fields.items()
            if n not in ("kind", "ef")
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
    presets = {name: spec.model_dump(exclude={"ef"}) for name, spec in PRESETS.items()}
    if json_out:
        out = {"kinds": kinds, "properties": props, "presets": presets}
        typer.echo(dumps(out, indent=2))
        return
    typer.echo("kinds (parameters and defaults; on the command line: kind:param=value):")
    for k, params in kinds.items():
        p = props[k]
        flags: list[str] = [p["family"]] + [f for f in ("additive", "splittable") if p[f]]
        flags += [f"{p['rounds']} rounds"] if p["rounds"] > 1 else []
        flags += ["data-dependent size"] if p["data_dependent"] else []
        args = ", ".join(f"{n}={v}" for n, v in params.items())
        typer.echo(f"  {k:<10} {args:<50} [{', '.join(flags)}]")
    off = ", ".join(NO_EF_CHOICE)
    typer.echo(f"  every kind but {off} also takes ef=false: its error feedback off;")
    typer.echo("  a preset takes replacements too: topk-1pct:ef=false, dgc-1pct:ratio=0.05")
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

    with errors():
        rows = [s.info() for s in strategies.registry().values()]
        plugins = strategies.plugins()
    if json_out:
        typer.echo(dumps(rows, indent=1))
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
    with errors():
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
            dumps(
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
