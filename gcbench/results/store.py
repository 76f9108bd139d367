"""The on-disk layout of results (DESIGN §5 On disk) and the only code that writes it.

    results/<suite>/                                       locked by a run (flock)
    results/<suite>/<run-id>/manifest.json
    results/<suite>/<run-id>/cells/<cell-id>.parquet       one row per repetition
    results/<suite>/<run-id>/traces/<cell-id>.json.gz      spans of the first repetition
    results/<suite>/<run-id>/plans/<cell-id>.json.gz       a planner strategy's plan

Every file is written to a temporary name in the same folder, flushed, and renamed into
place, so a crash leaves either a whole file or none; leftover temporaries are removed
when a run is continued. A cell counts as finished when its parquet file exists (its
trace is written first).

A cell file carries parquet page checksums and, in its metadata, the sha256 of its
schema and rows (`table_digest`), so damage is found on reading even where the file
still parses; a file that cannot be read back exactly is *unreadable*: `gcbench run`
sets it aside (renames it) and runs the cell again, `load_results` and the report leave
it out with a `ResultsWarning`. Rows of another results format (`schema.FORMAT_VERSION`)
and a broken or odd manifest.json are a ConfigError naming the file and what to do.

The manifest's `grid` is the expanded cell ids of the latest `gcbench run` of the run
folder: `load_results` and the report show those cells (older cells stay on disk and come
back with `all_cells=True`).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gcbench.errors import ConfigError
from gcbench.files import TMP_PREFIX, atomic_write, gunzip_limited, read_limited
from gcbench.results.schema import (
    FORMAT_VERSION,
    MAX_CELL_BYTES,
    NUMERIC_COLUMNS,
    REQUIRED_COLUMNS,
    RUN_COLUMNS,
    TASK_META_COLUMNS,
)
from gcbench.results.schema import STATUSES as ROW_STATUSES

__all__ = [
    "RUN_COLUMNS",
    "TASK_META_COLUMNS",
    "ResultsWarning",
    "RunStore",
    "SuiteLock",
    "Unreadable",
    "load_results",
    "resolve_run",
    "suite_folder_name",
]

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MANIFEST = "manifest.json"
DIGEST_KEY = b"gcbench.sha256"  # parquet metadata: sha256 of the schema and rows
# Limits on what a run folder's files may hold (a larger one is a one-line error): the
# manifest (its grid of a million cell ids is ~70 MB) and each stored trace or plan,
# gzip-compressed and decompressed (one iteration's spans: a few MB for the largest models)
MAX_MANIFEST_BYTES = 256 * 2**20
MAX_STORED_BYTES = 64 * 2**20
SET_ASIDE = ".unreadable-"  # <cell-id>.parquet.unreadable-<time>: a damaged cell file
STATUSES = ("running", "finished", "failed", "interrupted", "incomplete")
# The same rule as `Suite.name`: a suite's name is one folder name, never a path.
SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
CELL_ID = re.compile(r"[0-9a-f]{64}")
MANIFEST_ADVICE = (
    "it describes the run: restore it, or start a new run with `gcbench run SUITE --fresh`"
)
FORMAT_ADVICE = (
    "start a new run with `gcbench run SUITE --fresh` (these results stay on disk), or "
    "read them with the gcbench version that wrote them"
)


class ResultsWarning(UserWarning):
    """Something in a results folder was left out (an unreadable cell file)."""


class Unreadable(Exception):
    """A cell file that cannot be read back as written; `why` says how, in a few words."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(f"{path}: unreadable ({why})")


