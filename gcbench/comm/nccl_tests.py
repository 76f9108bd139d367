"""nccl-tests' `*_perf` output read as is: its out-of-place (bytes, seconds) rows, its
ranks and hosts, and the collective its header names (`gcbench calibrate` fits them)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gcbench.errors import ConfigError

# The least measured value a point may hold (a nanosecond; a fit weighs each point by
# 1/value², which a smaller one overflows)
MIN_MEASURED = 1e-9

# nccl-tests' size is the whole buffer: a gather table has allgather's shape (every rank's
# share reaches one root, (n-1)/n of the buffer); sendrecv, scatter and hypercube are not
# collectives gcbench models.
_COLLECTIVE_OF = {"all_reduce": "allreduce", "all_gather": "allgather",
                  "reduce_scatter": "reduce_scatter", "alltoall": "alltoall",
                  "broadcast": "broadcast", "reduce": "reduce", "gather": "allgather"}  # fmt: skip


@dataclass
class NcclRun:
    collective: str | None
    ranks: int | None
    hosts: int
    points: list[tuple[float, float]]  # (bytes, out-of-place seconds)


def is_nccl_output(text: str) -> bool:
    return bool(re.search(r"^#\s+size\s+count\s+type", text, re.M))


def parse_nccl_tests(text: str, where: str) -> NcclRun:
    """The out-of-place (bytes, seconds) rows of an nccl-tests `*_perf` output, its ranks
    (one `#  Rank` line each) and hosts, and the collective its header names."""
    names: list[str] | None = None
    points: list[tuple[float, float]] = []
    ranks, hosts = 0, set()
    collective = None
    started = 0  # the first line of the run (its settings, its name or its header)
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(r"#\s*(Collective test starting|nThread|\s*size\s+count)", line):
            if points:  # another run after this one's rows (`cat a.txt b.txt`)
                raise ConfigError(
                    f"{where}:{number}: two nccl-tests runs in one file (the first from "
                    f"line {started}); give each run a file of its own"
                )
            started = started or number
        if m := re.match(r"#\s*Collective test starting:\s*(\w+?)_perf", line):
            collective = _COLLECTIVE_OF.get(m.group(1))
            if collective is None:
                raise ConfigError(
                    f"{where}:{number}: {m.group(1)}_perf: gcbench models "
                    f"{', '.join(t + '_perf' for t in _COLLECTIVE_OF)}"
                )
        elif m := re.match(r"#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)", line):
            ranks += 1
            hosts.add(m.group(1))
        elif re.match(r"#\s+size\s+count\s+type", line):
            names = line.lstrip("#").split()
            if "time" not in names:
                raise ConfigError(
                    f"{where}:{number}: the header has no 'time' column: not an nccl-tests "
                    "result table"
                )
        elif names and line.strip() and not line.startswith("#"):
            cells = line.split()
            if len(cells) < names.index("time") + 1 or not cells[0].isdigit():
                continue  # "# Out of bounds values", "# Avg bus bandwidth" and the like
            try:
                size, micros = float(cells[0]), float(cells[names.index("time")])
            except ValueError:
                raise ConfigError(
                    f"{where}:{number}: cannot read size and time from {line.strip()!r}"
                ) from None
            if not (math.isfinite(size) and math.isfinite(micros)):
                raise ConfigError(
                    f"{where}:{number}: size {cells[0]} or time {micros:g} is not a finite number"
                )
            if 0 < micros < MIN_MEASURED * 1e6:
                raise ConfigError(
                    f"{where}:{number}: time {micros:g} us is under a nanosecond: not a "
                    "measurement"
                )
            if size > 0 and micros <= 0:
                raise ConfigError(
                    f"{where}:{number}: time {micros:g} us for {cells[0]} bytes: not a "
                    "measurement"
                )
            if size > 0:  # a size-0 row moves nothing: not a point
                points.append((size, micros * 1e-6))
    if names is None or not points:
        raise ConfigError(
            f"{where}: no nccl-tests result rows (a '#  size  count  type ...' header and rows)"
        )
    return NcclRun(collective, ranks or None, len(hosts) or 1, points)
