"""Check a Ray cluster-launcher file against the JSON Schema that Ray ships.

Ray's package is located without importing it (`ray/autoscaler/ray-schema.json`), and
each schema error is reported at its line in the file.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from gcbench.config.loader import locate, read_yaml
from gcbench.errors import ConfigError


def ray_schema() -> dict[str, Any]:
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("ray is not installed, so its cluster schema cannot be read")
    path = Path(list(spec.submodule_search_locations)[0]) / "autoscaler" / "ray-schema.json"
    return json.loads(path.read_text())


def validate_cluster_file(path: str | Path) -> dict[str, Any]:
    """The file's data if it satisfies Ray's cluster schema; else ConfigError, one line
    per violation."""
    import jsonschema

    data, node = read_yaml(path, "cluster file")
    validator = jsonschema.Draft7Validator(ray_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = []
        for err in errors:
            line, dotted = locate(node, tuple(err.absolute_path))
            lines.append(f"{path}:{line}: {dotted or '(top level)'}: {err.message}")
        raise ConfigError(lines)
    return data
