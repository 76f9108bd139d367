"""The runner: on the shared local Ray instance, and (where nothing is left to run)
without Ray: manifests, the current grid, damaged files, locks, folders, addresses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_results import DAMAGES, damage, one_line, prefill, tiny_suite
from typer.testing import CliRunner

from gcbench import load_results
from gcbench.cli import app
from gcbench.config import expand, load_suite, parse_only
from gcbench.errors import ConfigError
from gcbench.results.schema import RUN_COLUMNS
from gcbench.runner import execute_cell, run_suite

from conftest import ROOT, TINY_SUITE, write

ray = pytest.mark.ray


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if the runner tries to start or join Ray."""

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr("gcbench.runner.local.connect", refuse)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
        for p in sorted(folder.rglob("*"))
    }


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


@ray
def test_local_ray_listens_on_loopback(ray_local):
    nodes = [n for n in ray_local.nodes() if n["Alive"]]
    assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]


@ray
def test_smoke_suite_runs_resumes_and_starts_fresh(ray_local, tmp_path):
    suite = load_suite(ROOT / "suites/smoke.yaml")
    seen = []
    first = run_suite(suite, tmp_path, progress=lambda p: seen.append((p.done, p.total)))
    assert (first.total, first.ok, first.failed, first.skipped) == (30, 30, 0, 0)
    assert seen[-1] == (30, 30) and seen[0] == (0, 30)
    df = load_results(first.run_dir)
    assert len(df) == 30 * suite.repetitions
    assert set(df["status"]) == {"ok"}
    assert sorted(df["repetition"].unique()) == list(range(suite.repetitions))
    assert len(list((first.run_dir / "traces").glob("*.json.gz"))) == 30

    again = run_suite(suite, tmp_path)
    assert again.run_dir == first.run_dir and (again.ok, again.skipped) == (0, 30)

    fresh = run_suite(suite, tmp_path, fresh=True, only=parse_only(["model=tiny-mlp"]))
    assert fresh.run_dir != first.run_dir and fresh.total == 10
    assert (fresh.grid, fresh.pending, fresh.status) == (30, 20, "incomplete")
    m = manifest(fresh.run_dir)
    assert m["cells"] == {"total": 30, "ok": 10, "failed": 0, "pending": 20}
    assert len(m["grid"]) == 30 and m["status"] == "incomplete"
    assert m["description"].startswith("Smoke test: three models")
    other = load_results(fresh.run_dir)
    same = df[df["cell_id"].isin(other["cell_id"])].reset_index(drop=True)
    keep = [c for c in df.columns if c not in RUN_COLUMNS]
    assert other[keep].equals(same[keep])


def failing(error: Exception):
    """A cell function that raises `error` for tiny-cnn's fp16 cells (4 of TINY_SUITE's
    16) and executes the others."""

    def run(cell, repetitions):
        if cell.model.name == "tiny-cnn" and cell.strategy == "fp16":
            raise error
        return execute_cell(cell, repetitions)

    return run


@ray
def test_failing_cell_becomes_a_row_and_is_retried(ray_local, tmp_path):
    suite = load_suite(write(tmp_path, "t.yaml", TINY_SUITE))
    summary = run_suite(suite, tmp_path / "r", cell_fn=failing(RuntimeError("simulated failure")))
    assert (summary.total, summary.ok, summary.failed) == (16, 12, 4)
    assert all("RuntimeError: simulated failure" in f for f in summary.failures)
    df = load_results(summary.run_dir)
    failed = df[df["status"] == "failed"]
    assert len(failed) == 4 * 2 and failed["iteration_s"].isna().all()
    assert set(failed["error"]) == {"RuntimeError: simulated failure"}

    retry = run_suite(suite, tmp_path / "r")  # failed cells run again on the next run
    assert (retry.ok, retry.failed, retry.skipped) == (4, 0, 12)
    assert set(load_results(summary.run_dir)["status"]) == {"ok"}



