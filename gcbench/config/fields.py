"""The field types a suite's models share: numbers within the ranges the simulator
computes with, whole numbers that refuse YAML's booleans and strings, frozen models that
forbid unknown keys, and the paths a suite names (`models`, `network_profile`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from gcbench.compress.specs import NOT_BOOL
from gcbench.zoo.devices import DEVICES

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# Ranges of the numbers of a cell. Bandwidths in GB/s or Gbit/s: 1e-6 (a kB/s) to 1e6 (a
# PB/s); latencies up to a second per step; efficiencies at least 1%. Cluster sizes: at
# most 2^20 GPUs in all (the largest clusters today hold ~10^5), so that the bytes a GPU
# sends per iteration stay within 64 bits for any model a profile may hold.
MIN_RATE, MAX_RATE = 1e-6, 1e6
MAX_LATENCY_US = 1e6
MIN_EFFICIENCY = 0.01
MAX_GPUS = 2**20
MAX_GPUS_PER_MACHINE = 1024
MAX_NICS = 1024
MAX_CORES = 2**20


def at_least(minimum: float) -> AfterValidator:
    """A lower bound checked after `gt=0`, so that a value <= 0 still says `must be > 0`."""

    def check(value: float | None) -> float | None:
        if value is not None and value < minimum:
            raise ValueError(f"must be ≥ {minimum:g}, got {value!r}")
        return value

    return AfterValidator(check)


def whole(value: Any) -> Any:
    """pydantic would read YAML's `true` as 1 and `"2"` as 2: a count or a seed is a number."""
    if isinstance(value, (bool, str)):
        raise ValueError(f"must be a whole number, got {value!r}")
    return value


WHOLE = BeforeValidator(whole)
Whole = Annotated[int, WHOLE]

Rate = Annotated[float, Field(gt=0, le=MAX_RATE), at_least(MIN_RATE), NOT_BOOL]
Latency = Annotated[float, Field(ge=0, le=MAX_LATENCY_US), NOT_BOOL]
Efficiency = Annotated[float, Field(gt=0, le=1), at_least(MIN_EFFICIENCY), NOT_BOOL]
DeviceName = Literal[
    "v100", "p100", "a100", "a100-80g", "h100", "h200", "rtx2080ti", "rtx3090", "a10", "t4", "cpu"
]
assert set(DeviceName.__args__) == set(DEVICES)  # type: ignore[attr-defined]


class Frozen(BaseModel):
    # No inf/nan anywhere: JSON (the cell's form on a Ray worker) cannot carry them.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def suite_path(name: str, base_dir: Path | None) -> Path:
    """A file a suite names: `~` expanded, relative to the suite file's folder, resolved."""
    path = Path(name).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    return path.resolve()
