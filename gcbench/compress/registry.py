"""Compressors by name: `create("topk", ratio=0.01)`, presets, and the family modules."""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ValidationError

from gcbench.compress.base import Compressor, Memory
from gcbench.compress.specs import KINDS, PRESETS
from gcbench.errors import ConfigError

REGISTRY: dict[str, type[Compressor]] = {}
MEMORIES: dict[str, type[Memory]] = {}
FAMILY_MODULES = (
    "cast",
    "sparsify",
    "quantize",
    "stochastic",
    "threelc",
    "lowrank",
    "covap",
    "memory",
)


def register(cls: type[Compressor]) -> type[Compressor]:
    """Class decorator: make a compressor available to `create` under `cls.name`."""
    REGISTRY[cls.name] = cls
    return cls


def register_memory(cls: type[Memory]) -> type[Memory]:
    MEMORIES[cls.name] = cls
    return cls


def _load() -> None:
    for module in FAMILY_MODULES:
        importlib.import_module(f"gcbench.compress.{module}")


def _spec_params(name: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Validate against the suite specs (`gcbench.compress.specs`): the same names,
    presets, defaults and ranges everywhere. Raises ConfigError listing what is valid."""
    if name in PRESETS and not params:
        spec = PRESETS[name]
        return spec.kind, spec.params()  # type: ignore[attr-defined]
    if name not in KINDS:
        raise ConfigError(
            [
                f"unknown compressor {name!r}; kinds: {', '.join(KINDS)}; "
                f"presets: {', '.join(PRESETS)}"
            ]
        )
    try:
        spec = KINDS[name].model_validate({"kind": name, **params})
    except ValidationError as e:
        lines = []
        fields = KINDS[name].model_fields
        valid = ", ".join(f for f in fields if f not in ("kind", "ef")) or "none"
        for err in e.errors():
            where = ".".join(str(x) for x in err["loc"])
            if err["type"] == "extra_forbidden":
                lines.append(f"compressor {name}: unknown parameter {where!r}; valid: {valid}")
                continue
            ranges = _describe(fields.get(str(err["loc"][0]))) if err["loc"] else ""
            lines.append(f"compressor {name}: {where}: {err['msg']}{ranges}")
        raise ConfigError(lines) from None
    return name, spec.params()


def _describe(field: Any) -> str:
    if field is None:
        return ""
    bounds = []
    for m in field.metadata:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(m, attr, None) is not None:
                bounds.append(f"{sym} {getattr(m, attr)}")
    return f" (valid: {' and '.join(bounds)})" if bounds else ""


def create(name: str, **params: Any) -> Compressor:
    """Build a compressor from a kind and its parameters, or from a preset name."""
    kind, checked = _spec_params(name, params)
    _load()
    return REGISTRY[kind](**checked)


def create_memory(name: str, **params: Any) -> Memory:
    _load()
    if name not in MEMORIES:
        raise ConfigError([f"unknown memory {name!r}; valid: {', '.join(sorted(MEMORIES))}"])
    return MEMORIES[name](**params)


def names() -> list[str]:
    _load()
    return sorted(REGISTRY)
