"""Plan files: `gcbench simulate --plan PLAN.json` times any plan.

Accepted: the plan record gcbench writes (`gcbench plan --json` prints it under "plan";
`gcbench run` stores it as `plans/<cell-id>.json.gz`), format `gcbench-plan`, version 1.
A plan's tensors must be the cell's model's tensors, by name and in gradient order, and
its buckets must cover them in that order; every option must be in the compressor's
option space (`sim.options.check`). Any mistake is one ConfigError line naming the file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from gcbench.errors import ConfigError
from gcbench.sim.iteration import Plan
from gcbench.sim.options import Option, check
from gcbench.zoo.profile import ModelProfile

MAX_BYTES = 64 * 2**20  # a plan of a million tensors is well under this


def _load(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError([f"{path}: cannot read the plan ({e.strerror or e})"]) from None
    if len(raw) > MAX_BYTES:
        raise ConfigError([f"{path}: larger than {MAX_BYTES // 2**20} MiB; not a plan"])
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, ValueError) as e:
        raise ConfigError([f"{path}: not JSON ({str(e).splitlines()[0]})"]) from None
    if isinstance(data, dict) and "plan" in data and "format" not in data:
        data = data["plan"]  # `gcbench plan --json` output
    return data


def read_plan_file(
    path: str | Path, profile: ModelProfile, *, additive: bool, compressor: str
) -> Plan:
    """The Plan in `path` for `profile`, checked against the compressor's option space."""
    path = Path(path)
    data = _load(path)
    if not isinstance(data, dict) or data.get("format") != "gcbench-plan":
        raise ConfigError([f"{path}: not a gcbench plan (no \"format\": \"gcbench-plan\")"])
    if data.get("version") != 1:
        raise ConfigError([f"{path}: plan version {data.get('version')!r}; this gcbench reads 1"])
    try:
        names = [str(t["name"]) for t in data["tensors"]]
        buckets = [[int(i) for i in b["tensors"]] for b in data["buckets"]]
        texts = [str(b["option"]) for b in data["buckets"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError([f"{path}: malformed plan ({type(e).__name__}: {e})"]) from None
    want = [t.name for t in profile.tensors]
    if names != want:
        first = next(
            (i for i, (a, b) in enumerate(zip(names, want, strict=False)) if a != b),
            min(len(names), len(want)),
        )
        raise ConfigError(
            [
                f"{path}: the plan's {len(names)} tensors are not {profile.name}'s "
                f"{len(want)} (first difference at tensor {first})"
            ]
        )
    if [i for b in buckets for i in b] != list(range(len(want))):
        raise ConfigError(
            [f"{path}: the buckets must hold every tensor once, in gradient order"]
        )
    options: list[Option | None] = []
    for text in texts:
        try:
            option = Option.parse(text)
            check(option, additive=additive, compressor=compressor)
        except ConfigError as e:
            raise ConfigError([f"{path}: {e.messages[0]}"]) from None
        options.append(option)
    return Plan(buckets, options)
