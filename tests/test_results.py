"""The results store: atomic writes, resume bookkeeping, loading into pandas, and what
happens to damaged files, other results formats and odd manifests."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gcbench
from gcbench import load_results
from gcbench.config import Cell, Suite, expand, load_suite
from gcbench.errors import ConfigError
from gcbench.files import TMP_PREFIX, atomic_write, check_writable
from gcbench.results.schema import FORMAT_VERSION, record
from gcbench.results.store import ResultsWarning, RunStore, new_run_id
from gcbench.runner import execute_cell

from conftest import TINY_SUITE, write

# ---------------------------------------------------------------- helpers (shared)


def cell_rows(
    cell: Cell, suite: str = "s", run_id: str = "r", repetitions: int = 2, error: str | None = None
) -> list[dict]:
    """The Records the runner stores for `cell` (simulated in-process, no Ray)."""
    metrics = execute_cell(cell, repetitions)[0] if error is None else [
        {"repetition": r} for r in range(repetitions)
    ]
    return [
        record(
            suite=suite,
            cell_id=cell.id,
            config=cell.flat(),
            metrics=m,
            error=error,
            repetition=m["repetition"],
            gcbench_version=gcbench.__version__,
            run_id=run_id,
            meta={"run_pid": 1, "run_node": "n", "run_started_at": 0.0, "run_wall_s": 0.1},
        )
        for m in metrics
    ]


def prefill(
    results: Path, suite: Suite, cells: list[Cell] | None = None, spans: bool = False
) -> RunStore:
    """A run of `suite` under `results` whose cells (default: all) are finished, written
    as the runner writes them, but in-process: `run_suite` then has nothing left to do
    and starts no Ray (and writes the manifest's grid, counts and status)."""
    store, _ = RunStore.open(results, suite.name)
    if not store.manifest_path.exists():
        store.write_manifest({"suite": suite.name, "status": "running"})
    for c in expand(suite) if cells is None else cells:
        rows = cell_rows(c, suite.name, store.run_id, suite.repetitions)
        store.write_cell(c.id, rows, spans and execute_cell(c, 1)[1])
    return store


def tiny_suite(tmp_path: Path, text: str = TINY_SUITE) -> Suite:
    return load_suite(write(tmp_path, "tiny.yaml", text))


def one_line(e: ConfigError) -> str:
    assert len(e.messages) == 1 and "\n" not in e.messages[0], e.messages
    return e.messages[0]


def a_cell(**network) -> Cell:
    return Cell.model_validate(
        {
            "model": "tiny-mlp",
            "network": {"inter_gbps": 10, **network},
            "cluster": {"machines": 2, "gpus_per_machine": 2},
            "strategy": "fp32",
            "compressor": "none",
        }
    )


# ---------------------------------------------------------------- writing files


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


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_written_files_honour_the_umask(tmp_path, mask):
    """Every file gcbench writes gets 0666 less the umask, like any new file (at 81933ad:
    0600 whatever the umask, mkstemp's mode, so reports could not be served or shared)."""
    old = os.umask(mask)
    try:
        atomic_write(tmp_path / "a" / "x.bin", b"x")
        store = RunStore(tmp_path / "results" / "s" / "r")
        store.write_manifest({"suite": "s"})
        c = a_cell()
        store.write_cell(c.id, cell_rows(c), [{"name": "forward"}])
    finally:
        os.umask(old)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 4
    for p in files:
        assert p.stat().st_mode & 0o777 == 0o666 & ~mask, (p, oct(p.stat().st_mode))
    for p in (p for p in tmp_path.rglob("*") if p.is_dir()):
        assert p.stat().st_mode & 0o777 == 0o777 & ~mask


def test_run_ids_sort_by_time():
    import datetime as dt

    a = new_run_id(dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc))
    b = new_run_id(dt.datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=dt.timezone.utc))
    assert a == "20260102T030405.000006Z" and a < b


