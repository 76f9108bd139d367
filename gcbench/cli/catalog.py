"""Catalog commands: the shipped `networks`, `devices` and zoo `models`, one zoo `model`'s
profile, and `profile` (a model measured on this host)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli.common import JSON_HELP, app, check_torch_device, dumps, errors, writable
from gcbench.cli.progress import iteration_bar
from gcbench.errors import ConfigError


@app.command()
def networks(
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    sources: Annotated[
        bool, typer.Option("--sources", help="Each preset's values and its whole source.")
    ] = False,
) -> None:
    """List the shipped network profiles (suites: `network: {profile: NAME}`; simulate:
    --network NAME): a table of their links, each with the first sentence of where its
    numbers come from (--sources: all of it)."""
    from gcbench.config.network_profile import preset_names, read_network_profile

    rows = []
    for name in preset_names():
        profile, _, digest = read_network_profile(name)
        rows.append({**profile.model_dump(exclude_none=True), "sha256": digest})
    if json_out:
        typer.echo(dumps(rows, indent=1))
        return
    if sources:
        for r in rows:
            values = " ".join(f"{k}={v}" for k, v in r["network"].items())
            extra = f" compute_scale={r['compute_scale']:g}" if r["compute_scale"] != 1 else ""
            typer.echo(f"{r['name']}: {values}{extra}")
            typer.echo(f"  {r['source']}")
        return
    typer.echo(f"{'preset':<21} {'inside a machine':<28} {'across machines':<32} collectives")
    for r in rows:
        inside, across, model = _links(r["network"])
        typer.echo(f"{r['name']:<21} {inside:<28} {across:<32} {model}")
        typer.echo(f"  {_first_sentence(r['source'])}")
    typer.echo("(latency a collective step, efficiency of the line rate; the profile's other "
               "values and each one's source: gcbench networks --sources)")  # fmt: skip


def _links(network: dict[str, Any]) -> tuple[str, str, str]:
    """A preset's links in words, the network model's defaults where it sets none."""
    from gcbench.config.models import Network

    def value(key: str) -> Any:
        return network.get(key, Network.model_fields[key].default)

    rate = network.get("intra_gbs")
    inside = (f"{value('intra')} {f'{rate:g} GB/s' if rate else '(device)'}, "
              f"{value('intra_latency_us'):.3g} us, {value('intra_efficiency'):.2g}")  # fmt: skip
    across = "-"
    if "inter_gbps" in network:
        nics = value("nics_per_machine")
        many = f" ({nics} NICs)" if nics > 1 else ""
        across = (f"{network['inter_gbps']:g} Gb/s{many}, {value('inter_latency_us'):.3g} us, "
                  f"{value('inter_efficiency'):.2g}")  # fmt: skip
    return inside, across, str(value("collectives"))


def _first_sentence(text: str, most: int = 200) -> str:
    """`text` up to its first full stop that ends a sentence, at most `most` characters."""
    import re

    end = re.search(r"[A-Za-z0-9)]\.(\s|$)", text)
    first = text[: end.start() + 2].strip() if end else text
    return first if len(first) <= most else first[: most - 1].rstrip() + "…"


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
        typer.echo(dumps([asdict(d) for d in DEVICES.values()], indent=1))
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
        typer.echo(dumps(rows, indent=2))
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


def _shape(name: str, batch: int | None, seq_len: int | None) -> None:
    """--batch and --seq-len as a suite's model takes them (`ModelSpec`'s bounds: beyond
    them torch overflows its storage size, a traceback), --seq-len on a sequence model."""
    from gcbench.config.models import MAX_BATCH, MAX_SEQ_LEN
    from gcbench.zoo.catalog import MODELS

    for value, flag, most in ((batch, "--batch", MAX_BATCH), (seq_len, "--seq-len", MAX_SEQ_LEN)):
        _positive(value, flag)
        if value is not None and value > most:
            raise ConfigError([f"{flag} must be ≤ {most:,}, got {value:,}"])
    if seq_len is not None and MODELS[name].seq_len is None:
        raise ConfigError([f"--seq-len: {name} is not a sequence model"])


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
    precision: Annotated[
        str,
        typer.Option(
            "--precision",
            help="fp32 (torch's defaults), tf32, amp-fp16 or amp-bf16 (autocast).",
        ),
    ] = "fp32",
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Show a zoo model's FLOP-based profile: parameters, fp32 size, forward, backward and
    update times on a device at a precision, and every gradient tensor in the order it
    becomes ready."""
    with errors():
        from gcbench.zoo.devices import DEVICES

        _known_model(name)
        _shape(name, batch, seq_len)
        if device not in DEVICES:
            raise ConfigError([f"unknown device {device!r}; valid: {', '.join(sorted(DEVICES))}"])
        from gcbench.zoo.devices import PRECISIONS

        if precision not in PRECISIONS:
            raise ConfigError([f"--precision: must be one of {', '.join(PRECISIONS)}, got "
                               f"{precision!r}"])  # fmt: skip
        if precision == "amp-bf16" and not DEVICES[device].bf16():
            raise ConfigError([f"--precision amp-bf16: {device} has no BF16 tensor cores"])
        from gcbench.zoo.profile import model_profile
        from gcbench.zoo.profile_io import to_json

        p = model_profile(name, batch, device, seq_len, precision)
    if json_out:
        out = to_json(p)
        out.update(params=p.numel, mib=p.numel * 4 / 2**20, backward_s=p.backward_s)
        typer.echo(dumps(out, indent=1))
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
    with errors():
        _known_model(name)
        _shape(name, batch, seq_len)
        _positive(iterations, "--iterations")
        if warmup < 0:
            raise ConfigError([f"--warmup must be >= 0, got {warmup}"])
        check_torch_device(torch_device)
        from gcbench.zoo.measure import measure_profile
        from gcbench.zoo.profile_io import write_profile

        target = out or Path("profiles") / f"{name}-{torch_device.replace(':', '')}.json"
        writable(target, "--out")
        with iteration_bar(f"profile {name}") as tick:
            p = measure_profile(name, batch, seq_len, torch_device, warmup, iterations, tick)
        write_profile(p, target)
    _print_profile(p, p.numel)
    typer.echo(f"\nprofile: {target}")


@app.command()
def cache(
    clear: Annotated[
        bool, typer.Option("--clear", help="Remove every cached trace (they are made again).")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Show where gcbench caches model traces (GCBENCH_CACHE, else XDG_CACHE_HOME, else
    ~/.cache: gcbench/traces), how many and how large; --clear empties it. A trace is
    traced again when the cache has none, or one of another gcbench or torch."""
    from gcbench.zoo.traces import cache_dir

    folder = cache_dir()
    files = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    size = sum(f.stat().st_size for f in files)
    removed = 0
    if clear:
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
                removed += 1
    if json_out:
        typer.echo(dumps({"folder": str(folder), "traces": len(files), "bytes": size,
                          "removed": removed}))  # fmt: skip
        return
    typer.echo(f"{folder}: {len(files)} cached trace{'s' * (len(files) != 1)}, "
               f"{size / 2**20:.1f} MiB" + (f"; removed {removed}" if clear else ""))  # fmt: skip
