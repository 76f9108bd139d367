"""The strategies: one class per strategy, in one registry (`base`).

Above `gcbench.sim` and `gcbench.plan` (a strategy builds plans and times them with
them) and below `gcbench.config` (which validates a suite's strategies against the
registry), `gcbench.cluster` (which asks a strategy what its workers execute) and the
backends. Importing this package registers the built-ins, in the order `gcbench
strategies` lists them: the uniform baselines and HiPress (`baselines`), the low-rank
strategies (`lowrank`), COVAP (`covap`), the planner's (`planners`). Users' strategies
come from the entry points of the group `gcbench.strategies` (`base`).
"""

# The order of registration is the order `gcbench strategies` lists.
# isort: off
from gcbench.strategies import baselines  # noqa: F401
from gcbench.strategies import lowrank  # noqa: F401
from gcbench.strategies import covap  # noqa: F401
from gcbench.strategies import planners  # noqa: F401

# isort: on
from gcbench.strategies.base import (
    ENTRY_POINTS,
    Step,
    Strategy,
    StrategyError,
    aliases,
    canonical,
    check_cell,
    find,
    get,
    names,
    own_kinds,
    pair_cluster,
    pair_compressor,
    planner_names,
    plugins,
    register,
    registry,
    unknown,
    unregister,
)

__all__ = [
    "ENTRY_POINTS",
    "Step",
    "Strategy",
    "StrategyError",
    "aliases",
    "canonical",
    "check_cell",
    "find",
    "get",
    "names",
    "own_kinds",
    "pair_cluster",
    "pair_compressor",
    "planner_names",
    "plugins",
    "register",
    "registry",
    "unknown",
    "unregister",
]