def new_run_id(now: dt.datetime | None = None) -> str:
    """A sortable UTC timestamp with microseconds, e.g. 20261122T021512.483921Z."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.%fZ")


def latest_run(suite_dir: Path) -> Path | None:
    """The newest run folder of a suite (run ids sort by time), or None."""
    if not suite_dir.is_dir():
        return None
    runs = sorted(p for p in suite_dir.iterdir() if (p / MANIFEST).is_file())
    return runs[-1] if runs else None


def suite_folder_name(name: Any, where: str) -> str:
    """`name` if it is a suite's name (one folder name, as suites require), else a
    ConfigError naming `where` (the file it came from): it becomes a folder under
    results/ and reports/, so a path there would write anywhere."""
    if not isinstance(name, str) or not SUITE_NAME.fullmatch(name):
        raise ConfigError(
            [
                f"{where}: suite: {str(name)[:80]!r} is not a suite name (a letter or digit, "
                f"then letters, digits, '_', '.', '-'; at most 100); {MANIFEST_ADVICE}"
            ]
        )
    return name


def _short(e: BaseException, path: Path | None = None) -> str:
    """`Kind: first line of the message` (the file's name left out: the line names it)."""
    text = str(e).strip().splitlines()
    if not text:
        return type(e).__name__
    first = text[0]
    if path is not None:
        first = first.replace(f" '{path}'", "").replace(str(path), "the file")
    return f"{type(e).__name__}: {first[:160]}"


def table_digest(table: pa.Table) -> str:
    """sha256 of a table's column names and types and of its rows, as Python values."""
    h = hashlib.sha256()
    h.update(json.dumps([[f.name, str(f.type)] for f in table.schema]).encode())
    h.update(json.dumps(table.to_pylist(), sort_keys=True, default=repr).encode())
    return h.hexdigest()


def _check_manifest(path: Path, data: Any) -> dict[str, Any]:
    """The manifest as a dict, or a ConfigError naming the file and the odd field."""

    def bad(what: str) -> ConfigError:
        return ConfigError([f"{path}: {what}; {MANIFEST_ADVICE}"])

    if not isinstance(data, dict):
        raise bad(f"expected a JSON object, got {type(data).__name__}")
    text = (str,)
    types: dict[str, tuple[type, ...]] = {
        "suite": text,
        "description": text,
        "suite_hash": text,
        "suite_file": (str, type(None)),
        "gcbench_version": text,
        "status": text,
        "started_at": text,
        "finished_at": text,
        "interrupted_at": text,
        "versions": (dict,),
        "cluster": (dict,),
        "cells": (dict,),
        "grid": (list,),
        "last_session": (dict,),
        "only": (list,),
        "format_version": (int,),
        "sessions": (int,),
    }
    for key, allowed in types.items():
        if key in data and (
            not isinstance(data[key], allowed) or isinstance(data[key], bool)
        ):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise bad(f"{key}: expected {names}, got {json.dumps(data[key])[:60]}")
    version = data.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ConfigError(
            [
                f"{path}: results format {version} (gcbench "
                f"{data.get('gcbench_version', '?')}); this gcbench reads format "
                f"{FORMAT_VERSION}: {FORMAT_ADVICE}"
            ]
        )
    if "suite" in data:
        suite_folder_name(data["suite"], str(path))
    if "status" in data and data["status"] not in STATUSES:
        raise bad(f"status: expected one of {', '.join(STATUSES)}, got {data['status']!r:.60}")
    for key in ("cells", "last_session"):
        for k, v in data.get(key, {}).items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise bad(f"{key}.{k}: expected a count, got {json.dumps(v)[:60]}")
    for i, cid in enumerate(data.get("grid", [])):
        if not isinstance(cid, str) or not CELL_ID.fullmatch(cid):
            raise bad(f"grid.{i}: expected a cell id (64 hex digits), got {json.dumps(cid)[:80]}")
    scalar = str | int | float | bool | None
    for i, f in enumerate(data.get("only", [])):  # `--only` filters: column -> values
        if not isinstance(f, dict) or not all(
            isinstance(v, scalar) or (isinstance(v, list) and all(isinstance(x, scalar) for x in v))
            for v in f.values()
        ):
            raise bad(f"only.{i}: expected a column=value filter, got {json.dumps(f)[:60]}")
    if not isinstance(data.get("cluster", {}).get("nodes", []), list):
        raise bad("cluster.nodes: expected a list of the Ray nodes")
    resources = data.get("cluster", {}).get("resources", {})
    if not isinstance(resources, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in resources.values()
    ):
        raise bad("cluster.resources: expected numbers by resource name")
    return data


class RunStore:
    """One run folder: which cells are finished, and atomic writes of new ones."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.cells_dir = self.path / "cells"
        self.traces_dir = self.path / "traces"
        self.plans_dir = self.path / "plans"

    @classmethod
    def open(cls, results: Path, suite: str, fresh: bool = False) -> tuple[RunStore, bool]:
        """The latest run of `suite` under `results` (continued), or a new one.

        Returns the store and whether it continues an earlier run. Take the suite's
        `SuiteLock` first when writing: continuing removes leftover temporaries.
        """
        suite_dir = Path(results) / suite
        run = None if fresh else latest_run(suite_dir)
        if run is not None:
            store = cls(run)
            store.remove_temporaries()
            return store, True
        # Folders are made by the first write, so a run that fails to start leaves nothing.
        return cls(suite_dir / new_run_id()), False

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def suite(self) -> str:
        return self.path.parent.name

    def finished(self) -> set[str]:
        return {p.stem for p in self.cell_files()}

    def remove_temporaries(self) -> int:
        """Remove the temporary files a write left behind (`files.atomic_write`); anything
        else named like one (a folder) is not gcbench's and stays."""
        n = 0
        for folder in (self.path, self.cells_dir, self.traces_dir, self.plans_dir):
            if folder.is_dir():
                for p in folder.glob(TMP_PREFIX + "*"):
                    if p.is_symlink() or p.is_file():
                        p.unlink(missing_ok=True)
                        n += 1
        return n

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def read_manifest(self) -> dict[str, Any]:
        """The run's manifest ({} if there is none yet), checked: a file that is not JSON,
        not an object, has a field of the wrong type, another results format or a suite
        that is not a folder name is a ConfigError of one line naming it."""
        path = self.manifest_path
        if not os.path.lexists(path):
            return {}
        try:
            raw = read_limited(path, MAX_MANIFEST_BYTES, "manifest")
        except ConfigError as e:
            raise ConfigError([f"{e.messages[0]}; {MANIFEST_ADVICE}"]) from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError
            why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            raise ConfigError([f"{path}: not valid JSON ({why}); {MANIFEST_ADVICE}"]) from None
        return _check_manifest(path, data)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest = {**manifest, "format_version": FORMAT_VERSION}
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
        atomic_write(self.manifest_path, text.encode())

    def cell_path(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.parquet"

    def write_cell(
        self,
        cell_id: str,
        rows: list[dict[str, Any]],
        spans: list[dict[str, Any]] | None,
        plan: dict[str, Any] | None = None,
    ) -> Path:
        """Write one finished cell: its trace and plan (if any), then its rows, with
        parquet page checksums and the digest of the rows in the file's metadata."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if plan is not None:
            atomic_write(
                self.plans_dir / f"{cell_id}.json.gz",
                gzip.compress(json.dumps(plan).encode(), mtime=0),
            )
        if spans:
            atomic_write(
                self.traces_dir / f"{cell_id}.json.gz",
                gzip.compress(json.dumps(spans).encode(), mtime=0),
            )
        table = pa.Table.from_pylist(rows)
        table = table.replace_schema_metadata({DIGEST_KEY: table_digest(table).encode()})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, write_page_checksum=True)
        path = self.cell_path(cell_id)
        atomic_write(path, sink.getvalue().to_pybytes())
        return path

    def cell_files(self) -> list[Path]:
        if not self.cells_dir.is_dir():
            return []
        return sorted(
            p for p in self.cells_dir.glob("*.parquet") if not p.name.startswith(TMP_PREFIX)
        )

    def set_aside(self, path: Path) -> Path:
        """Rename an unreadable cell file out of the way (`<name>.unreadable-<time>`), so
        its cell counts as not run; returns the new path."""
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        target = path.with_name(f"{path.name}{SET_ASIDE}{stamp}")
        os.replace(path, target)
        return target


def read_cell(path: Path) -> pa.Table:
    """A cell file's rows, exactly as written, or `Unreadable` (the file cannot be
    parsed, a page checksum or the rows' digest does not match, or it holds another
    cell). Rows of another results format are a ConfigError naming the file."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except Exception as e:  # pyarrow raises many kinds for a damaged file
        raise Unreadable(path, _short(e, path)) from None
    digest = (table.schema.metadata or {}).get(DIGEST_KEY)
    if digest is not None:
        try:
            same = digest.decode("ascii") == table_digest(table)
        except Exception:  # a damaged table may not even convert
            same = False
        if not same:
            raise Unreadable(path, "its checksum does not match its contents")
    if not {"suite", "cell_id", "status"} <= set(table.column_names):  # no gcbench's rows
        raise Unreadable(path, "it holds no gcbench cell rows (no suite, cell_id, status)")
    versions = (
        set(table.column("format_version").to_pylist())
        if "format_version" in table.column_names
        else {1}  # format 1 had no format_version column
    )
    if versions != {FORMAT_VERSION}:
        version = ", ".join(str(v) for v in sorted(versions, key=str))
        made = (
            ", ".join(sorted({str(v) for v in table.column("gcbench_version").to_pylist()}))
            if "gcbench_version" in table.column_names
            else "?"
        )
        raise ConfigError(
            [
                f"{path}: results format {version} (written by gcbench {made}); this gcbench "
                f"reads format {FORMAT_VERSION}: {FORMAT_ADVICE}"
            ]
        )
    if digest is None:
        raise Unreadable(path, "it has no checksum")
    if "cell_id" not in table.column_names or set(table.column("cell_id").to_pylist()) != {
        path.stem
    }:
        raise Unreadable(path, "it holds the rows of another cell")
    _check_rows(table, path)
    return table


def _check_rows(table: pa.Table, path: Path) -> None:
    """`Unreadable` where the rows do not fit the Record schema (`results.schema`): a
    column every row holds is missing, a numeric column holds anything but finite numbers,
    or a status is not one gcbench writes. Such a file passes its checksum only if another
    tool wrote it: what reads results can take its rows as they are."""
    import pyarrow as pa

    if table.nbytes > MAX_CELL_BYTES:  # a crafted file: its strings would flood a report
        raise Unreadable(
            path, f"its rows hold {table.nbytes / 2**20:,.1f} MiB, more than a cell's "
            f"{MAX_CELL_BYTES // 2**20} MiB"
        )  # fmt: skip
    names = set(table.column_names)
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise Unreadable(path, f"it has no {', '.join(missing)} column")
    floats = []
    for c in NUMERIC_COLUMNS:
        if c not in names:
            continue
        kind = table.schema.field(c).type
        if pa.types.is_floating(kind):
            floats.append(c)
        elif not (pa.types.is_integer(kind) or pa.types.is_null(kind)):
            raise Unreadable(path, f"its {c} column holds {kind}, not numbers")
    for c, values in table.select(floats).to_pydict().items():  # a cell's few rows
        if not all(v is None or math.isfinite(v) for v in values):
            raise Unreadable(path, f"its {c} column holds a number that is not finite")
    odd = set(table.column("status").to_pylist()) - set(ROW_STATUSES)
    if odd:
        raise Unreadable(path, f"its status {sorted(map(str, odd))[0]!r} is not one gcbench writes")


class SuiteLock:
    """An exclusive `flock` on a suite's results folder, held while a run writes there.

    The folder itself is locked (no lock file is written), and the kernel releases the
    lock when the process ends, however it ends, so a lock is never stale. A second run
    gets a ConfigError naming the holder's pid, or with `wait` blocks until the holder
    is done (`on_wait` is told once, first).
    """

    def __init__(
        self,
        folder: Path,
        *,
        wait: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ):
        self.folder = Path(folder)
        self.wait = wait
        self.on_wait = on_wait
        self._fd: int | None = None

    def acquire(self) -> None:
        import fcntl

        told = False
        for _ in range(10):
            fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = lock_holder(self.folder)
                    who = f"pid {holder}" if holder else "another process"
                    if not self.wait:
                        raise ConfigError(
                            [
                                f"{self.folder}: another gcbench run ({who}) is writing this "
                                "suite's results; wait for it to end, or run again with --wait"
                            ]
                        ) from None
                    if self.on_wait and not told:
                        self.on_wait(f"waiting for the gcbench run ({who}) writing {self.folder}")
                        told = True
                    fcntl.flock(fd, fcntl.LOCK_EX)
                # The holder may have removed the folder (a run that failed to start does)
                # while this one waited: lock the folder that is there now.
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(self.folder))
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self._fd = fd
                return
            os.close(fd)
            self.folder.mkdir(parents=True, exist_ok=True)
        raise ConfigError([f"{self.folder}: the folder keeps being replaced; try again"])

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None

    def __enter__(self) -> SuiteLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(folder: Path) -> int | None:
    """The pid holding a flock on `folder`, from /proc/locks (Linux), or None."""
    try:
        st = os.stat(folder)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    exact = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    loose = None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
            continue
        pid, where = parts[4], parts[5]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        if where == exact:
            return int(pid)
        if where.rsplit(":", 1)[-1] == str(st.st_ino):
            loose = int(pid)  # overlay file systems report another device
    return loose


