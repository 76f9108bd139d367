"""Crash and resume through the real command: SIGKILL mid-run, rerun, compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcbench import load_results
from gcbench.files import TMP_PREFIX
from gcbench.results.schema import RUN_COLUMNS

from conftest import write

pytestmark = pytest.mark.slow

# 25 bandwidths x 3 cluster sizes x 2 strategies = 150 small cells: enough that a run
# is caught half-way.
BIG_SUITE = (
    "name: big\nrepetitions: 2\ngrid:\n  model: [tiny-mlp]\n  strategy: [fp32, fp16]\n"
    "  network:\n"
    + "".join(f"    - {{inter_gbps: {g}}}\n" for g in range(1, 26))
    + "  cluster: [{machines: 2}, {machines: 3}, {machines: 4}]\n"
)
TOTAL = 150


def gcbench(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "gcbench", "run", *args, "--num-cpus", "1", "--concurrency", "1"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, Ray's processes included
        # SIGINT as in a terminal: a shell's background job (CI's, sometimes) starts with
        # it ignored, and a child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_partial(cells: Path, proc: subprocess.Popen, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = len(list(cells.glob("*/cells/*.parquet"))) if cells.exists() else 0
        if n >= 3:
            return n
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    raise AssertionError("no cell was written in time")


def cell_files(run: Path) -> list[Path]:
    return sorted((run / "cells").glob("*"))


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path):
    suite = write(tmp_path, "big.yaml", BIG_SUITE)
    results = tmp_path / "results"
    proc = gcbench(str(suite), "--results", str(results), "--no-report", cwd=tmp_path)
    wait_for_partial(results / "big", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    [run] = list((results / "big").iterdir())
    partial = [p for p in cell_files(run) if not p.name.startswith(TMP_PREFIX)]
    assert 0 < len(partial) < TOTAL, len(partial)
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"

    proc = gcbench(str(suite), "--results", str(results), "--no-report", cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"{TOTAL} cells: {TOTAL - len(partial)} ok now" in out
    assert [p.name for p in (results / "big").iterdir()] == [run.name]  # continued, not new
    files = cell_files(run)
    assert len(files) == TOTAL and not [p for p in files if p.name.startswith(TMP_PREFIX)]
    assert not list(run.rglob(TMP_PREFIX + "*"))

    clean = tmp_path / "clean"
    proc = gcbench(str(suite), "--results", str(clean), "--no-report", cwd=tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    resumed, uninterrupted = load_results(results / "big"), load_results(clean / "big")
    assert len(resumed) == TOTAL * 2 and resumed["cell_id"].nunique() == TOTAL
    keep = [c for c in resumed.columns if c not in RUN_COLUMNS]
    assert resumed[keep].equals(uninterrupted[keep])


@pytest.mark.parametrize(
    ("sig", "code", "said", "flags"),
    [
        (signal.SIGINT, 130, "interrupted: finished cells are saved; run the same command "
         "again to continue", ()),
        # what `timeout`, SLURM and `docker stop` send: it was Ray's exit 1 with a C++
        # stack trace; a --fresh run's rerun must leave --fresh out to continue it
        (signal.SIGTERM, 143, "terminated: finished cells are saved; run the same command "
         "without --fresh to continue", ("--fresh",)),
    ],
)  # fmt: skip
def test_ctrl_c_stops_cleanly(tmp_path, sig, code, said, flags):
    suite = write(tmp_path, "big.yaml", BIG_SUITE)
    results = tmp_path / "results"
    proc = gcbench(str(suite), "--results", str(results), "--no-report", *flags, cwd=tmp_path)
    wait_for_partial(results / "big", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert said in err and "Traceback" not in err and "***" not in err, err
    [run] = list((results / "big").iterdir())
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    assert not list(run.rglob(TMP_PREFIX + "*"))
    assert 0 < len(cell_files(run)) < TOTAL, (len(cell_files(run)), err)


def test_a_second_run_exits_naming_the_first_or_waits_for_it(tmp_path):
    """Two `gcbench run` on one results folder: the second says which process holds it
    and exits 2; with --wait it waits, then finds every cell finished and computes none
    (at 81933ad both computed every cell, into two run folders)."""
    # twice the big suite, so the first run is still going when the second starts
    more = "".join(f"    - {{inter_gbps: {g}}}\n" for g in range(26, 51))
    bigger = BIG_SUITE.replace("  cluster:", more + "  cluster:")
    total = 2 * TOTAL
    suite = write(tmp_path, "big.yaml", bigger)
    results = tmp_path / "results"
    first = gcbench(str(suite), "--results", str(results), "--no-report", cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (results / "big").exists():  # made, then locked at once, before Ray starts
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.005)
    second = gcbench(str(suite), "--results", str(results), "--no-report", cwd=tmp_path)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert err.strip() == (
        f"error: {results / 'big'}: another gcbench run (pid {first.pid}) is writing this "
        "suite's results; wait for it to end, or run again with --wait"
    )
    waiting = gcbench(str(suite), "--results", str(results), "--no-report", "--wait", cwd=tmp_path)
    out, err = waiting.communicate(timeout=300)
    assert first.wait(300) == 0, first.communicate()
    assert waiting.returncode == 0, err
    assert f"waiting for the gcbench run (pid {first.pid})" in err
    assert f"{total} cells: 0 ok now, 0 failed, {total} finished earlier" in out
    [run] = list((results / "big").iterdir())
    assert len(cell_files(run)) == total


def test_an_address_that_answers_but_is_no_ray_cluster_fails_in_bounded_time(tmp_path):
    """A port that accepts connections and closes them: one line, exit 2, in seconds (at
    81933ad Ray retried for minutes, printing C++ warnings)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    suite = write(tmp_path, "big.yaml", BIG_SUITE)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gcbench", "run", str(suite), "--results", "r",
             "--address", f"127.0.0.1:{port}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.close()
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - started < 60
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot connect to the Ray cluster at '127.0.0.1:{port}': ")
    assert not (tmp_path / "r").exists()
