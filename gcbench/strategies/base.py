"""The strategy registry: one class per strategy, registered once under its name.

A strategy declares what it takes from a grid (its compressor and its CPU servers), where
it comes from (`source`), and how it runs: `build` turns a cell's profile and costs into
the steps of one period (`Step`: a plan, the costs it runs with, a weight), `executed`
says what an emulated worker runs for each bucket of a plan, and `memory_kind` which
error-feedback memory its compressor keeps there.

What a strategy takes, per axis (drops are decided per pair of axis values, never per
cell; `gcbench validate` prints how many cells each reason dropped):

- `compressor`: `none` (runs once, with compressor `none`), `own` (runs once, with its
  own compressor kind: the grid's spec of that kind if the axis has one, else the kind's
  defaults), `additive` (a compressor whose payloads sum: others are dropped), `any`
  (any but the kinds that are strategies of their own: powersgd, acpsgd, covap);
- `servers`: `none` (cells with `cpu_servers` > 0 are dropped), `optional`, `required`
  (cells without CPU servers are dropped).

`planner = True` marks a strategy that searches per cell (it takes the suite's
`constraints`, and its cell stores the plan it made).

Registering a name (or an alias) that is taken raises `StrategyError`, one line. Users
register their own strategies with `register` (a class decorator) in a module that an
entry point of the group `gcbench.strategies` names, so that every process gcbench
starts (the CLI, Ray's workers) loads it (`docs/architecture.md`, "Your own strategy").
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from gcbench.compress.specs import ADDITIVE, KINDS
from gcbench.errors import ConfigError

if TYPE_CHECKING:
    from gcbench.sim.iteration import Costs, Plan
    from gcbench.sim.options import Option
    from gcbench.zoo.profile import ModelProfile

ENTRY_POINTS = "gcbench.strategies"  # the entry-point group of users' strategies


class StrategyError(ValueError):
    """A strategy that cannot be registered (a name taken, a declaration out of range)."""


@dataclass(frozen=True)
class Step:
    """One step of a strategy's period."""

    plan: Plan
    costs: Costs
    weight: float = 1.0
    planner_s: float = 0.0  # wall time of the planner that made this plan (gcbench.plan)
    planner_parts: dict[str, float] = field(default_factory=dict)  # planner_s by stage


class Strategy(ABC):
    """A named strategy; subclass it, set the class attributes, implement `build`."""

    name: ClassVar[str]
    description: ClassVar[str]
    source: ClassVar[str] = ""  # the paper and section it follows
    compressor: ClassVar[Literal["none", "own", "additive", "any"]] = "none"
    own: ClassVar[str | None] = None  # the compressor kind of an `own` strategy
    servers: ClassVar[Literal["none", "optional", "required"]] = "none"
    planner: ClassVar[bool] = False
    # False for a bound (`upper-bound`): what no one can run, never a report's winner
    runnable: ClassVar[bool] = True
    aliases: ClassVar[tuple[str, ...]] = ()
    # an emulated low-rank compressor runs as torch's powerSGD_hook does (three
    # allreduces a bucket, `cluster.fused.HookFused`), not one round per factor
    torch_hook: ClassVar[bool] = False

    @abstractmethod
    def build(self, cell: Any, profile: ModelProfile, costs: Costs) -> list[Step]:
        """The steps of one period for `cell` (a `config.Cell`)."""

    def executed(self, options: list[Option | None]) -> list[Option | None]:
        """What an emulated worker runs for each of a plan's buckets: the plan's option."""
        return list(options)

    def memory_kind(self, spec: Any) -> str:
        """The error-feedback memory a compressor (its spec) keeps under this strategy,
        on the workers and the summation servers: none where the spec turns it off
        (`ef=false`), DGC's own (momentum correction), none for the casts (lossless
        enough to need none), else the residual."""
        compressor = spec.kind
        if not spec.ef:
            return "none"
        if compressor == "dgc":
            return "dgc"
        if compressor in ("none", "fp16", "bf16"):
            return "none"
        return "residual"

    def info(self) -> dict[str, Any]:
        """What `gcbench strategies --json` prints of this strategy."""
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "runnable": self.runnable,
            "compressor": self.compressor,
            "own": self.own,
            "servers": self.servers,
            "planner": self.planner,
            "aliases": list(self.aliases),
            "module": type(self).__module__,
        }


_REGISTRY: dict[str, Strategy] = {}
_ALIASES: dict[str, str] = {}
_plugins: list[str] = []  # the entry points loaded
_loaded = False


def register(cls: type[Strategy]) -> type[Strategy]:
    """Register a `Strategy` subclass under its `name` and `aliases` (a class decorator).
    A name or alias already taken is a `StrategyError`."""
    _declared(cls)
    taken = [n for n in (cls.name, *cls.aliases) if n in _REGISTRY or n in _ALIASES]
    if taken:
        owner = _REGISTRY.get(taken[0]) or _REGISTRY[_ALIASES[taken[0]]]
        raise StrategyError(
            f"strategy {taken[0]!r} is registered twice: by {type(owner).__module__}."
            f"{type(owner).__qualname__} and by {cls.__module__}.{cls.__qualname__}"
        )
    _REGISTRY[cls.name] = cls()
    for alias in cls.aliases:
        _ALIASES[alias] = cls.name
    return cls