@ray
def test_a_full_disk_stops_the_run_and_keeps_its_cells(ray_local, tmp_path, monkeypatch):
    """No space left while writing a cell (issue #35 item 8: two chained ENOSPC tracebacks,
    and the manifest said `running` with 0 ok though cells were written): one line, the
    manifest records the session as interrupted with the cells written, and a rerun
    continues from them."""
    import errno

    from gcbench.results.store import RunStore

    suite = load_suite(write(tmp_path, "t.yaml", TINY_SUITE))
    real = RunStore.write_cell
    writes = []

    def full(self, *args, **kwargs):
        if len(writes) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.cells_dir / "x"))
        writes.append(args[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunStore, "write_cell", full)
    with pytest.raises(ConfigError) as e:
        run_suite(suite, tmp_path / "r", concurrency=1)
    (line,) = e.value.messages
    assert "No space left on device writing" in line and "the 3 cells written" in line
    monkeypatch.setattr(RunStore, "write_cell", real)
    (run,) = (tmp_path / "r" / suite.name).iterdir()
    manifest = RunStore(run).read_manifest()
    assert manifest["status"] == "interrupted" and manifest["cells"]["ok"] == 3
    again = run_suite(suite, tmp_path / "r")
    assert (again.ok, again.skipped) == (13, 3)


@ray
def test_a_cell_that_cannot_be_placed_is_an_infeasible_row_and_runs_again(ray_local, tmp_path):
    """An `InfeasibleError` (an emulated cell whose workers no longer fit) gives rows
    with status `infeasible` and the reason, counted as not done, and the cell runs
    again on the next run."""
    from gcbench.errors import InfeasibleError

    suite = load_suite(write(tmp_path, "t.yaml", TINY_SUITE))
    crowded = failing(InfeasibleError("emulate: 2 x 2 workers could not be placed within 30 s"))
    summary = run_suite(suite, tmp_path / "r", cell_fn=crowded)
    assert (summary.ok, summary.failed) == (12, 4)
    df = load_results(summary.run_dir)
    assert set(df["status"]) == {"ok", "infeasible"}
    rows = df[df["status"] == "infeasible"]
    assert len(rows) == 4 * 2 and rows["error"].str.contains("could not be placed").all()
    again = run_suite(suite, tmp_path / "r")
    assert (again.ok, again.failed, again.skipped) == (4, 0, 12)


@ray
@pytest.mark.parametrize("limit", [1, 2])
def test_cells_run_in_ray_workers_within_the_concurrency_limit(ray_local, tmp_path, limit):
    suite = load_suite(write(tmp_path, "t.yaml", TINY_SUITE))

    def slow(cell, repetitions):
        time.sleep(0.15)
        return execute_cell(cell, repetitions)

    summary = run_suite(suite, tmp_path / "r", cell_fn=slow, concurrency=limit)
    df = load_results(summary.run_dir).drop_duplicates("cell_id")
    assert os.getpid() not in set(df["run_pid"])
    events = sorted(
        [(s, 1) for s in df["run_started_at"]]
        + [(s + w, -1) for s, w in zip(df["run_started_at"], df["run_wall_s"], strict=True)],
        key=lambda e: (e[0], e[1]),
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= limit
    if limit == 2:
        assert peak == 2  # the runner really runs cells side by side


# ---------------------------------------------------------------- the whole run


@ray
def test_an_only_session_keeps_the_whole_run_in_the_manifest(ray_local, tmp_path):
    """The manifest describes the whole run, whatever --only keeps (at 81933ad a rerun
    with --only overwrote it with the subset's counts: status "finished", total 1)."""
    suite = tiny_suite(tmp_path)

    def flaky(cell, repetitions):
        if cell.model.name == "tiny-cnn" and cell.strategy == "fp16":
            raise RuntimeError("simulated failure")
        return execute_cell(cell, repetitions)

    first = run_suite(suite, tmp_path / "r", cell_fn=flaky)
    whole = {"total": 16, "ok": 12, "failed": 4, "pending": 0}
    assert manifest(first.run_dir)["cells"] == whole
    assert manifest(first.run_dir)["status"] == "failed"

    again = run_suite(suite, tmp_path / "r", only=parse_only(["model=tiny-mlp"]))
    assert (again.total, again.ok, again.skipped, again.grid) == (8, 0, 8, 16)
    m = manifest(first.run_dir)
    assert (m["status"], m["cells"], len(m["grid"])) == ("failed", whole, 16)

    fixed = run_suite(suite, tmp_path / "r", only=parse_only(["strategy=fp16", "model=tiny-cnn"]))
    assert (fixed.total, fixed.ok, fixed.failed) == (4, 4, 0)
    m = manifest(first.run_dir)
    assert m["status"] == "finished" and m["cells"] == {**whole, "ok": 16, "failed": 0}
    assert m["last_session"] == {"cells": 4, "ok": 4, "failed": 0}
    assert m["only"] == [{"strategy": ["fp16"]}, {"model": ["tiny-cnn"]}]


def test_a_continued_run_shows_the_current_grid(tmp_path, no_ray):
    """Edit the suite (drop a network, change the device) and rerun: the results and the
    report show the new grid; older cells stay on disk and come back with all_cells (at
    81933ad load_results kept showing the dropped cells: 4 where the grid had 2)."""
    suite = tiny_suite(tmp_path)
    prefill(tmp_path / "r", suite)
    run = run_suite(suite, tmp_path / "r").run_dir
    assert load_results(run)["cell_id"].nunique() == 16

    dropped = tiny_suite(tmp_path, TINY_SUITE.replace("{inter_gbps: 10}, ", ""))
    summary = run_suite(dropped, tmp_path / "r")
    assert (summary.run_dir, summary.total, summary.skipped, summary.status) == (
        run,
        8,
        8,
        "finished",
    )
    assert set(load_results(run)["cell_id"]) == {c.id for c in expand(dropped)}
    assert load_results(tmp_path / "r" / "tiny", all_cells=True)["cell_id"].nunique() == 16

    moved = tiny_suite(tmp_path, TINY_SUITE + "device: a100\n")
    prefill(tmp_path / "r", moved)  # as if run: the a100 cells are new cells
    run_suite(moved, tmp_path / "r")
    df = load_results(run)
    assert set(df["device"]) == {"a100"} and df["cell_id"].nunique() == 16
    assert load_results(run, all_cells=True)["cell_id"].nunique() == 32
    assert manifest(run)["grid"] == [c.id for c in expand(moved)]


def test_a_finished_run_writes_nothing(tmp_path, no_ray):
    """Rerunning a finished run starts no Ray and changes no file, results or report (at
    81933ad the manifest was rewritten every time)."""
    suite_file = write(tmp_path, "tiny.yaml", TINY_SUITE)
    prefill(tmp_path / "results", load_suite(suite_file))
    args = ["run", str(suite_file), "--results", str(tmp_path / "results")]
    args += ["--reports", str(tmp_path / "reports")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    before = snapshot(tmp_path)
    time.sleep(0.01)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "16 cells: 0 ok now, 0 failed, 16 finished earlier (continued run)" in r.stdout
    assert snapshot(tmp_path) == before
    r = CliRunner().invoke(app, [*args, "--only", "model=tiny-mlp"])
    assert r.exit_code == 0, r.output
    assert "8 cells: 0 ok now, 0 failed, 8 finished earlier" in r.stdout
    assert "the run (finished): 16 cells, 16 ok, 0 failed, 0 not run yet" in r.stdout
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- damaged files


@ray
def test_damaged_cell_files_are_set_aside_and_their_cells_run_again(ray_local, tmp_path):
    """Empty, truncated and changed (but still parsing) cell files: `run` renames each
    aside, says so in one line, and runs its cell again (at 81933ad the empty file made
    every run, report and load_results fail with ArrowInvalid)."""
    suite = tiny_suite(tmp_path)
    store = prefill(tmp_path / "r", suite)
    run_suite(suite, tmp_path / "r")
    clean = load_results(store.path)
    cells = expand(suite)
    for c, how in zip(cells, DAMAGES, strict=False):
        damage(store.cell_path(c.id), how)
    summary = run_suite(suite, tmp_path / "r")
    assert (summary.ok, summary.failed, summary.skipped) == (4, 0, 12)
    assert len(summary.set_aside) == 4
    for c, line in zip(sorted(c.id for c in cells[:4]), summary.set_aside, strict=True):
        assert line.startswith(f"{store.cell_path(c)}: unreadable (") and "runs again" in line
        assert "\n" not in line
    aside = sorted(p.name.split(".")[0] for p in store.cells_dir.glob("*.unreadable-*"))
    assert aside == sorted(c.id for c in cells[:4])
    again = load_results(store.path)
    keep = [c for c in clean.columns if c not in RUN_COLUMNS]
    assert again[keep].equals(clean[keep])
    assert manifest(store.path)["cells"] == {"total": 16, "ok": 16, "failed": 0, "pending": 0}


def test_results_of_another_format_stop_the_run_before_ray(tmp_path, no_ray):
    import pyarrow.parquet as pq

    suite = tiny_suite(tmp_path)
    store = prefill(tmp_path / "r", suite)
    path = store.cell_files()[3]
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["format_version"]).replace_schema_metadata(), path)
    before = snapshot(tmp_path / "r")
    with pytest.raises(ConfigError) as e:
        run_suite(suite, tmp_path / "r")
    line = one_line(e.value)
    assert line.startswith(f"{path}: results format 1 ") and "--fresh" in line
    assert snapshot(tmp_path / "r") == before


def test_a_broken_manifest_stops_the_run_naming_it(tmp_path, no_ray):
    suite = tiny_suite(tmp_path)
    store = prefill(tmp_path / "r", suite)
    store.manifest_path.write_text('{"suite": "tiny", "sessions": ')
    with pytest.raises(ConfigError) as e:
        run_suite(suite, tmp_path / "r")
    assert one_line(e.value).startswith(f"{store.manifest_path}: not valid JSON")


# ---------------------------------------------------------------- folders


def test_unwritable_folders_are_one_line_before_ray(tmp_path, no_ray, monkeypatch):
    """--results and --reports that cannot be written: exit 2, one line, nothing written,
    Ray not started (at 81933ad: PermissionError or NotADirectoryError tracebacks, exit
    1, after Ray had started and, for --reports, after every cell had run)."""
    monkeypatch.chdir(tmp_path)
    suite_file = write(tmp_path, "tiny.yaml", TINY_SUITE)
    write(tmp_path, "afile", "x")
    long = "l" * 300
    cases = [
        (["--results", "afile"], "--results", "afile/tiny"),
        (["--results", "afile/below"], "--results", "afile/below/tiny"),
        (["--results", long], "--results", f"{long}/tiny"),
        (["--reports", "afile"], "--reports", "afile/tiny"),
        (["--reports", f"x/{long}"], "--reports", f"x/{long}/tiny"),
    ]
    try:
        fd, probe = __import__("tempfile").mkstemp(dir="/sys")
        os.close(fd)
        os.unlink(probe)
    except OSError:  # a folder even root cannot write
        cases.append((["--results", "/sys/gcbench"], "--results", "/sys/gcbench/tiny"))
    for extra, flag, shown in cases:
        r = CliRunner().invoke(app, ["run", str(suite_file), *extra])
        assert r.exit_code == 2, (extra, r.output)
        assert r.stderr.startswith(f"error: {flag}: cannot write {shown}: "), r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "tiny.yaml"]