def test_store_resume_and_load(tmp_path):
    store, resumed = RunStore.open(tmp_path, "s")
    assert not resumed
    store.write_manifest({"suite": "s"})
    a, b = a_cell(), a_cell(inter_gbps=100)
    rows_b = cell_rows(b)
    store.write_cell(b.id, rows_b[::-1], [{"name": "forward"}])
    store.write_cell(a.id, cell_rows(a, repetitions=1), None)
    (store.cells_dir / f"{TMP_PREFIX}c.parquet.123").write_bytes(b"half a file")
    assert store.finished() == {a.id, b.id}

    again, resumed = RunStore.open(tmp_path, "s")
    assert resumed and again.path == store.path
    assert not list(store.cells_dir.glob(TMP_PREFIX + "*"))  # leftovers removed
    assert (store.traces_dir / f"{b.id}.json.gz").is_file()

    first, second = sorted([a.id, b.id])
    n_first = 1 if first == a.id else 2
    for where in (store.path, tmp_path / "s"):  # a run folder, or a suite folder
        df = load_results(where)
        assert list(df["cell_id"]) == [first] * n_first + [second] * (3 - n_first)
        assert list(df["repetition"]) == ([0] if n_first == 1 else [0, 1]) + (
            [0, 1] if n_first == 1 else [0]
        )

    fresh, resumed = RunStore.open(tmp_path, "s", fresh=True)
    fresh.write_manifest({"suite": "s"})
    assert not resumed and fresh.path != store.path
    assert load_results(tmp_path / "s").empty  # the latest run has no cells yet


def test_a_folder_named_like_a_temporary_is_left_alone(tmp_path):
    """Continuing a run removes its leftover temporary files; a folder (or anything but
    a file) named like one is not gcbench's: kept, and the run goes on (issue #35 item 11:
    IsADirectoryError on resume)."""
    store, _ = RunStore.open(tmp_path, "s")
    store.write_manifest({"suite": "s"})
    (store.cells_dir / f"{TMP_PREFIX}x").mkdir(parents=True)
    (store.cells_dir / f"{TMP_PREFIX}x" / "inside").write_text("theirs")
    (store.cells_dir / f"{TMP_PREFIX}c.parquet.123").write_bytes(b"half a file")
    again, resumed = RunStore.open(tmp_path, "s")
    assert resumed and again.path == store.path
    assert [p.name for p in store.cells_dir.glob(TMP_PREFIX + "*")] == [f"{TMP_PREFIX}x"]
    assert (store.cells_dir / f"{TMP_PREFIX}x" / "inside").read_text() == "theirs"


def test_load_results_rejects_other_folders(tmp_path):
    with pytest.raises(ConfigError, match="not a gcbench run folder"):
        load_results(tmp_path)


def test_one_record_schema_for_simulator_runner_store_and_docs(tmp_path):
    """The simulator's metric keys, the cell's config columns, the stored row and the
    architecture page name the same columns (`gcbench.results.schema`)."""
    import re

    from gcbench.results.schema import (
        COLUMNS,
        CONFIG_COLUMNS,
        EMULATE_METRICS,
        MEASURE_METRICS,
        METRIC_COLUMNS,
        TRAIN_METRICS,
    )
    from gcbench.runner import execute_cell

    from conftest import ROOT

    c = a_cell()
    assert tuple(c.flat()) == CONFIG_COLUMNS
    rows, _, _ = execute_cell(c, 1)
    assert set(rows[0]) - {"repetition"} == (
        set(METRIC_COLUMNS) - set(EMULATE_METRICS) - set(MEASURE_METRICS) - set(TRAIN_METRICS)
    )
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


# ---------------------------------------------------------------- damaged cell files


def _flip_until(data: bytes, ok, start: int = 4) -> bytes:
    """`data` with the first one-byte change from `start` on that still parses and for
    which `ok(table)` holds."""
    import io

    import pyarrow.parquet as pq

    for i in range(start, len(data) - 8):
        for mask in (0x01, 0x55):
            damaged = bytearray(data)
            damaged[i] ^= mask
            try:
                table = pq.read_table(io.BytesIO(bytes(damaged)))
            except Exception:
                continue
            if ok(table):
                return bytes(damaged)
    raise AssertionError("no such change")


