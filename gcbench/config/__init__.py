"""Suites and cells: pydantic models, YAML loading with `file:line` errors, grid expansion.

Imports neither torch nor ray, so a bad suite is rejected in well under a second.
"""

from __future__ import annotations

import re
from pathlib import Path

from gcbench.compress.specs import PRESETS, CompressorSpec
from gcbench.config.filters import FILTER_KEYS, normalise_filter_value
from gcbench.config.grid import (
    MAX_CELLS,
    Expansion,
    FilterWarning,
    NoCellsLeft,
    check_size,
    expand,
    expand_counted,
    expand_suite,
    grid_points,
    iter_cells,
    matches,
    parse_only,
)
from gcbench.config.loader import load_model, read_yaml
from gcbench.config.models import (
    Cell,
    Cluster,
    Grid,
    ModelSpec,
    Network,
    Suite,
)

__all__ = [
    "PRESETS",
    "FILTER_KEYS",
    "MAX_CELLS",
    "Cell",
    "Cluster",
    "CompressorSpec",
    "Expansion",
    "FilterWarning",
    "Grid",
    "ModelSpec",
    "Network",
    "NoCellsLeft",
    "Suite",
    "check_size",
    "expand",
    "expand_counted",
    "expand_suite",
    "grid_points",
    "iter_cells",
    "load_suite",
    "matches",
    "normalise_filter_value",
    "parse_only",
    "read_yaml",
    "suite_schema",
    "where",
]


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file; ConfigError lists every mistake with its line."""
    return load_model(path, Suite)


def where(path: str | Path, loc: tuple[str | int, ...]) -> str:
    """`file:line: dotted.path` of `loc` in a suite file (for warnings about a loaded
    suite); just the file if it can no longer be read."""
    from gcbench.config.loader import locate
    from gcbench.errors import ConfigError

    try:
        _, node = read_yaml(path)
    except ConfigError:
        return str(path)
    line, dotted = locate(node, loc)
    return f"{path}:{line}: {dotted}"


def suite_schema() -> dict:
    """The JSON Schema of a suite file (committed as `schema/suite.schema.json`).

    Pydantic's schema describes the validated form; suites may also write a model or a
    compressor as a string and an axis as a single value, so those are added here.
    """
    from gcbench.compress.specs import KINDS
    from gcbench.zoo.catalog import model_names

    schema = Suite.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gcbench suite"
    axes = schema["$defs"]["Grid"]["properties"]
    axes["model"]["items"] = {
        "anyOf": [
            {"type": "string", "enum": model_names(), "description": "a zoo model, default batch"},
            axes["model"]["items"],
        ]
    }
    names = "|".join(map(re.escape, sorted({*KINDS, *PRESETS})))
    axes["compressor"]["items"] = {
        "anyOf": [
            {
                "type": "string",
                "description": "a preset name, kind:param=value,... or preset:param=value,...",
                "anyOf": [
                    {"enum": list(PRESETS)},
                    {"pattern": f"^({names})(:.*)?$"},
                ],
            },
            axes["compressor"]["items"],
        ]
    }
    for name, axis in list(axes.items()):
        title = axis.pop("title", name)
        axes[name] = {"title": title, "anyOf": [axis, axis["items"]]}
    # a network that names a profile takes its line rate from it (`Network._fill`)
    network = schema["$defs"]["Network"]
    network["required"] = [r for r in network.get("required", []) if r != "inter_gbps"]
    if not network["required"]:
        del network["required"]
    network["anyOf"] = [{"required": ["inter_gbps"]}, {"required": ["profile"]}]
    return schema
