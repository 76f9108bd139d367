"""Grid expansion: a Suite's axes -> the list of Cells it runs, after filters."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gcbench.config.models import FILTER_KEYS, Cell, Suite
from gcbench.config.strategies import pair_cluster, pair_compressor
from gcbench.errors import ConfigError


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


def expand(suite: Suite, only: Iterable[Mapping[str, Any]] = ()) -> list[Cell]:
    """Every cell of the grid, in axis order, once each (`expand_counted` without the
    counts of dropped pairs)."""
    return expand_counted(suite, only)[0]


def expand_counted(
    suite: Suite, only: Iterable[Mapping[str, Any]] = ()
) -> tuple[list[Cell], Counter[str]]:
    """Every cell of the grid, in axis order, once each, and how many grid points each
    reason dropped.

    Each strategy says what it takes (`gcbench.config.strategies`): strategies without a
    compressor run with `none` and those with their own compressor with theirs, so
    crossing them with a compressor axis does not repeat them; a (strategy, compressor) or
    (strategy, cluster) pair the strategy does not take is dropped, with its reason.
    `include` keeps cells matching any of its filters (when given), `exclude` drops cells
    matching any, and each `only` filter (from `gcbench run --only`) must hold. A grid
    whose pairs are all dropped is a ConfigError.
    """
    g = suite.grid
    only = list(only)
    cells: dict[str, Cell] = {}
    dropped: Counter[str] = Counter()
    survived = 0
    for model, comp, net, cluster, strategy, fusion in itertools.product(
        g.model, g.compressor, g.network, g.cluster, g.strategy, g.fusion
    ):
        spec, why = pair_compressor(strategy, comp)
        why = why or pair_cluster(strategy, cluster.cpu_servers)
        if why is not None:
            dropped[why] += 1
            continue
        survived += 1
        cell = Cell(
            model=model,
            compressor=spec,
            network=net,
            cluster=cluster,
            strategy=strategy,
            fusion=fusion,
            device=suite.device,
            mode=suite.mode,
            seed=suite.seed,
        )
        flat = cell.flat()
        if suite.include and not any(matches(flat, f) for f in suite.include):
            continue
        if any(matches(flat, f) for f in suite.exclude):
            continue
        if not all(matches(flat, f) for f in only):
            continue
        cells.setdefault(cell.id, cell)
    if not survived and dropped:
        reasons = "; ".join(f"{n} × {why}" for why, n in dropped.items())
        raise ConfigError([f"suite {suite.name!r}: every cell of the grid was dropped: {reasons}"])
    return list(cells.values()), dropped


def parse_only(items: Iterable[str]) -> list[dict[str, Any]]:
    """`--only key=value` flags -> filters; the same key twice means either value."""
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
        merged.setdefault(key, []).append(yaml.safe_load(text) if text.strip() else "")
    return [{k: v} for k, v in merged.items()]
