"""Shared fixtures. One local Ray instance serves every test that needs Ray (~5 s to start
on 2 cores); it is bound to 127.0.0.1 like the one `gcbench run` starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Before anything imports ray: keep every Ray process on loopback, and offline.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def ray_local():
    from gcbench.runner.local import connect

    started = connect(num_cpus=2)
    import ray

    yield ray
    if started:
        ray.shutdown()


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


TINY_SUITE = """\
name: tiny
repetitions: 2
grid:
  model: [tiny-mlp, tiny-cnn]
  strategy: [fp32, fp16]
  network: [{inter_gbps: 10}, {inter_gbps: 100}]
  cluster: [{machines: 1, gpus_per_machine: 2}, {machines: 2, gpus_per_machine: 2}]
"""
