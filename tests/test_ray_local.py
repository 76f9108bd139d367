"""`gcbench run` without an address starts its own loopback Ray instance even where
another Ray cluster runs on the host (one started by `ray start`, which every bare
`ray.init()` on the host would join)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, write

pytestmark = [pytest.mark.slow, pytest.mark.ray]

# where `ray start` writes the address that a bare ray.init() joins
BOOTSTRAP = Path("/tmp/ray/ray_current_cluster")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def other_cluster():
    """A Ray cluster of 3 CPUs started with `ray start --head` on loopback, in a process
    group of its own, stopped by signalling that group (its processes only)."""
    port = _free_port()
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
           "--node-ip-address=127.0.0.1", "--num-cpus=3", "--include-dashboard=false",
           "--ray-client-server-port", str(_free_port()), "--disable-usage-stats",
           "--block"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not (BOOTSTRAP.exists() and BOOTSTRAP.read_text().strip() == address):
            assert proc.poll() is None, "ray start exited"
            assert time.monotonic() < deadline, "ray start did not come up in 120 s"
            time.sleep(0.5)
        yield address
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
                break
        with contextlib.suppress(FileNotFoundError):
            if BOOTSTRAP.read_text().strip() == address:  # ours: no later ray.init joins it
                BOOTSTRAP.unlink()


SUITE = """\
name: loopback
grid:
  model: [tiny-mlp]
  strategy: [fp32]
  network: [{inter_gbps: 10}]
  cluster: [{machines: 2, gpus_per_machine: 2}]
"""


def test_run_starts_its_own_instance_beside_another_cluster(tmp_path, other_cluster):
    suite = write(tmp_path, "suite.yaml", SUITE)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run(
        [sys.executable, "-c", "from gcbench.cli import main; main()", "run", str(suite),
         "--results", str(tmp_path / "results"), "--reports", str(tmp_path / "reports"),
         "--num-cpus", "1"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "ray: a new local instance on 127.0.0.1 (1 node, 1 CPUs)" in r.stderr
    # quiet (issue #36): besides the progress line and the headline, at most 5 lines (no
    # Ray notices); the headline's sentence says who won
    lines = [x for x in (r.stdout + r.stderr).splitlines()
             if x.strip() and not x.startswith(("loopback ━", "On "))]  # fmt: skip
    assert len(lines) <= 5, lines
    assert "On 2×2 v100 nvlink at 10 Gbps, fp32 is fastest for tiny-mlp" in r.stdout
    (manifest,) = (tmp_path / "results" / "loopback").glob("*/manifest.json")
    cluster = json.loads(manifest.read_text())["cluster"]
    assert cluster["resources"]["CPU"] == 1.0  # not the other cluster's 3
    assert cluster["nodes"] == ["127.0.0.1"]
    # a stale address file of a `ray start` that died (issue #35 item 14: `gcbench run`
    # retried it for 10.5 min): in a temp folder of its own, so no other Ray reads it
    # (a short path: Ray's sockets go below it, and a socket's path has 107 bytes at most)
    stale = Path(__import__("tempfile").mkdtemp(prefix="gcb-", dir="/tmp"))
    try:
        (stale / "ray").mkdir()  # Ray's temp folder is $RAY_TMPDIR/ray
        (stale / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
        r = subprocess.run(
            [sys.executable, "-c", "from gcbench.cli import main; main()", "run", str(suite),
             "--results", str(tmp_path / "again"), "--no-report", "--num-cpus", "1"],
            env={**env, "RAY_TMPDIR": str(stale)}, cwd=tmp_path, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
    finally:
        __import__("shutil").rmtree(stale, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    assert "ray: a new local instance on 127.0.0.1" in r.stderr


@pytest.mark.slow  # imports ray
def test_a_local_ray_that_does_not_start_is_one_line(monkeypatch):
    """Ray's start timing out under load printed a 40-line traceback (issue #35 item 12):
    one line naming what Ray said, and whatever part of it started shut down."""
    import ray

    from gcbench.errors import ConfigError
    from gcbench.runner import local

    def timeout(**kwargs):
        raise TimeoutError("The current node timed out during startup.\nlong details")

    stopped = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", timeout)
    monkeypatch.setattr(ray, "shutdown", lambda: stopped.append(True))
    with pytest.raises(ConfigError) as e:
        local.connect(None, num_cpus=1)
    (line,) = e.value.messages
    assert line == ("ray: a local instance did not start (TimeoutError: The current node "
                    "timed out during startup.); try again, or give --address")  # fmt: skip
    assert stopped == [True]


DIES = '''
import json, os, signal, sys, threading, time
from pathlib import Path
from gcbench.config import load_suite
from gcbench.errors import RunFailed
from gcbench.runner import execute_cell
from gcbench.runner.local import connect
from gcbench.runner.run import run_suite

def slow(cell, repetitions):
    time.sleep(1.0)
    return execute_cell(cell, repetitions)

out, suite = Path(sys.argv[1]), load_suite(Path(sys.argv[2]))
connect(num_cpus=2)
import ray
raylet = ray._private.worker._global_node.all_processes["raylet"][0].process  # our child

def kill():
    time.sleep(4)
    os.kill(raylet.pid, signal.SIGKILL)

threading.Thread(target=kill, daemon=True).start()
try:
    run_suite(suite, out, cell_fn=slow)
    print("RESULT finished")
except RunFailed as e:
    print("RESULT", e)
(manifest,) = (out / suite.name).glob("*/manifest.json")
m = json.loads(manifest.read_text())
print("MANIFEST", m["status"], json.dumps(m["cells"]))
'''

DYING = """\
name: dies
grid:
  model: [tiny-mlp]
  strategy: [fp32, fp16]
  network: [{inter_gbps: 10}, {inter_gbps: 25}, {inter_gbps: 50}, {inter_gbps: 100}]
  cluster: [{machines: 1, gpus_per_machine: 2}, {machines: 2, gpus_per_machine: 2},
            {machines: 4, gpus_per_machine: 2}]
"""


def test_a_raylet_that_dies_mid_run_stops_the_run_in_one_line(tmp_path):
    """Issue #35 item 12: a local raylet that dies mid-run (here SIGKILLed by the process
    that started it, 4 s into 24 cells of 1 s each) stops the run with one line; the cells
    finished are saved, the others stay to run again (none recorded as failed: it was
    no cell's fault), the manifest says interrupted, and Ray's dumps of the raylet's last
    log lines (50 lines of state, twice) are cut to their first lines."""
    script = write(tmp_path, "dies.py", DIES)
    suite = write(tmp_path, "dies.yaml", DYING)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), str(suite)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    (result,) = [x for x in out.splitlines() if x.startswith("RESULT")]
    assert "ray: the Ray instance died mid-run (LocalRayletDiedError" in result, result
    assert "run the same command again to continue" in result
    (manifest,) = [x for x in out.splitlines() if x.startswith("MANIFEST")]
    status, cells = manifest.split(" ", 2)[1:]
    counts = json.loads(cells)
    assert status == "interrupted" and counts["failed"] == 0
    assert counts["ok"] >= 1 and counts["pending"] >= 1 and counts["ok"] + counts["pending"] == 24
    assert "[state-dump]" not in out and len(out.splitlines()) <= 8, out
