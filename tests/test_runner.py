"""The runner on the shared local Ray instance."""

from __future__ import annotations

import os
import time

import pytest

from gcbench import load_results
from gcbench.config import load_suite, parse_only
from gcbench.results.schema import RUN_COLUMNS
from gcbench.runner import execute_cell, run_suite

from conftest import ROOT, TINY_SUITE, write

pytestmark = pytest.mark.ray


def test_local_ray_listens_on_loopback(ray_local):
    nodes = [n for n in ray_local.nodes() if n["Alive"]]
    assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]


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
    other = load_results(fresh.run_dir)
    same = df[df["cell_id"].isin(other["cell_id"])].reset_index(drop=True)
    keep = [c for c in df.columns if c not in RUN_COLUMNS]
    assert other[keep].equals(same[keep])


def test_failing_cell_becomes_a_row_and_is_retried(ray_local, tmp_path):
    suite = load_suite(write(tmp_path, "t.yaml", TINY_SUITE))

    def flaky(cell, repetitions):
        if cell.model.name == "tiny-cnn" and cell.strategy == "fp16":
            raise RuntimeError("simulated failure")
        return execute_cell(cell, repetitions)

    summary = run_suite(suite, tmp_path / "r", cell_fn=flaky)
    assert (summary.total, summary.ok, summary.failed) == (16, 12, 4)
    assert all("RuntimeError: simulated failure" in f for f in summary.failures)
    df = load_results(summary.run_dir)
    failed = df[df["status"] == "failed"]
    assert len(failed) == 4 * 2 and failed["iteration_s"].isna().all()
    assert set(failed["error"]) == {"RuntimeError: simulated failure"}

    retry = run_suite(suite, tmp_path / "r")  # failed cells run again on the next run
    assert (retry.ok, retry.failed, retry.skipped) == (4, 0, 12)
    assert set(load_results(summary.run_dir)["status"]) == {"ok"}


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
