"""The options a planner may choose from, after the user's constraints.

ByteComp §4.2 ("Expressiveness and extensibility"): users "manually add constraints to
prune the decision tree to rule out undesirable compression options", e.g. limiting the
number of compression operations per tensor. A cell's `constraints`
(`config.models.Constraints`) say:

- `space`: `all` (default) — every GPU path of the decision tree
  (`sim.options.enumerate_paths`: 174 for a non-additive compressor) plus the named ones
  it lacks (fp16); `named` — "no compression" (fp32) and the strategies inside bytecomp's
  space that issue #13 names (fp32-2level, fp16, allgather, allgather-2level), faster to
  plan;
- `max_compressions`: at most that many compression operations per tensor (0: never
  compress; an fp16 cast is not a compression);
- `collectives`: the collectives an option may use (every phase's);
- `levels`: `flat` or `hierarchical` options only;
- `gpu_only`: no CPU offload (Algorithm 2 is skipped).

`planner_space` applies them in that order and raises `PlanError` naming the first
constraint that leaves no option. Pure data: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gcbench.errors import PlanError
from gcbench.sim.options import PRESETS, Option, enumerate_paths

NAMED: tuple[Option, ...] = tuple(
    PRESETS[n] for n in ("fp32", "fp32-2level", "fp16", "allgather", "allgather-2level")
)
# ByteComp's option set for the brute-force comparison (issue #13): none, fp16, allgather,
# and HiTopKComm (allgather-2level).
BRUTE: tuple[Option, ...] = tuple(
    PRESETS[n] for n in ("fp32", "fp16", "allgather", "allgather-2level")
)


@dataclass(frozen=True)
class Space:
    """Algorithm 1's start (every tensor's option before it runs: the first uncompressed
    option left, else the first option) and the options it tries; `uniform`: those of the
    named strategies left (bytecomp keeps the best of its plan and these); `offload`:
    whether Algorithm 2 may move compressions to the CPU."""

    start: Option
    options: tuple[Option, ...]
    uniform: tuple[Option, ...]
    offload: bool


def _rules(constraints: Any) -> list[tuple[str, Any]]:
    """(the constraint as the user wrote it, a filter on options), in application order."""
    rules: list[tuple[str, Any]] = []
    if constraints is None:
        return rules
    n = constraints.max_compressions
    if n is not None:
        rules.append(
            (f"max_compressions={n}", lambda o: sum(1 for op in o.ops if op.op == "c") <= n)
        )
    allowed = constraints.collectives
    if allowed is not None:
        ok = frozenset(allowed)
        rules.append(
            (
                f"collectives=[{', '.join(allowed)}]",
                lambda o: all(p.collective in ok for p in o.phases),
            )
        )
    if constraints.levels != "any":
        want = constraints.levels == "hierarchical"
        rules.append((f"levels={constraints.levels}", lambda o: o.hierarchical == want))
    return rules


def _apply(options: Sequence[Option], rules: list[tuple[str, Any]], what: str) -> list[Option]:
    left = list(options)
    for name, keep in rules:
        kept = [o for o in left if keep(o)]
        if not kept:
            which = (
                f"{len(left)} {what}"
                if len(left) > 6
                else ", ".join(repr(o.name) for o in left)
            )
            after = " left by the constraints before it" if len(left) < len(options) else ""
            raise PlanError(
                f"constraint {name} leaves no option: none of {which}{after} follows it"
            )
        left = kept
    return left


@lru_cache(maxsize=256)  # constraints are frozen (hashable); grids ask again and again
def planner_space(constraints: Any = None, *, additive: bool = False) -> Space:
    """The planner's options under `constraints` (a `config.models.Constraints`; None: the
    defaults), for a compressor that is `additive` or not."""
    everything = constraints is None or constraints.space == "all"
    rules = _rules(constraints)
    if everything:
        paths = enumerate_paths(additive=additive)
        base = [*paths, *(o for o in NAMED if o not in paths)]
        what = "options of the whole space"
    else:
        base = list(NAMED)
        what = "named options"
    options = _apply(base, rules, what)
    uniform = tuple(o for o in NAMED if o in options)
    start = next((o for o in options if not o.compressed and not o.fp16), options[0])
    tried = tuple(o for o in options if o is not start)
    offload = not (constraints is not None and constraints.gpu_only)
    return Space(start, tried, uniform, offload)


@lru_cache(maxsize=256)
def brute_space(constraints: Any = None) -> tuple[Option, ...]:
    """Brute force's option set (`BRUTE`) under the constraints; `space` does not widen
    it (brute force stays over these four)."""
    return tuple(_apply(BRUTE, _rules(constraints), "options"))


def check_constraints(constraints: Any, strategy: str, additive: bool) -> None:
    """Raise PlanError if the constraints leave `strategy` (a planner) no option."""
    if strategy == "brute-force":
        brute_space(constraints)
    else:
        planner_space(constraints, additive=additive)
