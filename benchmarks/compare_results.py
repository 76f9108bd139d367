"""Compare two gcbench results folders suite by suite: are the records the same?

    python benchmarks/compare_results.py BASELINE_RESULTS NEW_RESULTS [--rtol 1e-9]

For each suite folder in either (its latest run; its grid's cells, as `load_results`
reads them, digests checked) it compares
- the rows, matched by cell id and repetition: every column, floats within `rtol` of the
  larger magnitude, integers, strings and the rest exactly, two missing values equal;
  but not `EXCLUDED` (wall clocks, process and node ids, the package version);
- each cell's plan (`plans/<cell-id>.json.gz`, what `plan_file` names): every field,
  numbers within `rtol`, but not the planner's wall times (`PLAN_EXCLUDED`);
- each cell's trace (`traces/<cell-id>.json.gz`, the first repetition's spans), span by
  span in stored order, every field; and the manifest but for `MANIFEST_EXCLUDED`.
Rows timed on the wall clock (emulation with `clock: wall`) are measured, not computed:
there `WALL_TIMED`, the plan's `predicted_iteration_s` (the measured iteration) and the
spans' `SPAN_TIMES` are left out too, and the spans are compared sorted (as a multiset).
Prints a line per suite (and its first differences) and a verdict; exits 0 if all equal.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import numbers
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gcbench.results.store import load_results, resolve_run

KEYS = ["cell_id", "repetition"]
EXCLUDED = {  # row columns never compared, and why
    "run_id": "the run folder's name: when the run started",
    "run_started_at": "Unix time the cell's Ray task started",
    "run_wall_s": "wall-clock seconds the cell's Ray task took",
    "run_pid": "process id of the Ray worker that ran the cell",
    "run_node": "id of the Ray node, new with every Ray instance",
    "planner_s": "wall-clock seconds the planner took (perf_counter)",
    "gcbench_version": "the package's version, which may be bumped: a label, not a result",
}
# Measured on wall-clock rows (clock: wall), so different every run; as are their spans' times
WALL_TIMED = ("iteration_s throughput scaling_factor compute_s compress_exposed_s comm_exposed_s "
              "comm_total_s compress_total_s inter_comm_s bubbles_s").split()  # fmt: skip
SPAN_TIMES = ["start_s", "dur_s"]
PLAN_EXCLUDED = ("planner_s", "planner_parts.*_s")  # the planner's wall time and its parts
MANIFEST_EXCLUDED = {  # manifest keys never compared, and why
    "started_at": "a timestamp", "finished_at": "a timestamp", "interrupted_at": "a timestamp",
    "versions": "Python's and Ray's versions here", "gcbench_version": "as in the rows",
    "cluster": "the Ray instance's memory and node addresses on this host",
    "sessions": "how many `gcbench run`s made it", "last_session": "what the last one ran",
}  # fmt: skip


class Tally:
    """What one suite's comparison found: the largest relative difference and where."""

    def __init__(self, rtol: float):
        self.rtol, self.worst, self.where, self.diffs = rtol, 0.0, "", []

    def add(self, rel: float, where: str, *values: object) -> None:
        if rel > self.worst:
            self.worst, self.where = rel, f" at {where}"
        if rel > self.rtol:
            self.diffs.append(where + (": {!r:.80} vs {!r:.80}".format(*values) if values else ""))


def rel_diff(a: object, b: object) -> float:
    """0 for equal values (two missing ones too); |a-b| / max(|a|, |b|) when one is a
    float and both are numbers; else inf for any difference (ints, strings: exact)."""
    gone = [v is None or v is pd.NA or isinstance(v, float) and math.isnan(v) for v in (a, b)]
    if any(gone):
        return 0.0 if all(gone) else math.inf
    real = [isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_) for v in (a, b)]
    if all(real) and any(not isinstance(v, numbers.Integral) for v in (a, b)):
        return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))
    return 0.0 if a == b and real[0] == real[1] else math.inf  # True is no 1 here


def compare_columns(a: pd.DataFrame, b: pd.DataFrame, cols, label, tally: Tally) -> None:
    """Compare `cols` of two frames of equal length; `label(i, col)` names an entry."""
    for col in cols:
        x, y = np.empty(len(a), dtype=object), np.empty(len(b), dtype=object)  # 1-d: arrow's
        x[:], y[:] = ([v.tolist() if isinstance(v, np.ndarray) else v for v in d[col]]
                      for d in (a, b))  # fmt: skip  # list cells (arrays) go in as lists
        for i in np.flatnonzero(x != y):  # only unequal entries need a closer look
            tally.add(rel_diff(x[i], y[i]), label(i, col), x[i], y[i])


