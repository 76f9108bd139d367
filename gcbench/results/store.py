"""The on-disk layout of results (DESIGN §5 On disk) and the only code that writes it.

    results/<suite>/<run-id>/manifest.json
    results/<suite>/<run-id>/cells/<cell-id>.parquet     one row per repetition
    results/<suite>/<run-id>/traces/<cell-id>.json.gz    spans of the first repetition

Every file is written to a temporary name in the same folder, flushed, and renamed into
place, so a crash leaves either a whole file or none; leftover temporaries are removed
when a run is continued. A cell counts as finished when its parquet file exists (its
trace is written first).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gcbench.errors import ConfigError
from gcbench.files import TMP_PREFIX, atomic_write
from gcbench.results.schema import RUN_COLUMNS, TASK_META_COLUMNS

__all__ = ["RUN_COLUMNS", "TASK_META_COLUMNS", "RunStore", "load_results", "resolve_run"]

if TYPE_CHECKING:
    import pandas as pd



def new_run_id(now: dt.datetime | None = None) -> str:
    """A sortable UTC timestamp with microseconds, e.g. 20261122T021512.483921Z."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.%fZ")


def latest_run(suite_dir: Path) -> Path | None:
    """The newest run folder of a suite (run ids sort by time), or None."""
    if not suite_dir.is_dir():
        return None
    runs = sorted(p for p in suite_dir.iterdir() if (p / "manifest.json").is_file())
    return runs[-1] if runs else None


class RunStore:
    """One run folder: which cells are finished, and atomic writes of new ones."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.cells_dir = self.path / "cells"
        self.traces_dir = self.path / "traces"

    @classmethod
    def open(cls, results: Path, suite: str, fresh: bool = False) -> tuple[RunStore, bool]:
        """The latest run of `suite` under `results` (continued), or a new one.

        Returns the store and whether it continues an earlier run.
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
        if not self.cells_dir.is_dir():
            return set()
        return {
            p.stem for p in self.cells_dir.glob("*.parquet") if not p.name.startswith(TMP_PREFIX)
        }

    def remove_temporaries(self) -> int:
        n = 0
        for folder in (self.path, self.cells_dir, self.traces_dir):
            if folder.is_dir():
                for p in folder.glob(TMP_PREFIX + "*"):
                    p.unlink(missing_ok=True)
                    n += 1
        return n

    def read_manifest(self) -> dict[str, Any]:
        path = self.path / "manifest.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write(
            self.path / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode()
        )

    def write_cell(
        self, cell_id: str, rows: list[dict[str, Any]], spans: list[dict[str, Any]] | None
    ) -> Path:
        """Write one finished cell: its trace (if any), then its rows."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if spans:
            atomic_write(
                self.traces_dir / f"{cell_id}.json.gz",
                gzip.compress(json.dumps(spans).encode(), mtime=0),
            )
        table = pa.Table.from_pylist(rows)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        path = self.cells_dir / f"{cell_id}.parquet"
        atomic_write(path, sink.getvalue().to_pybytes())
        return path

    def cell_files(self) -> list[Path]:
        return sorted(
            p for p in self.cells_dir.glob("*.parquet") if not p.name.startswith(TMP_PREFIX)
        )


def resolve_run(path: Path) -> Path:
    path = Path(path)
    if (path / "manifest.json").is_file():
        return path
    run = latest_run(path)
    if run is None:
        raise ConfigError(
            f"{path}: not a gcbench run folder or suite folder "
            "(expected manifest.json, or runs that contain one)"
        )
    return run


def load_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per cell and repetition, from a run folder or a suite folder (latest run).

    Rows are sorted by cell id and repetition, so two runs of one suite compare row by row.
    """
    import pandas as pd
    import pyarrow.parquet as pq

    run = resolve_run(Path(path))
    frames = [pq.read_table(p).to_pandas() for p in RunStore(run).cell_files()]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values(["cell_id", "repetition"], kind="stable").reset_index(drop=True)


def iter_traces(run: Path) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    for p in sorted((Path(run) / "traces").glob("*.json.gz")):
        yield p.name.removesuffix(".json.gz"), json.loads(gzip.decompress(p.read_bytes()))