def unregister(name: str) -> None:
    """Remove a strategy and its aliases (for tests and for replacing one's own)."""
    strategy = _REGISTRY.pop(name)
    for alias in strategy.aliases:
        _ALIASES.pop(alias, None)


def _declared(cls: type[Strategy]) -> None:
    """The class attributes a registration reads, checked."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
        raise StrategyError(f"{where}: a strategy's name is a non-empty word, got {name!r}")
    if not isinstance(getattr(cls, "description", None), str):
        raise StrategyError(f"{where}: strategy {name!r} has no description")
    if cls.compressor not in ("none", "own", "additive", "any"):
        raise StrategyError(f"{where}: compressor must be none, own, additive or any")
    if cls.servers not in ("none", "optional", "required"):
        raise StrategyError(f"{where}: servers must be none, optional or required")
    if (cls.compressor == "own") != (cls.own is not None) or (
        cls.own is not None and cls.own not in KINDS
    ):
        raise StrategyError(f"{where}: an `own` strategy names its compressor kind in `own`")
    if cls.build is Strategy.build:
        raise StrategyError(f"{where}: strategy {name!r} does not implement build")


def _load() -> None:
    """The entry points of `ENTRY_POINTS`, once a process, at the first lookup (the
    built-ins register when `gcbench.strategies` is imported)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        try:
            ep.load()  # a module that registers, or a Strategy subclass
        except StrategyError:
            raise
        except Exception as e:
            raise StrategyError(
                f"entry point {ep.name!r} ({ep.value}) of {ENTRY_POINTS}: {type(e).__name__}: {e}"
            ) from e
        _plugins.append(f"{ep.name} = {ep.value}")


def registry() -> dict[str, Strategy]:
    """Every registered strategy by name, the built-ins first."""
    _load()
    return dict(_REGISTRY)


def names(plugins: bool = True) -> list[str]:
    """The registered strategies' names; `plugins=False`: without loading the entry
    points first (at import time: a user's module is not loaded, nor its errors raised,
    before a strategy is looked up)."""
    if plugins:
        _load()
    return list(_REGISTRY)


def aliases() -> dict[str, str]:
    _load()
    return dict(_ALIASES)


def canonical(name: str) -> str:
    """`name`, or the strategy an alias names."""
    _load()
    return _ALIASES.get(name, name)


def find(name: str) -> Strategy | None:
    """The strategy called `name` (or an alias), or None."""
    _load()
    return _REGISTRY.get(_ALIASES.get(name, name))


def get(name: str) -> Strategy:
    """The strategy called `name` (or an alias); ConfigError, one line, for an unknown
    name."""
    found = find(name)
    if found is None:
        raise ConfigError([unknown(name)])
    return found


def unknown(name: Any) -> str:
    """The message for a strategy name nobody registered."""
    close = difflib.get_close_matches(str(name), [*_REGISTRY, *_ALIASES], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown strategy {name!r}{hint}; valid: {', '.join(_REGISTRY)}"


def planner_names() -> frozenset[str]:
    """The strategies that search per cell."""
    return frozenset(n for n, s in registry().items() if s.planner)


def own_kinds() -> frozenset[str]:
    """Compressors that are whole strategies: they run under their own strategy only."""
    return frozenset(s.own for s in registry().values() if s.own is not None)


def pair_compressor(strategy: str, spec: Any) -> tuple[Any | None, str | None]:
    """The compressor spec a (strategy, compressor) pair runs with, or (None, reason)
    when the pair is dropped."""
    info = get(strategy)
    if info.compressor == "none":
        return KINDS["none"].model_validate({"kind": "none"}), None
    if info.compressor == "own":
        assert info.own is not None
        if spec.kind == info.own:
            return spec, None
        return KINDS[info.own].model_validate({"kind": info.own}), None
    if spec.kind in own_kinds():
        return None, f"{spec.kind} is a strategy of its own (strategy: {spec.kind})"
    if info.compressor == "additive" and spec.kind not in ADDITIVE:
        return None, f"{strategy} allreduces payloads, and {spec.kind}'s are not additive"
    return spec, None


def pair_cluster(strategy: str, cpu_servers: int) -> str | None:
    """Why a (strategy, cluster) pair is dropped, or None."""
    servers = get(strategy).servers
    if servers == "none" and cpu_servers > 0:
        return f"{strategy} uses no CPU servers, and the cluster has cpu_servers: {cpu_servers}"
    if servers == "required" and cpu_servers == 0:
        return f"{strategy} needs CPU servers (cpu_servers >= 1)"
    return None


def check_cell(strategy: str, spec: Any, cpu_servers: int) -> list[str]:
    """The reasons a grid would drop one cell's pairs (empty when it would keep it)."""
    problems = []
    _, why = pair_compressor(strategy, spec)
    if why and "additive" in why:
        problems.append(f"{why} (additive: {', '.join(sorted(ADDITIVE))})")
    elif why:
        problems.append(why)
    why = pair_cluster(strategy, cpu_servers)
    if why:
        problems.append(why)
    return problems


def plugins() -> list[str]:
    """The entry points loaded (`name = module:attr`)."""
    _load()
    return list(_plugins)
