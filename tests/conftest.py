"""Shared fixtures. One local Ray instance serves every test that needs Ray (~5 s to start
on 2 cores); it is bound to 127.0.0.1 like the one `gcbench run` starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Before anything imports ray: keep every Ray process on loopback, and offline.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# Model traces cached for this test session alone (`gcbench.zoo.traces`): the tests trace
# what they use once, and never read or fill the user's cache
os.environ["GCBENCH_CACHE"] = __import__("tempfile").mkdtemp(prefix="gcbench-cache-")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# Hypothesis profiles, chosen by HYPOTHESIS_PROFILE: `fast` (the default: the README's
# `python -m pytest`) and `ci` (`.ci/run`'s second pass reruns every hypothesis test with
# it). A property test's examples are written relative to the profile's, `3 *
# settings.default.max_examples`: the count it was tuned at under `ci` (100 a unit), a
# tenth of it under `fast`; tests that fix a small count keep it under both.
settings.register_profile("fast", max_examples=10)
settings.register_profile("ci", max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items):
    """A test that needs Ray (the `ray_local` fixture or the `ray` marker) is `slow`: it
    stays out of the README's default run (`-m "not slow and not browser"`)."""
    for item in items:
        if item.get_closest_marker("ray") or "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


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


def kill_own_actor_while(work, name: str, seconds: float = 120.0) -> tuple[bool, dict]:
    """Run `work()` on a thread and SIGKILL the first process named `ray::<name>` that
    this test process started (its Ray runs under it: another Ray's on the host is never
    a candidate) while it runs: (whether one was killed, {"value": what `work` returned}
    or {"error": what it raised})."""
    import signal
    import threading
    import time

    import psutil

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as e:  # handed to the test
            box["error"] = e

    runner = threading.Thread(target=run)
    runner.start()
    killed = False
    deadline = time.monotonic() + seconds
    me = psutil.Process()
    while not killed and time.monotonic() < deadline and runner.is_alive():
        for proc in me.children(recursive=True):
            try:
                mine = (proc.cmdline() or [""])[0].startswith(f"ray::{name}")
            except psutil.Error:
                continue
            if mine:
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
        time.sleep(0.05)
    runner.join(timeout=240)
    return killed, box
