"""Grid expansion: a Suite's axes -> the Cells it runs, after filters.

The grid is counted from its axis lengths before anything is expanded (`grid_points`), so
a suite of 10^9 points is refused at once rather than after minutes and gigabytes;
expansion itself is lazy (`iter_cells`), applying the filters (`include`, `exclude`,
`--only`) to each cell as it is made. Filter values are normalised through the cell
schema (`models.normalise_filter_value`) when a suite is loaded or `--only` is parsed.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gcbench import strategies
from gcbench.config.filters import FILTER_KEYS, normalise_filter_value
from gcbench.config.models import Cell, Suite
from gcbench.errors import ConfigError

AXES = ("model", "compressor", "network", "cluster", "strategy", "fusion")
# What `gcbench validate` and `gcbench run` expand at most unless told otherwise
# (--max-cells): 10^6 cells take about 1.3 GB and 20 s on a 2-core host
# (benchmarks/grid.py).
MAX_CELLS = 1_000_000


def matches(flat: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
    """True if every key of the filter holds: equal to the value, or to one of a list."""
    for key, want in flt.items():
        options = want if isinstance(want, list) else [want]
        have = flat.get(key)
        if not any(_equal(have, o) for o in options):
            return False
    return True


def _equal(have: Any, want: Any) -> bool:
    if isinstance(have, bool) or isinstance(want, bool):
        return have is want
    if isinstance(have, (int, float)) and isinstance(want, (int, float)):
        return float(have) == float(want)
    return str(have) == str(want)


def grid_points(suite: Suite) -> int:
    """The number of points of the grid: the product of its axis lengths (cells before
    pairs are dropped and filters applied), computed without expanding anything."""
    return math.prod(len(getattr(suite.grid, axis)) for axis in AXES)


def check_size(suite: Suite, max_cells: int | None, where: str | None = None) -> int:
    """`grid_points(suite)`, or a ConfigError (one line) if that exceeds `max_cells`."""
    points = grid_points(suite)
    if max_cells is not None and points > max_cells:
        g = suite.grid
        sizes = " × ".join(
            f"{axis} {len(getattr(g, axis)):,}" for axis in AXES if len(getattr(g, axis)) > 1
        )
        raise ConfigError(
            f"{where or f'suite {suite.name!r}'}: grid: {points:,} grid points ({sizes}), "
            f"more than the {max_cells:,} allowed; split the suite, or raise --max-cells"
        )
    return points


@dataclass
class FilterWarning:
    """A filter that matched no cell: `loc` is `("include", i)`, `("exclude", i)` or
    `("--only", key)`; `text` says what it tested."""

    loc: tuple[str | int, ...]
    text: str

    def __str__(self) -> str:
        if self.loc[0] == "--only":
            return f"--only {self.text}: matches no cell"
        return f"{'.'.join(map(str, self.loc))}: {self.text} matches no cell"


@dataclass
class Expansion:
    """What a suite expands to: its cells (in axis order, once each), how many grid points
    each reason dropped, and the filters that matched nothing."""

    cells: list[Cell]
    dropped: Counter[str] = field(default_factory=Counter)
    warnings: list[FilterWarning] = field(default_factory=list)
    points: int = 0


class NoCellsLeft(ConfigError):
    """The filters left no cell; `warnings` says which of them matched nothing."""

    def __init__(self, messages: list[str], warnings: list[FilterWarning]):
        super().__init__(messages)
        self.warnings = warnings


class _Tally:
    """Which filters matched at least one cell while expanding."""

    def __init__(self, suite: Suite, only: list[Mapping[str, Any]]):
        self.include = [False] * len(suite.include)
        self.exclude = [False] * len(suite.exclude)
        self.only = [False] * len(only)
        self.survived = 0

    def warnings(self, suite: Suite, only: list[Mapping[str, Any]]) -> list[FilterWarning]:
        out = []
        for name, filters, hit in (
            ("include", suite.include, self.include),
            ("exclude", suite.exclude, self.exclude),
        ):
            for i, (f, ok) in enumerate(zip(filters, hit, strict=True)):
                if not ok:
                    out.append(FilterWarning((name, i), _show(f)))
        for flag, ok in zip(only, self.only, strict=True):
            if not ok:
                key = next(iter(flag))
                out.append(FilterWarning(("--only", key), _show(flag, "=")))
        return out


def _show(flt: Mapping[str, Any], sep: str = ": ") -> str:
    def value(v: Any) -> str:
        if isinstance(v, list):
            return value(v[0]) if len(v) == 1 else "[" + ", ".join(value(x) for x in v) + "]"
        return f"{v:g}" if isinstance(v, float) else str(v)

    inner = ", ".join(f"{k}{sep}{value(v)}" for k, v in flt.items())
    return inner if sep == "=" else "{" + inner + "}"


def iter_cells(
    suite: Suite,
    only: Iterable[Mapping[str, Any]] = (),
    dropped: Counter[str] | None = None,
    tally: _Tally | None = None,
) -> Iterator[Cell]:
    """The grid's cells one at a time, in axis order, filtered (not deduplicated: the same
    cell may come twice when two axis values spell it alike). Pairs a strategy does not
    take are counted in `dropped`; `tally` records which filters matched a cell."""
    g = suite.grid
    only = list(only)
    if dropped is None:
        dropped = Counter()
    if tally is None:
        tally = _Tally(suite, only)
    # A (strategy, compressor) or (strategy, CPU servers) pair's fate is the same on
    # every other axis: decide each once.
    specs: dict[tuple[int, int], tuple[Any, str | None]] = {}
    servers: dict[tuple[int, int], str | None] = {}
    for model, (c, comp), net, cluster, (s, strategy), fusion in itertools.product(
        g.model, enumerate(g.compressor), g.network, g.cluster, enumerate(g.strategy), g.fusion
    ):
        if (s, c) not in specs:
            specs[s, c] = strategies.pair_compressor(strategy, comp)
        spec, why = specs[s, c]
        if why is None:
            if (s, cluster.cpu_servers) not in servers:
                servers[s, cluster.cpu_servers] = strategies.pair_cluster(
                    strategy, cluster.cpu_servers
                )
            why = servers[s, cluster.cpu_servers]
        if why is not None:
            dropped[why] += 1
            continue
        tally.survived += 1
        cell = Cell(
            model=model,
            compressor=spec,
            network=net,
            cluster=cluster,
            strategy=strategy,
            fusion=fusion,
            device=suite.device,
            **suite.how(),
            seed=suite.seed,
            compressor_costs=suite.compressor_costs,
            constraints=suite.constraints if strategies.get(strategy).planner else None,
        )
        if not (suite.include or suite.exclude or only):
            yield cell
            continue
        # Every filter is tried, so that one matching no cell can be reported.
        flat = cell.flat()
        kept = not suite.include
        for i, f in enumerate(suite.include):
            if matches(flat, f):
                tally.include[i] = kept = True
        if not kept:
            continue
        for i, f in enumerate(suite.exclude):
            if matches(flat, f):
                tally.exclude[i] = True
                kept = False
        if not kept:
            continue
        for i, flag in enumerate(only):
            if matches(flat, flag):
                tally.only[i] = True
            else:
                kept = False
        if kept:
            yield cell


def expand_suite(
    suite: Suite,
    only: Iterable[Mapping[str, Any]] = (),
    max_cells: int | None = None,
    where: str | None = None,
) -> Expansion:
    """Count the grid (a ConfigError past `max_cells`, before anything is expanded), then
    expand it lazily: the cells that pass the filters, deduplicated by id, the dropped
    pairs counted per reason, and a warning per filter that matched no cell.

    ConfigError when every pair of the grid is dropped, or `NoCellsLeft` (a ConfigError
    carrying the warnings) when the filters leave no cell (`where` names the suite in
    that line: its file).
    """
    where = where or f"suite {suite.name!r}"
    points = check_size(suite, max_cells, where)
    only = list(only)
    cells, dropped, tally = _expand(suite, only, where)
    warnings = tally.warnings(suite, only)
    if not cells:
        which = "include/exclude" + ("/--only" if only else "")
        raise NoCellsLeft([f"{where}: no cells left after the {which} filters"], warnings)
    return Expansion(cells, dropped, warnings, points)


def _expand(
    suite: Suite, only: list[Mapping[str, Any]], where: str
) -> tuple[list[Cell], Counter[str], _Tally]:
    """The cells (deduplicated by id, in axis order), the dropped pairs per reason and the
    filters' tally; a ConfigError when every pair of the grid is dropped."""
    dropped: Counter[str] = Counter()
    tally = _Tally(suite, only)
    cells: dict[str, Cell] = {}
    for cell in iter_cells(suite, only, dropped, tally):
        cells.setdefault(cell.id, cell)
    if not tally.survived and dropped:
        reasons = "; ".join(f"{n} × {why}" for why, n in dropped.items())
        raise ConfigError([f"{where}: every cell of the grid was dropped: {reasons}"])
    return list(cells.values()), dropped, tally