def damage(path: Path, how: str) -> None:
    """Damage a cell file: `empty`, `truncated`, `data` (a data page changed; the file
    still parses and reads other values), `types` (a column's type changed in the footer;
    it still parses)."""
    import io

    import pyarrow.parquet as pq

    data = path.read_bytes()
    original = pq.read_table(io.BytesIO(data))
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "data":
        path.write_bytes(
            _flip_until(
                data,
                lambda t: t.schema.equals(original.schema) and not t.equals(original),
            )
        )
    elif how == "types":
        path.write_bytes(
            _flip_until(
                data,
                lambda t: t.column_names == original.column_names
                and not t.schema.equals(original.schema),
                start=len(data) - 8 - int.from_bytes(data[-8:-4], "little"),  # the footer
            )
        )
    else:
        raise ValueError(how)


DAMAGES = ("empty", "truncated", "data", "types")


def test_a_one_byte_change_in_a_data_page_is_caught_by_its_page_checksum(tmp_path):
    """Cell files carry parquet page checksums: a changed byte in a data page that still
    parses is an error when read with verification (at 81933ad a one-bit change read
    without error: `suite` became '' instead of 't')."""
    import pyarrow.parquet as pq

    c = a_cell()
    path = RunStore(tmp_path / "s" / "r").write_cell(c.id, cell_rows(c), None)
    damage(path, "data")
    pq.read_table(path)  # still parses, with another value
    with pytest.raises(OSError, match="CRC|checksum"):
        pq.read_table(path, page_checksum_verification=True)


def test_unreadable_cell_files_are_left_out_in_one_line_each(tmp_path):
    """Damaged cell files (empty, truncated, a changed data page, a changed type) never
    stop load_results: each is left out with one ResultsWarning line naming the file (at
    81933ad: ArrowInvalid for the empty and truncated ones, wrong values for the others)."""
    store = RunStore(tmp_path / "s" / "r")
    store.write_manifest({"suite": "s", "status": "finished"})
    cells = [a_cell(inter_gbps=g) for g in (1, 2, 3, 4, 5, 6)]
    for c in cells:
        store.write_cell(c.id, cell_rows(c), None)
    damaged = {}
    for c, how in zip(cells, DAMAGES, strict=False):
        damage(store.cell_path(c.id), how)
        damaged[c.id] = how
    # a whole file under another cell's name
    other = store.cell_path(cells[-1].id)
    shutil.copy(store.cell_path(cells[-2].id), other)
    damaged[cells[-1].id] = "other"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_results(store.path)
    assert set(df["cell_id"]) == {c.id for c in cells} - set(damaged)
    lines = [str(w.message) for w in caught if w.category is ResultsWarning]
    assert len(lines) == len(damaged), lines
    for line in lines:
        assert "\n" not in line and "unreadable" in line and "gcbench run" in line
    assert {Path(line.split(": unreadable")[0]).stem for line in lines} == set(damaged)
    assert sorted(p.name for p in store.cells_dir.iterdir()) == sorted(
        f"{c.id}.parquet" for c in cells
    )  # a reader leaves the files where they are


