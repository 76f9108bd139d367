"""Suites and cells: pydantic models, YAML loading with `file:line` errors, grid expansion.

Imports neither torch nor ray, so a bad suite is rejected in well under a second.
"""

from __future__ import annotations

from pathlib import Path

from gcbench.compress.specs import PRESETS, CompressorSpec
from gcbench.config.grid import expand, expand_counted, matches, parse_only
from gcbench.config.loader import load_model, read_yaml
from gcbench.config.models import FILTER_KEYS, Cell, Cluster, Grid, ModelSpec, Network, Suite

__all__ = [
    "PRESETS",
    "FILTER_KEYS",
    "Cell",
    "Cluster",
    "CompressorSpec",
    "Grid",
    "ModelSpec",
    "Network",
    "Suite",
    "expand",
    "expand_counted",
    "load_suite",
    "matches",
    "parse_only",
    "read_yaml",
    "suite_schema",
]


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file; ConfigError lists every mistake with its line."""
    return load_model(path, Suite)


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
    axes["compressor"]["items"] = {
        "anyOf": [
            {
                "type": "string",
                "description": "a preset name or kind:param=value,...",
                "anyOf": [
                    {"enum": list(PRESETS)},
                    {"pattern": "^(" + "|".join(KINDS) + ")(:.*)?$"},
                ],
            },
            axes["compressor"]["items"],
        ]
    }
    for name, axis in list(axes.items()):
        title = axis.pop("title", name)
        axes[name] = {"title": title, "anyOf": [axis, axis["items"]]}
    return schema