def expand(suite: Suite, only: Iterable[Mapping[str, Any]] = ()) -> list[Cell]:
    """Every cell of the grid, in axis order, once each (`expand_counted` without the
    counts of dropped pairs)."""
    return expand_counted(suite, only)[0]


def expand_counted(
    suite: Suite, only: Iterable[Mapping[str, Any]] = ()
) -> tuple[list[Cell], Counter[str]]:
    """Every cell of the grid, in axis order, once each, and how many grid points each
    reason dropped.

    Each strategy says what it takes (`gcbench.strategies`): strategies without a
    compressor run with `none` and those with their own compressor with theirs, so
    crossing them with a compressor axis does not repeat them; a (strategy, compressor) or
    (strategy, cluster) pair the strategy does not take is dropped, with its reason.
    `include` keeps cells matching any of its filters (when given), `exclude` drops cells
    matching any, and each `only` filter (from `gcbench run --only`) must hold. A grid
    whose pairs are all dropped is a ConfigError; filters that leave no cell give an
    empty list here (`expand_suite` makes that an error and reports unmatched filters).
    """
    cells, dropped, _ = _expand(suite, list(only), f"suite {suite.name!r}")
    return cells, dropped


def parse_only(items: Iterable[str]) -> list[dict[str, Any]]:
    """`--only key=value` flags -> filters, values normalised as in a suite's filters; the
    same key twice means either value. `key=[a, b]` (a YAML flow list) means any of them.
    Every mistake is a ConfigError of one line naming the flag."""
    import yaml

    merged: dict[str, list[Any]] = {}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"--only {item!r}: expected key=value, e.g. --only machines=2")
        if key not in FILTER_KEYS:
            raise ConfigError(
                f"--only {item!r}: unknown key {key!r}; valid: {', '.join(FILTER_KEYS)}"
            )
        value: Any = text.strip()
        if value.startswith("["):
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as e:
                what = str(getattr(e, "problem", None) or "invalid YAML")
                raise ConfigError(
                    f"--only {item!r}: {what}; a list looks like {key}=[1,2]"
                ) from None
            if not isinstance(value, list):
                raise ConfigError(f"--only {item!r}: a list looks like {key}=[1,2]")
        try:
            normal = normalise_filter_value(key, value)
        except ValueError as e:
            raise ConfigError(f"--only {item!r}: {key}: {e}") from None
        merged.setdefault(key, []).extend(normal if isinstance(normal, list) else [normal])
    return [{k: v} for k, v in merged.items()]