def compare_json(a: object, b: object, path: str, tally: Tally, skip=()) -> None:
    """Walk two JSON values together; keys in `skip` ('k', or 'k.*_s' below k) left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in skip or ("*_s" in skip and k.endswith("_s")):
                continue
            if k not in a or k not in b:
                tally.add(math.inf, f"{path}.{k} only in {'new' if k in b else 'baseline'}")
                continue
            below = [s.split(".", 1)[1] for s in skip if s.startswith(k + ".")]
            compare_json(a[k], b[k], f"{path}.{k}", tally, below)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            compare_json(u, v, f"{path}[{i}]", tally, skip)
    elif isinstance(a, dict | list) or isinstance(b, dict | list):
        size = [len(v) if isinstance(v, dict | list) else v for v in (a, b)]
        tally.add(math.inf, f"{path} (shape or length)", *size)
    else:
        tally.add(rel_diff(a, b), path, a, b)


def compare_files(runs: tuple[Path, Path], cid: str, wall: bool, tally: Tally) -> tuple[int, int]:
    """One cell's plan and trace; returns whether each was there to compare."""
    files = [[r / kind / f"{cid}.json.gz" for r in runs] for kind in ("plans", "traces")]
    plan, trace = ([json.loads(gzip.decompress(p.read_bytes())) if p.is_file() else None
                    for p in pair] for pair in files)  # fmt: skip
    has = plan != [None, None], trace != [None, None]
    skip = PLAN_EXCLUDED + ("predicted_iteration_s",) * wall  # wall: a measured time
    compare_json(*plan, f"plan {cid[:12]}", tally, skip)  # (no-op when neither has one)
    if None in trace or len(trace[0]) != len(trace[1]):  # no spans to compare one by one
        if has[1]:
            tally.add(math.inf, f"trace {cid[:12]}: spans", *(len(t or []) for t in trace))
        return has
    sa, sb = pd.DataFrame(trace[0]), pd.DataFrame(trace[1])
    if list(sa.columns) != list(sb.columns):
        tally.add(math.inf, f"trace {cid[:12]} span fields", list(sa.columns), list(sb.columns))
    fields = [c for c in sa.columns if c in sb.columns and not (wall and c in SPAN_TIMES)]
    if wall:  # spans are stored by start time, which the wall clock reorders: sort them
        sa, sb = (t.sort_values(fields, kind="stable", ignore_index=True) for t in (sa, sb))
    name = sa["name"] if "name" in sa else [""] * len(sa)
    compare_columns(sa, sb, fields, lambda i, c: f"trace {cid[:12]} [{i}] {name[i]} {c}", tally)
    return has


def compare_suite(base: Path, new: Path, tally: Tally) -> str:
    """Compare one suite's latest runs; returns the counts for its summary line."""
    runs = resolve_run(base), resolve_run(new)
    ma, mb = (json.loads((r / "manifest.json").read_text()) for r in runs)
    compare_json(*({k: v for k, v in m.items() if k not in MANIFEST_EXCLUDED} for m in (ma, mb)),
                 "manifest", tally)  # fmt: skip
    a, b = (load_results(r) for r in runs)
    empty = pd.DataFrame(columns=[*KEYS, "clock", "model", "strategy", "compressor"])
    a, b = (df if len(df) else empty for df in (a, b))
    ids_a, ids_b = set(a.cell_id), set(b.cell_id)
    for cid in sorted(ids_a ^ ids_b):
        tally.add(math.inf, f"cell {cid[:12]} only in {'baseline' if cid in ids_a else 'new'}")
    a, b = (df[df.cell_id.isin(ids_a & ids_b)].set_index(KEYS, drop=False) for df in (a, b))
    for side, df, other in (("baseline", a, b), ("new", b, a)):
        for cid, rep in df.index.difference(other.index):
            tally.add(math.inf, f"row {cid[:12]} r{rep} only in {side}")
    a, b = (df.loc[a.index.intersection(b.index)].reset_index(drop=True) for df in (a, b))
    for col in sorted(set(a.columns) ^ set(b.columns)):
        tally.add(math.inf, f"column {col} only in {'baseline' if col in a else 'new'}")
    cols = [c for c in a.columns if c in b.columns and c not in EXCLUDED]
    wall = (a["clock"].eq("wall") | b["clock"].eq("wall")).to_numpy()
    a.loc[wall, a.columns.intersection(WALL_TIMED)] = None  # measured on a real clock:
    b.loc[wall, b.columns.intersection(WALL_TIMED)] = None  # left out
    what = [f"{m} {s} {c} {i[:12]} r{r}" for m, s, c, i, r in zip(*(a[k] for k in (
        "model", "strategy", "compressor", "cell_id", "repetition")), strict=True)]  # fmt: skip
    compare_columns(a, b, cols, lambda i, col: f"{what[i]} {col}", tally)
    cells = dict(zip(a.cell_id, wall.tolist(), strict=True))  # the first repetition's trace
    found = [compare_files(runs, c, w, tally) for c, w in cells.items()]
    plans, traces = (sum(f[i] for f in found) for i in (0, 1))
    return (
        f"{len(ids_a & ids_b)} cells matched, {len(ids_a - ids_b)} only in baseline, "
        f"{len(ids_b - ids_a)} only in new, {len(cols)} columns, {plans} plans, {traces} traces"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("roots", nargs=2, type=Path, metavar="RESULTS", help="baseline, new")
    p.add_argument("--rtol", type=float, default=1e-9, help="relative tolerance for floats")
    p.add_argument("--show", type=int, default=10, help="differences listed per suite")
    args = p.parse_args()
    suites = sorted({d.name for r in args.roots if r.is_dir() for d in r.iterdir() if d.is_dir()})
    print(f"not compared: {', '.join(EXCLUDED)}; on wall-clock rows {', '.join(WALL_TIMED)}")
    bad = [] if suites else ["(no suites found)"]
    for name in suites:
        tally = Tally(args.rtol)
        there = [any((r / name).glob("*/manifest.json")) for r in args.roots]  # a run of it
        if all(there):
            counts = compare_suite(args.roots[0] / name, args.roots[1] / name, tally)
        else:
            counts = f"no run in {'new' if there[0] else 'baseline'}"
            tally.add(math.inf, counts)
        verdict = f"DIFFERENT ({len(tally.diffs)} differences)" if tally.diffs else "same"
        print(f"{name}: {counts}; max rel diff {tally.worst:.3g}{tally.where}: {verdict}")
        print("".join(f"    {line}\n" for line in tally.diffs[: args.show]), end="")
        bad += [name] if tally.diffs else []
    print(f"VERDICT: {'DIFFERENT: ' + ', '.join(bad) if bad else 'all the same'} "
          f"({len(suites)} suites, rtol {args.rtol:g})")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
