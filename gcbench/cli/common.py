"""What every command shares: the typer `app`, the error lines and exit codes (`errors`),
strict JSON (`dumps`) and the checks several commands make before any work."""

from __future__ import annotations

import contextlib
import json
import math
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

state = {"debug": False}


def print_error(line: str) -> None:
    typer.echo(f"error: {line}", err=True)


def by_ctrl_c(e: BaseException, kind: type[BaseException] = KeyboardInterrupt) -> bool:
    """Whether `e` is Ctrl-C (or SIGTERM, `errors.Terminated`), or an error Ctrl-C caused:
    a KeyboardInterrupt raised inside a library's callback comes back wrapped (pydantic's
    serializer turns one into a PydanticSerializationError whose cause it is). `kind`:
    that kind of interrupt only."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        if isinstance(x, kind):
            return True
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return False


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Turn gcbench's errors into one line each and an exit code."""
    try:
        yield
    except ConfigError as e:
        if state["debug"]:
            raise
        for line in e.messages:
            print_error(line)
        raise typer.Exit(2) from None
    except GcbenchError as e:
        if state["debug"]:
            raise
        print_error(str(e))
        raise typer.Exit(getattr(e, "status", 1)) from None


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks; re-raise failures.")
    ] = False,
) -> None:
    state["debug"] = debug


# Both `run` and `validate` refuse a grid larger than this before expanding it.
MAX_CELLS = typer.Option(
    "--max-cells",
    min=1,
    help="Refuse a suite whose grid has more points than this (counted from the axis "
    "lengths, before anything is expanded; 10^6 cells take about 1.3 GB and 20 s).",
)


def opt(flag: str, help: str) -> Any:
    """A typer option whose help shows no default (the help text says it)."""
    return typer.Option(flag, help=help, show_default=False)


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


def dumps(data: Any, indent: int | None = None, default: Any = None) -> str:
    """Strict JSON text of `data` (see JSON_HELP)."""
    if default is not None:  # objects json cannot write, as `default` renders them
        data = json.loads(json.dumps(data, default=default))
    return json.dumps(_finite(data), indent=indent, allow_nan=False)


def writable(path: Path, flag: str) -> None:
    """Check, before any work, that `atomic_write` can put a file at `path`
    (`files.check_writable`); ConfigError: one line naming `flag`."""
    from gcbench.files import check_writable

    check_writable(path, flag, file=True)


def check_torch_device(text: str) -> str:
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