def test_results_of_another_format_are_refused_naming_the_file(tmp_path):
    """Rows of another results format: a ConfigError naming the file and what to do (at
    81933ad, which wrote no format_version, they were read as if current)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    c = a_cell()
    for version in (1, FORMAT_VERSION + 1):
        store = RunStore(tmp_path / str(version) / "s" / "r")
        store.write_manifest({"suite": "s"})
        rows = cell_rows(c)
        if version == 1:  # as 81933ad wrote it: no format_version column, no checksum
            rows = [{k: v for k, v in r.items() if k != "format_version"} for r in rows]
            store.cells_dir.mkdir()
            pq.write_table(pa.Table.from_pylist(rows), store.cell_path(c.id))
        else:  # as a later gcbench might, with its checksum
            store.write_cell(c.id, [{**r, "format_version": version} for r in rows], None)
        with pytest.raises(ConfigError) as e:
            load_results(store.path)
        line = one_line(e.value)
        assert line.startswith(f"{store.cell_path(c.id)}: results format {version} ")
        assert f"reads format {FORMAT_VERSION}" in line and "--fresh" in line
    store = RunStore(tmp_path / "m" / "s" / "r")
    store.write_manifest({"suite": "s"})
    text = json.loads(store.manifest_path.read_text())
    store.manifest_path.write_text(json.dumps({**text, "format_version": 7}))
    with pytest.raises(ConfigError) as e:
        load_results(store.path)
    assert one_line(e.value).startswith(f"{store.manifest_path}: results format 7")


ODD_MANIFESTS = {
    "": "not valid JSON",
    "{not json": "not valid JSON",
    "\xff\xfe": "not valid JSON",
    "[1, 2]": "expected a JSON object, got list",
    '{"suite": 3}': "suite: expected str, got 3",
    '{"cells": "x"}': "cells: expected dict",
    '{"sessions": "two"}': "sessions: expected int",
    '{"status": "done"}': "status: expected one of",
    '{"grid": ["abc"]}': "grid.0: expected a cell id",
    '{"cells": {"total": -1}}': "cells.total: expected a count",
    '{"cluster": {"resources": {"CPU": "many"}}}': "cluster.resources",
    '{"suite": "../../escaped"}': "is not a suite name",
    '{"suite": "/abs/path"}': "is not a suite name",
}


@pytest.mark.parametrize("text", list(ODD_MANIFESTS))
def test_a_broken_or_odd_manifest_is_one_line_naming_it(tmp_path, text):
    """At 81933ad: JSONDecodeError or AttributeError tracebacks from the report and the
    runner, or no error at all (a suite of 3, cells "x", sessions "two")."""
    from gcbench.report import write_report

    store = RunStore(tmp_path / "results" / "s" / "r")
    store.write_manifest({"suite": "s"})
    c = a_cell()
    store.write_cell(c.id, cell_rows(c), None)
    store.manifest_path.write_bytes(text.encode("latin-1"))
    for read in (
        lambda: load_results(tmp_path / "results" / "s"),
        lambda: write_report(store.path, tmp_path / "out"),
        store.read_manifest,
    ):
        with pytest.raises(ConfigError) as e:
            read()
        line = one_line(e.value)
        assert line.startswith(f"{store.manifest_path}: ") and ODD_MANIFESTS[text] in line
        assert "--fresh" in line
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- random damage


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run folder as `gcbench run` leaves it (cells, traces, manifest)."""
    from gcbench.runner import run_suite

    tmp = tmp_path_factory.mktemp("finished")
    suite = tiny_suite(
        tmp,
        "name: tiny\nrepetitions: 2\ngrid:\n  model: [tiny-mlp, tiny-cnn]\n"
        "  strategy: [fp32, fp16]\n  network: [{inter_gbps: 10}]\n"
        "  cluster: [{machines: 2, gpus_per_machine: 2}]\n",
    )
    store = prefill(tmp / "results", suite, spans=True)
    assert len(list(store.traces_dir.iterdir())) == 4
    summary = run_suite(suite, tmp / "results")  # nothing to run: writes the manifest
    assert (summary.status, summary.grid, summary.ok, summary.skipped) == ("finished", 4, 0, 4)
    return store.path


DAMAGE = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 99), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 99), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("empty"), st.integers(0, 99), st.just(0.0), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 99), st.just(0.0), st.just(0)),
    st.tuples(st.just("append"), st.integers(0, 99), st.just(0.0), st.integers(0, 255)),
)


