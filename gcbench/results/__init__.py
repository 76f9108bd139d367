"""Results on disk: atomic per-cell parquet files, run manifests, loading into pandas."""

from gcbench.results.store import RunStore, latest_run, load_results, read_plan

__all__ = ["RunStore", "latest_run", "load_results", "read_plan"]
