"""What a suite's `include`, `exclude` and `--only` filters may test: a cell's flat config
columns (`FILTER_KEYS`), each value normalised through the cell's schema (`FILTER_VALUES`),
so that every spelling of a value matches the same cells (`normalise_filter_value`).
Torch-free, as the rest of `gcbench.config`."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from typing_extensions import TypedDict

from gcbench import strategies
from gcbench.compress.specs import KINDS, CompressorSpec
from gcbench.zoo.devices import DEVICES, PRECISIONS

# How gradients are fused into buckets: PyTorch DDP's (1 MiB, then 25 MiB), one bucket
# per tensor, or buckets of at most a fixed number of bytes.
FUSION_PATTERN = r"^(ddp|tensor|fixed:[1-9][0-9]{0,17})$"  # at most 10^18 bytes: 64 bits


def strategy_name(value: Any) -> str:
    """A registered strategy (`gcbench.strategies`: what each takes); an alias is stored
    under its canonical name, so its cells share their ids."""
    found = strategies.find(value) if isinstance(value, str) else None
    if found is None:
        raise ValueError(strategies.unknown(value))
    return found.name



# Keys a filter (`include`, `exclude`, `--only`) may test: the flat config columns of a cell.
FILTER_KEYS = (
    "model",
    "batch_size",
    "seq_len",
    "precision",
    "compressor",
    "compressor_kind",
    "strategy",
    "fusion",
    "machines",
    "gpus_per_machine",
    "gpus",
    "cpu_servers",
    "cpu_cores",
    "cpu_gbs",
    "summation_gbs",
    "intra",
    "intra_gbs",
    "inter_gbps",
    "nics_per_machine",
    "server_gbps",
    "device",
    "seed",
    "mode",
)


# A filter's values are normalised through the cell's schema, so that every spelling of a
# value matches the same cells: `10`, `"10"`, `10.0` and `1e1` (a string to YAML 1.1) are
# one bandwidth; a preset and its `kind:param` form one compressor (its `label()`); an
# alias one strategy. A value no cell could have (`machines: two`) is an error.
def _integer(value: Any) -> int:
    number: Any = value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                number = float(value.strip())
            except ValueError:
                raise ValueError(f"must be an integer, got {value!r}") from None
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        return int(number)
    if isinstance(number, int) and not isinstance(number, bool):
        return number
    raise ValueError(f"must be an integer, got {value!r}")


def _number(value: Any) -> float:
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        raise ValueError(f"must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {value!r}")
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


def _one_of(*choices: str) -> Any:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}; got {value!r}")
        return str(value)

    return check


_COMPRESSOR: TypeAdapter[Any] = TypeAdapter(CompressorSpec)


def _compressor(value: Any) -> str:
    """A compressor as the `compressor` column shows it: the preset it equals, else
    `kind:param=value,...` with every parameter (`compress.specs._Spec.label`); a mapping
    (`{kind: topk, ratio: 0.01}`) as the grid takes it."""
    if not isinstance(value, str | dict):
        raise ValueError(f"must be a preset, kind:param=value or a mapping, got {value!r}")
    try:
        return str(_COMPRESSOR.validate_python(value).label())
    except ValidationError as e:
        from gcbench.config.loader import message

        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"][1:])
        raise ValueError(f"{value!r}: {where + ': ' if where else ''}{message(err)}") from None


def _fusion(value: Any) -> str:
    if not (isinstance(value, str) and re.fullmatch(FUSION_PATTERN, value)):
        raise ValueError(f"must be ddp, tensor or fixed:<bytes>, got {value!r}")
    return value


_INTEGER = {"type": "integer"}
_NUMBER = {"anyOf": [{"type": "number"}, {"type": "string"}]}
_STRING = {"type": "string"}
FILTER_VALUES: dict[str, tuple[Any, dict[str, Any]]] = {
    "model": (_text, _STRING),
    "batch_size": (_integer, _INTEGER),
    "seq_len": (_integer, _INTEGER),
    "precision": (_one_of(*PRECISIONS), {"enum": list(PRECISIONS)}),
    "compressor": (_compressor, {"anyOf": [_STRING, {"type": "object"}]}),
    "compressor_kind": (_one_of(*KINDS), {"enum": list(KINDS)}),
    "strategy": (strategy_name, _STRING),
    "fusion": (_fusion, _STRING),
    "machines": (_integer, _INTEGER),
    "gpus_per_machine": (_integer, _INTEGER),
    "gpus": (_integer, _INTEGER),
    "cpu_servers": (_integer, _INTEGER),
    "cpu_cores": (_integer, _INTEGER),
    "cpu_gbs": (_number, _NUMBER),
    "summation_gbs": (_number, _NUMBER),
    "intra": (_one_of("nvlink", "pcie"), {"enum": ["nvlink", "pcie"]}),
    "intra_gbs": (_number, _NUMBER),
    "inter_gbps": (_number, _NUMBER),
    "nics_per_machine": (_integer, _INTEGER),
    "server_gbps": (_number, _NUMBER),
    "device": (_one_of(*DEVICES), {"enum": list(DEVICES)}),
    "seed": (_integer, _INTEGER),
    "mode": (_one_of("simulate", "emulate"), {"enum": ["simulate", "emulate"]}),
}
assert tuple(FILTER_VALUES) == FILTER_KEYS


def normalise_filter_value(key: str, value: Any) -> Any:
    """A filter's value (or list of values) for `key` as the cell's flat column holds it;
    ValueError says why a value is not one."""
    check = FILTER_VALUES[key][0]
    if not isinstance(value, list):
        return check(value)
    if not value:
        raise ValueError("an empty list matches no cell; give at least one value")
    out = []
    for i, item in enumerate(value):
        try:
            out.append(check(item))
        except ValueError as e:
            raise ValueError(f"item {i}: {e}") from None
    return out


def _filter_field(key: str) -> Any:
    schema = FILTER_VALUES[key][1]
    return Annotated[
        Any,
        PlainValidator(lambda value: normalise_filter_value(key, value)),
        WithJsonSchema({"anyOf": [schema, {"type": "array", "items": schema, "minItems": 1}]}),
    ]


FilterSpec = TypedDict(  # type: ignore[misc]
    "FilterSpec", {key: _filter_field(key) for key in FILTER_KEYS}, total=False
)
FilterSpec.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]


def _check_filter(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    bad = [k for k in value if k not in FILTER_KEYS]
    if bad:
        raise ValueError(f"unknown filter key {bad[0]!r}; valid: {', '.join(FILTER_KEYS)}")
    if not value:
        raise ValueError("an empty filter; give at least one key, e.g. {machines: 1}")
    return value


Filter = Annotated[FilterSpec, BeforeValidator(_check_filter)]