@settings(
    max_examples=3 * settings.default.max_examples // 5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(damages=st.lists(DAMAGE, min_size=1, max_size=4))
def test_random_damage_never_crashes_load_results_or_report(finished_run, damages):
    """Random byte-level damage to any file of a results folder: `load_results` and the
    report either work (leaving unreadable cells out, one warning line each) or raise a
    ConfigError of one line; nothing else."""
    from gcbench.report import write_report

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "results" / "tiny" / finished_run.name
        shutil.copytree(finished_run, run)
        files = sorted(p for p in run.rglob("*") if p.is_file())
        for how, which, where, byte in damages:
            path = files[which % len(files)]
            if not path.exists():
                continue
            data = path.read_bytes()
            at = min(int(where * len(data)), max(len(data) - 1, 0))
            if how == "flip" and data:
                path.write_bytes(data[:at] + bytes([data[at] ^ byte]) + data[at + 1 :])
            elif how == "truncate":
                path.write_bytes(data[:at])
            elif how == "empty":
                path.write_bytes(b"")
            elif how == "delete":
                path.unlink()
            elif how == "append":
                path.write_bytes(data + bytes([byte]) * 7)
        for read in (
            lambda: load_results(run.parent),
            lambda: load_results(run, all_cells=True),
            lambda: write_report(run, Path(tmp) / "report"),
        ):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    read()
                except ConfigError as e:
                    one_line(e)
            for w in caught:
                if w.category is ResultsWarning:
                    assert "\n" not in str(w.message)


# ---------------------------------------------------------------- writable paths


def _read_only(folder: str) -> bool:
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        return Path(folder).is_dir()
    os.close(fd)
    os.unlink(probe)
    return False


def test_check_writable_refuses_in_one_line_and_leaves_nothing(tmp_path):
    """The helper behind --results/--reports/--out (and --trace, with file=True)."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    long = "x" * 300
    cases = [
        (tmp_path / "afile", {}, "it is a file, not a folder"),
        (tmp_path / "afile" / "below", {}, "is a file, not a folder"),
        (tmp_path / long, {}, "too long"),
        (tmp_path / "adir", {"file": True}, "it is a folder"),
        (tmp_path / ("y" * 250), {"file": True}, "too long"),
        (Path("/dev/null"), {"file": True}, "not a regular file"),
    ]
    if _read_only("/sys"):  # a folder even root cannot write
        cases.append((Path("/sys/gcbench-test/results"), {}, "is not writable"))
    for path, kw, why in cases:
        with pytest.raises(ConfigError) as e:
            check_writable(path, "--results", **kw)
        line = one_line(e.value)
        assert line.startswith(f"--results: cannot write {path}: ") and why in line, line
    check_writable(tmp_path / "new" / "deeper", "--results")
    check_writable(tmp_path / "adir", "--results")
    check_writable(tmp_path / "adir" / "t.json", "--trace", file=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]
    assert list((tmp_path / "adir").iterdir()) == []


def test_check_writable_refuses_a_read_only_folder(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only folders (the /sys case covers root)")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ConfigError, match="is not writable"):
            check_writable(ro / "results", "--results")
    finally:
        ro.chmod(0o755)


def test_gzip_bombs_and_huge_files_stop_at_their_limits(tmp_path, monkeypatch):
    """A plan, a stored trace and a manifest are read within limits (issue #35 item 15: a
    3 MB gzip expanding to 3 GiB took 2.4 GB before a MemoryError; a 3 GiB sparse
    manifest was read whole): each a one-line error naming the file and the limit, with
    no more than the limit read or decompressed. Small limits here, the same code path."""
    import gzip

    from typer.testing import CliRunner

    from gcbench.cli import app
    from gcbench.plan import io as plan_io
    from gcbench.results import store as S

    bomb = gzip.compress(b" " * (4 * 2**20))  # 4 MiB of blanks in ~4 KiB
    monkeypatch.setattr(plan_io, "MAX_BYTES", 2**20)
    (tmp_path / "bomb.json.gz").write_bytes(bomb)
    r = CliRunner().invoke(app, ["simulate", "--model", "tiny-mlp", "--inter-gbps", "10", "--plan",
                                 str(tmp_path / "bomb.json.gz")])  # fmt: skip
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "bomb.json.gz: decompresses to more than 1,048,576 bytes" in r.stderr
    monkeypatch.setattr(S, "MAX_STORED_BYTES", 2**20)
    store, _ = RunStore.open(tmp_path / "r", "s")
    store.traces_dir.mkdir(parents=True)
    (store.traces_dir / "x.json.gz").write_bytes(bomb)
    with pytest.raises(ConfigError, match="x.json.gz: decompresses to more than 1,048,576"):
        list(S.iter_traces(store.path))
    monkeypatch.setattr(S, "MAX_MANIFEST_BYTES", 2**20)
    with open(store.manifest_path, "wb") as f:  # sparse: no disk used
        f.truncate(3 * 2**30)
    with pytest.raises(ConfigError, match="manifest.json: file is 3,221,225,472 bytes; manifest"):
        store.read_manifest()


def test_a_failed_cells_error_is_cut_to_its_limit():
    """A task's error is stored as its first line, cut to `MAX_ERROR_CHARS` (a one-line
    message of megabytes would make the cell file one no reader takes, issue #35)."""
    from gcbench.results.schema import MAX_ERROR_CHARS

    c = a_cell()
    (row, _) = cell_rows(c, error="RuntimeError: " + "x" * 10 * MAX_ERROR_CHARS)
    assert row["status"] == "failed" and len(row["error"]) == MAX_ERROR_CHARS
