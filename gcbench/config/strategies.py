"""Named strategies and what each takes: its compressor and its CPU servers (torch-free).

A suite's grid crosses strategies with compressors and clusters, so one pair that makes
no sense must not make the suite unloadable. Each strategy says, per axis:

- `compressor`: `none` (runs once, with compressor `none`), `own` (runs once, with its
  own compressor kind: the grid's spec of that kind if the axis has one, else the kind's
  defaults), `additive` (a compressor whose payloads sum: others are dropped), `any`
  (any but the kinds that are strategies of their own: powersgd, acpsgd, covap);
- `servers`: `none` (cells with `cpu_servers` > 0 are dropped), `optional`, `required`
  (cells without CPU servers are dropped).

Drops are decided per pair of axis values, never per cell; `gcbench validate` prints how
many cells each reason dropped. For one cell on the command line the same pair is a
ConfigError naming the property (`check_cell`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gcbench.compress.specs import ADDITIVE, KINDS


@dataclass(frozen=True)
class StrategyInfo:
    description: str
    compressor: Literal["none", "own", "additive", "any"] = "none"
    own: str | None = None  # the compressor kind of an `own` strategy
    servers: Literal["none", "optional", "required"] = "none"


STRATEGIES: dict[str, StrategyInfo] = {
    "fp32": StrategyInfo("ring allreduce over every GPU (PyTorch DDP, Horovod)"),
    "fp32-2level": StrategyInfo(
        "hierarchical allreduce: intra reduce-scatter, inter allreduce on G rings, intra "
        "allgather"
    ),
    "fp16": StrategyInfo("fp16 cast after backward, allreduce, cast back"),
    "allgather": StrategyInfo(
        "the compressor's payloads allgathered over every GPU (ByteComp Table 2)", "any"
    ),
    "allgather-2level": StrategyInfo(
        "HiTopKComm: intra reduce-scatter, compress 1/G, inter allgather, intra allgather",
        "any",
    ),
    "allreduce": StrategyInfo(
        "the compressor's payloads allreduced over every GPU (additive compressors)",
        "additive",
    ),
    "ps": StrategyInfo(
        "parameter server: intra reduce-scatter, push/pull to the CPU servers, intra "
        "allgather",
        servers="required",
    ),
    "byteps": StrategyInfo(
        "BytePS: traffic split between the CPU servers and an allreduce among the GPU "
        "machines (k = 0: allreduce, k = n: PS)",
        servers="optional",
    ),
    "byteps-compress": StrategyInfo(
        "BytePS with compression at the summation servers, inter-machine only", "any",
        servers="required",
    ),
    "hipress": StrategyInfo(
        "HiPress: partitions of at most 4,096,000 bytes, each compressed only when that is "
        "estimated faster; gather + broadcast with rotating roots",
        "any",
    ),
    "powersgd": StrategyInfo(
        "Power-SGD* as torch's powerSGD_hook runs it: per bucket allreduce the vectors, "
        "then P, then Q; the hook's final synchronize holds backward until the bucket is done",
        "own",
        "powersgd",
    ),
    "acpsgd": StrategyInfo(
        "ACP-SGD: one allreduce per step, alternating P and Q", "own", "acpsgd"
    ),
    "covap": StrategyInfo(
        "COVAP: each step allreduces the shards its interval selects", "own", "covap"
    ),
    "bytecomp-greedy": StrategyInfo(
        "ByteComp's Algorithm 1: per tensor, the option of fp32, fp32-2level, fp16, "
        "allgather and allgather-2level that the simulator times fastest",
        "any",
    ),
    "bytecomp": StrategyInfo(
        "ByteComp: the best of its Algorithm 1 plan and the uniform strategies inside its "
        "space",
        "any",
    ),
    "brute-force": StrategyInfo(
        "the fastest assignment of none, fp16, allgather and allgather-2level to every "
        "tensor (models of at most 10 tensors)",
        "any",
    ),
    "upper-bound": StrategyInfo(
        "bytecomp's plan (or a re-plan) with compression costing nothing: a bound, not a "
        "strategy one can run",
        "any",
    ),
}
# The planner's strategies (`gcbench.plan`): each cell runs a search of its own, so the
# `strategies` suite (the baselines the papers compare) leaves them to the planner suites.
PLANNERS = frozenset({"bytecomp-greedy", "bytecomp", "brute-force", "upper-bound"})
ALIASES = {"hitopkcomm": "allgather-2level"}  # HiTopKComm (ByteComp §5)
# Compressors that are whole strategies: PowerSGD sums P before computing Q (two rounds),
# ACP-SGD alternates P and Q, COVAP selects buckets per step. They run under their own
# strategy only.
OWN_KINDS = frozenset(i.own for i in STRATEGIES.values() if i.own is not None)


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def pair_compressor(strategy: str, spec: Any) -> tuple[Any | None, str | None]:
    """The compressor spec a (strategy, compressor) pair runs with, or (None, reason)
    when the pair is dropped."""
    info = STRATEGIES[strategy]
    if info.compressor == "none":
        return KINDS["none"].model_validate({"kind": "none"}), None
    if info.compressor == "own":
        assert info.own is not None
        if spec.kind == info.own:
            return spec, None
        return KINDS[info.own].model_validate({"kind": info.own}), None
    if spec.kind in OWN_KINDS:
        return None, f"{spec.kind} is a strategy of its own (strategy: {spec.kind})"
    if info.compressor == "additive" and spec.kind not in ADDITIVE:
        return None, f"{strategy} allreduces payloads, and {spec.kind}'s are not additive"
    return spec, None


def pair_cluster(strategy: str, cpu_servers: int) -> str | None:
    """Why a (strategy, cluster) pair is dropped, or None."""
    servers = STRATEGIES[strategy].servers
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
