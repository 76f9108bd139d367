"""The results store: atomic writes, resume bookkeeping, loading into pandas."""

from __future__ import annotations

import os

import pytest

from gcbench import load_results
from gcbench.errors import ConfigError
from gcbench.files import TMP_PREFIX, atomic_write
from gcbench.results.store import RunStore, new_run_id


def test_atomic_write_replaces_whole_file_and_cleans_up_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "x.bin"
    atomic_write(path, b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_run_ids_sort_by_time():
    import datetime as dt

    a = new_run_id(dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc))
    b = new_run_id(dt.datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=dt.timezone.utc))
    assert a == "20260102T030405.000006Z" and a < b


def test_store_resume_and_load(tmp_path):
    store, resumed = RunStore.open(tmp_path, "s")
    assert not resumed
    store.write_manifest({"suite": "s"})
    rows = [{"cell_id": "b", "repetition": r, "status": "ok", "iteration_s": 0.1} for r in (1, 0)]
    store.write_cell("b", rows, [{"name": "forward"}])
    store.write_cell(
        "a", [{"cell_id": "a", "repetition": 0, "status": "ok", "iteration_s": 0.2}], None
    )
    (store.cells_dir / f"{TMP_PREFIX}c.parquet.123").write_bytes(b"half a file")
    assert store.finished() == {"a", "b"}

    again, resumed = RunStore.open(tmp_path, "s")
    assert resumed and again.path == store.path
    assert not list(store.cells_dir.glob(TMP_PREFIX + "*"))  # leftovers removed
    assert (store.traces_dir / "b.json.gz").is_file()

    for where in (store.path, tmp_path / "s"):  # a run folder, or a suite folder
        df = load_results(where)
        assert list(df["cell_id"]) == ["a", "b", "b"]
        assert list(df["repetition"]) == [0, 0, 1]

    fresh, resumed = RunStore.open(tmp_path, "s", fresh=True)
    fresh.write_manifest({"suite": "s"})
    assert not resumed and fresh.path != store.path
    assert load_results(tmp_path / "s").empty  # the latest run has no cells yet


def test_load_results_rejects_other_folders(tmp_path):
    with pytest.raises(ConfigError, match="not a gcbench run folder"):
        load_results(tmp_path)


def test_one_record_schema_for_simulator_runner_store_and_docs(tmp_path):
    """The simulator's metric keys, the cell's config columns, the stored row and the
    architecture page name the same columns (`gcbench.results.schema`)."""
    import re

    import gcbench
    from gcbench.config import Cell
    from gcbench.results.schema import (
        COLUMNS,
        CONFIG_COLUMNS,
        FORMAT_VERSION,
        METRIC_COLUMNS,
        record,
    )
    from gcbench.runner import execute_cell

    from conftest import ROOT

    c = Cell.model_validate(
        {
            "model": "tiny-mlp",
            "network": {"inter_gbps": 10},
            "cluster": {"machines": 2, "gpus_per_machine": 2},
            "strategy": "fp32",
            "compressor": "none",
        }
    )
    assert tuple(c.flat()) == CONFIG_COLUMNS
    rows, _ = execute_cell(c, 1)
    assert set(rows[0]) - {"repetition"} == set(METRIC_COLUMNS)
    row = record(
        suite="s",
        cell_id=c.id,
        config=c.flat(),
        metrics=rows[0],
        error=None,
        repetition=0,
        gcbench_version=gcbench.__version__,
        run_id="r",
        meta={},
    )
    assert tuple(row) == COLUMNS and row["format_version"] == FORMAT_VERSION
    assert row["buckets"] == 1 and row["inter_comm_s"] > 0  # dropped before format 2
    store = RunStore(tmp_path / "s" / "r")
    store.write_manifest({"status": "finished"})
    store.write_cell(c.id, [row], None)
    assert tuple(load_results(store.path).columns) == COLUMNS
    from gcbench.report.html import TABLE_COLUMNS

    assert set(TABLE_COLUMNS) <= set(COLUMNS)  # the report reads the same names
    doc = (ROOT / "docs/architecture.md").read_text()
    section = doc[doc.index("**Record**") :]
    documented = re.findall(r"`([a-z_]+)`", section[: section.index("\n\n")])
    assert list(dict.fromkeys(m for m in documented if m in METRIC_COLUMNS)) == list(METRIC_COLUMNS)