# ---------------------------------------------------------------- one run at a time

HOLD = (
    "import sys\nfrom gcbench.results.store import SuiteLock\n"
    "with SuiteLock(sys.argv[1]):\n    print('locked', flush=True)\n    sys.stdin.read()\n"
)


def hold(folder: Path) -> subprocess.Popen:
    """Another process holding the suite folder's lock until its stdin closes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_run_says_who_holds_the_suite_folder_or_waits(tmp_path, no_ray):
    """One run at a time writes a suite's results: a second one names the holder's pid
    and exits 2, or with --wait waits; a killed holder leaves no stale lock (at 81933ad
    two runs started together each computed all 40 cells, into two run folders)."""
    suite_file = write(tmp_path, "tiny.yaml", TINY_SUITE)
    suite = load_suite(suite_file)
    prefill(tmp_path / "r", suite)
    folder = tmp_path / "r" / "tiny"
    holder = hold(folder)
    try:
        with pytest.raises(ConfigError) as e:
            run_suite(suite, tmp_path / "r")
        line = one_line(e.value)
        assert line.startswith(f"{folder}: another gcbench run (pid {holder.pid}) is writing")
        assert "--wait" in line
        r = CliRunner().invoke(app, ["run", str(suite_file), "--results", str(tmp_path / "r")])
        assert r.exit_code == 2 and f"(pid {holder.pid})" in r.stderr
        assert r.stderr.count("\n") == 1, r.stderr

        told: list[str] = []

        def release_soon(line: str) -> None:
            told.append(line)
            threading.Timer(0.3, holder.communicate).start()  # closes its stdin

        summary = run_suite(suite, tmp_path / "r", wait=True, on_wait=release_soon)
        assert summary.status == "finished" and holder.wait(10) == 0
        assert len(told) == 1 and f"pid {holder.pid}" in told[0] and str(folder) in told[0]
    finally:
        holder.kill()
        holder.wait()
    killed = hold(folder)
    killed.kill()  # the kernel releases the lock of a killed process
    killed.wait()
    assert run_suite(suite, tmp_path / "r").status == "finished"


# ---------------------------------------------------------------- addresses


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-such-host.invalid:6379", "ray://127.0.0.1:1"])
def test_an_unreachable_address_fails_in_seconds_in_one_line(tmp_path, address):
    """(At 81933ad, 127.0.0.1:1 was still retrying, with C++ warnings, after 150 s.)"""
    suite_file = write(tmp_path, "tiny.yaml", TINY_SUITE)
    started = time.monotonic()
    args = ["run", str(suite_file), "--results", str(tmp_path / "r"), "--address", address]
    r = CliRunner().invoke(app, args)
    assert time.monotonic() - started < 10
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"error: cannot connect to the Ray cluster at {address!r}: ")
    assert r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "r").exists()  # a run that did not start leaves nothing


@ray
def test_planner_cells_store_their_plans(ray_local, tmp_path):
    """bytecomp plans inside the cell's Ray task; the plan lands in plans/<cell-id>.json.gz
    and the Record names it (plan_file); a baseline cell stores no plan."""
    from gcbench.results.store import read_plan

    suite = load_suite(
        write(
            tmp_path,
            "planned.yaml",
            "name: planned\nrepetitions: 1\ngrid:\n  model: [tiny-mlp]\n"
            "  compressor: [dgc-1pct]\n  strategy: [bytecomp, allgather]\n"
            "  network: [{inter_gbps: 10}]\n  cluster: [{machines: 2, gpus_per_machine: 4}]\n",
        )
    )
    summary = run_suite(suite, tmp_path / "r")
    assert summary.status == "finished"
    df = load_results(tmp_path / "r" / "planned")
    planned = df[df.strategy == "bytecomp"].iloc[0]
    assert planned.plan_file == f"plans/{planned.cell_id}.json.gz"
    assert planned.planner_s > 0
    run = next((tmp_path / "r" / "planned").iterdir())
    plan = read_plan(run, planned.cell_id)
    assert plan["predicted_iteration_s"] == pytest.approx(planned.iteration_s)
    assert len(plan["tensors"]) == planned.tensors
    baseline = df[df.strategy == "allgather"].iloc[0]
    assert baseline.plan_file == "" and baseline.planner_s == 0
    assert sorted(p.name for p in (run / "plans").iterdir()) == [f"{planned.cell_id}.json.gz"]
