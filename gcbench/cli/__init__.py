"""The `gcbench` command: parse, call the library, render. The only place that prints or
exits (STYLE §7): ConfigError -> `error: file:line: ...` and exit 2; failed cells -> exit
1; Ctrl-C -> exit 130. `--debug` shows tracebacks instead.

One module per group of commands, each registering its commands on `app` (`common`) when
imported here, in the order `gcbench --help` lists them: `runs` (run, validate, schema,
report), `fitting` (calibrate, reproduce), `catalog` (networks, devices, models, model,
profile, cache), `cells` (simulate, plan), `choices` (compressors, strategies, options,
bench).
Every module imports only typer, the standard library, `gcbench.errors` and its siblings
at its top: the rest of gcbench, and pandas, torch and Ray, are imported by the command
that needs them (`gcbench --help` and `gcbench validate` stay light).
"""

from __future__ import annotations

import sys

import typer

# importing a command module registers its commands on `app`, in the order of --help
from gcbench.cli import runs, fitting, catalog, cells, choices  # noqa: F401  # isort: skip
from gcbench.cli.cells import CLUSTER_FLAGS, NETWORK_FLAGS, NETWORK_UNFLAGGED, STRATEGY_HELP
from gcbench.cli.common import app, by_ctrl_c, print_error

__all__ = [
    "CLUSTER_FLAGS",
    "NETWORK_FLAGS",
    "NETWORK_UNFLAGGED",
    "STRATEGY_HELP",
    "app",
    "main",
]


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
        print_error(f"{e.format_message()} (see {where} --help)")
        sys.exit(2)
    except cx.ClickException as e:
        print_error(e.format_message())
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as e:
        if not by_ctrl_c(e):
            raise
        typer.echo("interrupted", err=True)
        sys.exit(130)
    # without standalone mode click returns an Exit's code, or what a command returns
    # (gcbench's commands return None and end early with typer.Exit)
    sys.exit(code if isinstance(code, int) else 0)
