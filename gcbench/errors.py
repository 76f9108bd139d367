"""The one exception tree of gcbench.

    GcbenchError                 anything gcbench raises on purpose
    ├── ConfigError              bad input: suite YAML, CLI flags, unknown names
    │                            (carries one message per mistake, each `file:line: path: what`)
    ├── PlanError                a planner could not produce a plan
    ├── InfeasibleError          a cell that cannot run as configured (status `infeasible`)
    └── RunFailed                a run finished but some cells failed (`status` = exit code)

Library code raises these; only `gcbench/cli/` turns them into `error: ...` lines and an
exit code (2 for ConfigError, 1 for RunFailed).
"""

from __future__ import annotations

from typing import Any


class GcbenchError(Exception):
    """Base class of every error gcbench raises on purpose."""


class ConfigError(GcbenchError):
    """Bad input. `messages` holds one line per mistake, so all of them can be shown."""

    def __init__(self, messages: str | list[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


class PlanError(GcbenchError):
    """A planner could not produce a plan for a cell: what was asked of it (constraints
    that leave no option, brute force over too many tensors) cannot be done."""

    status = 2  # the cell's settings, as a ConfigError's


class InfeasibleError(GcbenchError):
    """A cell cannot run as configured (e.g. a strategy needs servers the cluster lacks)."""


class RunFailed(GcbenchError):
    """A run finished, but some of its cells failed; `status` is the exit code to use."""

    def __init__(self, message: str, status: int = 1):
        self.status = status
        super().__init__(message)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, SLURM and `docker stop` send) as an interrupt: a run stops
    as on Ctrl-C, its finished cells kept (`runner.local.connect` installs it)."""


def first_error(e: Any) -> str:
    """A pydantic ValidationError's first mistake as one line, `dotted.loc: message`
    (pydantic's "Value error, " prefix dropped; no location for a whole-model error)."""
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg
