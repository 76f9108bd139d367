"""The shipped Ray cluster-launcher files against the schema that Ray ships."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from gcbench.config.cluster import ray_schema, validate_cluster_file
from gcbench.errors import ConfigError

from conftest import ROOT, write


@pytest.mark.parametrize("name", ["cluster.yaml", "cluster.local.yaml"])
def test_cluster_files_satisfy_rays_schema(name):
    data = yaml.safe_load((ROOT / name).read_text())
    jsonschema.Draft7Validator(ray_schema()).validate(data)  # Ray's own schema, directly
    assert validate_cluster_file(ROOT / name) == data


def test_cloud_file_has_the_node_types_gcbench_needs():
    data = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    types = data["available_node_types"]
    assert types[data["head_node_type"]]["resources"] == {"CPU": 0}
    summation = [t for t in types.values() if t["resources"].get("summation")]
    assert summation and all(isinstance(t["resources"]["summation"], int) for t in summation)
    assert any("install" in c and "gcbench" in c for c in data["setup_commands"])


def test_local_file_puts_resources_in_quoted_start_commands():
    data = yaml.safe_load((ROOT / "cluster.local.yaml").read_text())
    assert data["provider"]["type"] == "local" and "available_node_types" not in data
    assert any("--resources='{\"summation\": 1}'" in c for c in data["worker_start_ray_commands"])
    assert any("--num-cpus=0" in c for c in data["head_start_ray_commands"])


def test_schema_violations_are_reported_with_lines(tmp_path):
    text = (ROOT / "cluster.local.yaml").read_text() + "min_workers: 2\n"
    text = text.replace("  - ray stop\n", '  - ray start --resources={"summation": 1}\n', 1)
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(ConfigError) as info:
        validate_cluster_file(path)
    messages = "\n".join(info.value.messages)
    assert "'min_workers' was unexpected" in messages
    assert f"{path}:28: head_start_ray_commands.0: " in messages  # unquoted ': ' -> a mapping