def resolve_run(path: Path) -> Path:
    """A run folder as given, or a suite folder's latest run; else a ConfigError."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such folder (give a run folder or a suite folder)")
    try:
        if (path / MANIFEST).is_file():
            return path
        run = latest_run(path)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or type(e).__name__})") from None
    if run is None:
        raise ConfigError(
            f"{path}: not a gcbench run folder or suite folder "
            "(expected manifest.json, or runs that contain one)"
        )
    return run


def load_results(path: str | os.PathLike[str], all_cells: bool = False) -> pd.DataFrame:
    """One row per cell and repetition, from a run folder or a suite folder (latest run).

    By default only the cells of the run's current grid (the latest `gcbench run`'s
    suite); `all_cells=True` adds the cells of earlier grids still on disk. A cell file
    that cannot be read back as written is left out with a `ResultsWarning` (`gcbench
    run` sets it aside and runs the cell again). Rows are sorted by cell id and
    repetition, so two runs of one suite compare row by row.
    """
    return cells_frame(read_cells(resolve_run(Path(path)), all_cells))


def cells_frame(tables: list[pa.Table]) -> pd.DataFrame:
    """Cell tables as one DataFrame sorted by cell id and repetition: one arrow
    concatenation and conversion, far faster than a DataFrame per cell file (a column
    typed two ways across cells falls back to pandas' concatenation)."""
    import pandas as pd
    import pyarrow as pa

    if not tables:
        return pd.DataFrame()
    try:
        df = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        df = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
    return df.sort_values(["cell_id", "repetition"], kind="stable").reset_index(drop=True)


def read_cells(
    run: Path, all_cells: bool = False, progress: Callable[[int, int], None] | None = None
) -> list[pa.Table]:
    """The readable cell tables of a run folder (see `load_results`); `progress(done,
    total)` after each file."""
    store = RunStore(run)
    grid = store.read_manifest().get("grid")
    keep = None if all_cells or grid is None else set(grid)
    tables = []
    files = [p for p in store.cell_files() if keep is None or p.stem in keep]
    for done, p in enumerate(files, start=1):
        if progress is not None:
            progress(done, len(files))
        try:
            tables.append(read_cell(p))
        except Unreadable as e:
            warnings.warn(
                f"{e}; left out (`gcbench run` sets it aside and runs the cell again)",
                ResultsWarning,
                stacklevel=3,
            )
    return tables


def read_plan(run: str | os.PathLike[str], cell_id: str) -> dict[str, Any]:
    """The stored plan of a planner strategy's cell (`plans/<cell-id>.json.gz`)."""
    path = Path(run) / "plans" / f"{cell_id}.json.gz"
    try:
        return dict(read_stored(path, "plan"))
    except (OSError, ValueError, EOFError) as e:
        raise ConfigError([f"{path}: cannot read the plan ({_short(e)})"]) from None


def iter_traces(run: Path) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    for p in sorted((Path(run) / "traces").glob("*.json.gz")):
        yield p.name.removesuffix(".json.gz"), read_stored(p, "trace")


def read_stored(path: Path, what: str) -> Any:
    """A stored trace or plan (gzip JSON), read and decompressed within
    `MAX_STORED_BYTES` (a ConfigError beyond: a "gzip bomb" expands no further)."""
    raw = read_limited(path, MAX_STORED_BYTES, what)
    return json.loads(gunzip_limited(raw, MAX_STORED_BYTES, str(path), what))
