"""Emulate one cell on Ray (issue #14, DESIGN §6): one `Worker` actor per GPU of the
cell, placed per machine (one placement-group bundle per machine: STRICT_SPREAD when the
Ray cluster has a node per machine, PACK otherwise), and one `server.Server` actor per
summation server of the cell (on the nodes that declare the `summation` resource, where
some do), executing the cell's plan with real gradients, compressors, collectives and
push/pull for `steps` iterations.

What comes back (`Emulation`): per bucket the bytes each phase moved (counted from the
payloads, per worker), the wall times of start-up and of each emulated iteration, worker
0's timeline (its spans: the cell's trace) and the numerical fidelity, measured by rank
0 (`worker.Fidelity`): the aggregated gradient against the exact sum of every worker's
gradient (a float64 reduce), after one step and summed over all steps (where error
feedback pays back what compression dropped).

The clocks (`Cell.wall_clock`): `virtual` — each worker times its iteration with the
simulator's timeline, its buckets' compressed payloads as it sent them and every
collective's start and end agreed with the peers it ran with (`Worker.clock`); compute
and (de)compression times come from the profile and the cost tables. `wall` — the
iteration as it ran (`Worker.wall_step`): compute waited out from the profile, the
compression, collectives and push/pull real. `mode: emulate` cells run this from the
runner's task (`runner.cell.execute_cell`, through `emulated`).

`compute_time: measured` runs the zoo model's real forward and backward on each actor
(`backward.Backward`): the gradients are its gradients, and compute takes as long as it
took (on a virtual clock, each worker's timeline uses the times its step 0 measured).

Not yet (issue #14, left for later): actor reuse across cells, NCCL on GPU clusters.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import torch

from gcbench import strategies
from gcbench.backends.simulate import period_of
from gcbench.cluster import backward  # noqa: F401  (its held-out counters register)
from gcbench.cluster.execute import check, payloads
from gcbench.config import Cell
from gcbench.errors import ConfigError, InfeasibleError

STEPS = 3  # iterations an emulated cell runs (agg_error_steps sums them)
ATTEMPTS = 2  # runs of a cell whose worker dies, in all
PG_PREFIX = "gcbench:"  # an emulated cell's placement groups: gcbench:<cell id>:<uid>:...


def remove_placement_groups(cell_id: str) -> int:
    """Remove the placement groups a cell's task made and could not remove (it died: its
    worker was killed, or ran out of memory); how many. The driver calls this when the
    task fails, so that a dead cell holds no GPUs until `gcbench run` exits."""
    from ray.util.placement_group import (
        get_placement_group,
        placement_group_table,
        remove_placement_group,
    )

    n = 0
    for info in placement_group_table().values():
        name = str(info.get("name") or "")
        if name.startswith(f"{PG_PREFIX}{cell_id}:") and info.get("state") != "REMOVED":
            with contextlib.suppress(Exception):  # removed meanwhile: nothing to do
                remove_placement_group(get_placement_group(name))
                n += 1
    return n
# How long a cell's actors may wait to be placed (seconds): `GCBENCH_PLACEMENT_TIMEOUT_S`,
# else 30. On a `ray up` cluster whose GPU nodes start at `min_workers: 0` the autoscaler
# boots them when a cell asks, which takes minutes: raise it there (README).
PLACEMENT_S = 30.0


def placement_timeout_s() -> float:
    """How long a placement may wait (`PLACEMENT_S`, or the environment's setting)."""
    import os

    raw = os.environ.get("GCBENCH_PLACEMENT_TIMEOUT_S")
    try:
        value = float(raw) if raw else PLACEMENT_S
    except ValueError:
        raise ConfigError([f"GCBENCH_PLACEMENT_TIMEOUT_S={raw!r}: give seconds"]) from None
    if not value > 0:
        raise ConfigError([f"GCBENCH_PLACEMENT_TIMEOUT_S={raw!r}: must be positive"])
    return value


def worker_nodes(alive: list[dict[str, Any]], gpus: bool) -> int:
    """How many live nodes can hold a machine's workers: those with GPUs (for GPU
    actors), else those with CPUs; a head with `CPU: 0` never counts, nor, for GPU
    actors, the summation servers' nodes (which have none)."""
    def fits(n: dict[str, Any]) -> bool:
        r = n.get("Resources", {})
        return r.get("GPU", 0) > 0 if gpus else r.get("CPU", 0) > 0

    return sum(fits(n) for n in alive)
# Ray CPUs an emulated worker asks for: bookkeeping only (the workers of a cell share the
# host's cores, and a cell's task and actors must fit beside the other cells' tasks)
WORKER_CPUS = 0.01


@dataclass
class Emulation:
    """What an emulated cell measured (see the module docstring)."""

    phase_bytes: list[list[list[int]]]  # [rank][bucket][phase] at step 0
    iteration_s: float  # the virtual clock's iteration, step 0 (the slowest worker's)
    metrics: dict[str, Any]  # rank 0's timeline metrics, as `simulate`'s
    planner_s: float  # the driver's planning of the cell (planner strategies)
    startup_s: float  # from creating the actors to every one in its process groups
    nodes: list[str]  # the Ray node each worker ran on, by rank
    server_nodes: list[str]  # the Ray node each summation server ran on
    attempts: int  # 2 or more: a worker died and the cell ran again
    step_wall_s: list[float]  # each emulated iteration's wall time (the slowest worker's)
    aggregates: list[torch.Tensor]  # with `keep`: rank 0's aggregate per bucket, step 0
    error_first: float  # relative L2 error of the aggregate, step 0
    error_total: float  # the same for the sum over all steps
    # largest |aggregate - exact| / ((n - 1) · 2^-23 · Σ|g|) over the elements at step 0:
    # at most 1 for an exact fp32 sum of n workers (its worst-case rounding)
    bound_ratio: float
    spans: list[Any]  # rank 0's timeline (virtual: step 0; wall: the last step) as Spans
    plan: dict[str, Any] | None  # a planner strategy's plan, as `backends.simulate.plan_record`
    step_metrics: list[dict[str, Any]]  # wall clock: rank 0's metrics of each step
    held_out_passes: int = 0  # held-out backward passes the workers ran (the task's: none)


def free_port() -> int:
    """A TCP port free on this host now (the rendezvous of the process group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rendezvous_host(alive: list[dict[str, Any]], bundle_nodes: list[str]) -> str:
    """Where rank 0's rendezvous store listens, given the Ray node of each machine's
    bundle (rank 0's first): 127.0.0.1 when they are all on one host (a local run;
    `ray.cluster_utils.Cluster`'s nodes share an address), else the address of rank 0's
    node, which the other hosts reach."""
    from gcbench.cluster.worker import LOOPBACK

    address = {n.get("NodeID"): n.get("NodeManagerAddress") for n in alive}
    for node in bundle_nodes:
        if address.get(node) is None:
            raise InfeasibleError(f"emulate: the workers' node {node} left the Ray cluster")
    if len({address[node] for node in bundle_nodes}) <= 1:
        return LOOPBACK
    return str(address[bundle_nodes[0]])


def plan_of(cell: Cell, planned: Any = None) -> tuple[Any, Any, Any]:
    """The cell's profile, and its plan and costs (its strategy's first step)."""
    profile, period = period_of(cell, planned)
    return profile, period[0].plan, period[0].costs


def fed_simulation(cell: Cell, e: Emulation) -> float:
    """The simulator's iteration for `cell` fed with the emulated payload sizes (each
    bucket's compressed payload, the mean over the workers): what issue #14 compares the
    virtual clock with for data-dependent compressors (the clock also takes, per
    collective, the slowest worker's). A periodic strategy's mean over its period, its
    first step fed (the sizes `Emulation` keeps) and the others on the size model."""
    from gcbench.backends.simulate import period_mean
    from gcbench.compress import create
    from gcbench.sim.iteration import simulate

    profile, period = period_of(cell)
    cl = cell.cluster
    levels = {"flat": cl.gpus, "intra": cl.gpus_per_machine, "inter": cl.machines}
    splittable = create(cell.compressor.kind, **cell.compressor.params()).splittable
    sizes = payloads(period[0].plan.options, e.phase_bytes, levels, splittable)
    runs = [
        simulate(profile, p.costs, p.plan, keep_jobs=False, payloads=None if k else sizes)
        for k, p in enumerate(period)
    ]
    mean = period_mean(profile, [r.metrics for r in runs], [p.weight for p in period])
    return float(mean["iteration_s"])


def emulated(
    cell: Cell, repetitions: int = 1
) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any] | None]:
    """A Record's metrics per repetition for an emulated cell, worker 0's spans and, for
    a planner strategy, the plan it executed (as `backends.simulate.plan_record` stores it):
    its
    timeline (the simulator's metrics), the planner's seconds, the aggregation errors.

    The virtual clock is deterministic (and the gradients seeded): one emulation serves
    every repetition. The wall clock is not: the cell runs one warm-up step more than
    its repetitions (at least `STEPS` in all), each repetition a step after the first
    (which compiles kernels and opens gloo's connections)."""
    wall = cell.wall_clock
    e = emulate_cell(cell, max(STEPS, repetitions + 1) if wall else STEPS)
    extra = {
        "planner_s": e.planner_s,
        "plan_file": "",
        "agg_error": e.error_first,
        "agg_error_steps": e.error_total,
        "attempts": e.attempts,
        "startup_s": e.startup_s,
    }
    per_step = e.step_metrics[-repetitions:] if wall else [e.metrics] * repetitions
    return [{**m, **extra} for m in per_step], e.spans, e.plan


def refuse_placement(cell: Cell, nodes: list[dict[str, Any]]) -> None:
    """ConfigError when the Ray cluster (`ray.nodes()`, the live ones) can never hold the
    cell's actors: where it has GPUs, one per worker (at least `gpus_per_machine` on a
    node, `machines x gpus_per_machine` in all); where it declares the `summation`
    resource, one unit per summation server."""
    cl = cell.cluster
    held = [n.get("Resources", {}).get("summation", 0.0) for n in nodes]
    if cl.cpu_servers and any(held) and sum(held) < cl.cpu_servers:
        raise ConfigError(
            [
                f"emulate: {cl.cpu_servers} summation servers cannot be placed on this Ray "
                f"cluster (it declares {sum(held):g} units of the summation resource)"
            ]
        )
    _refuse_memory(cell, nodes)
    gpus_on = [n.get("Resources", {}).get("GPU", 0.0) for n in nodes]
    if not any(gpus_on):
        return  # CPU workers share the cores
    if sum(gpus_on) < cl.gpus or max(gpus_on) < cl.gpus_per_machine:
        raise ConfigError(
            [
                f"emulate: {cl.machines} x {cl.gpus_per_machine} GPU workers cannot be placed "
                f"on this Ray cluster ({len(nodes)} nodes with "
                f"{', '.join(f'{g:g}' for g in gpus_on)} GPUs)"
            ]
        )


# What one actor holds besides its model: Python, torch and Ray's worker (measured
# ~150 MB each on this project's CPU machines, issue #35)
ACTOR_BASE_BYTES = 160 * 2**20


def _refuse_memory(cell: Cell, nodes: list[dict[str, Any]]) -> None:
    """ConfigError when the cell's actors cannot fit the memory the Ray cluster offers
    its workers (the nodes' `memory` resource): each actor holds `ACTOR_BASE_BYTES` and
    about three copies of the model's gradients (its own, error feedback, the payloads
    it receives). Issue #35: 2 x 16 tiny-mlp workers ran 214 s into a 5 GB limit."""
    from gcbench.backends.simulate import cell_profile

    offered = sum(float(n.get("Resources", {}).get("memory", 0.0)) for n in nodes)
    if offered <= 0:
        return  # a cluster that declares no memory: nothing to check against
    actors = cell.cluster.gpus + cell.cluster.cpu_servers
    gradients = 4.0 * sum(t.numel for t in cell_profile(cell).tensors)
    need = actors * (ACTOR_BASE_BYTES + 3 * gradients)
    if need > offered:
        raise ConfigError(
            [f"emulate: {actors} actors ({cell.cluster.machines} x "
             f"{cell.cluster.gpus_per_machine} workers"
             f"{f', {cell.cluster.cpu_servers} servers' if cell.cluster.cpu_servers else ''}) "
             f"need about {need / 2**30:,.1f} GiB; this Ray cluster offers its workers "
             f"{offered / 2**30:,.1f} GiB: emulate fewer GPUs, or on a larger cluster"]
        )  # fmt: skip


def check_cell(cell: Cell) -> tuple[Any, Any, int]:
    """Refuse, before any actor starts, a cell emulation cannot run yet (ConfigError
    naming why); its profile, its first plan step and the length of its period
    otherwise."""
    from gcbench.compress import create

    profile, period = period_of(cell)
    step = period[0]
    if cell.measured_compute:
        from gcbench.cluster.backward import check as runnable

        runnable(cell.model.profile, profile.name)
    compressor = create(cell.compressor.kind, **cell.compressor.params())
    strategy = strategies.get(cell.strategy)
    for o in (o for p in period for o in strategy.executed(p.plan.options)):
        if o is None:
            raise ConfigError([f"emulate: {cell.strategy} leaves buckets out: not emulated yet"])
        check(o, compressor)
    return profile, step, len(period)


def emulate_cell(
    cell: Cell, steps: int = STEPS, timeout_s: float = 600.0, keep: bool = False
) -> Emulation:
    """Run `cell` on Ray actors (Ray must be connected: `runner.local.connect`); with
    `keep`, rank 0's aggregated gradient of step 0 comes back too (small models).

    The cell's plan is made here (for a planner strategy: the planner runs in the task
    that runs the cell) and the workers execute it as it comes to them.

    A worker that dies (its process killed, its node lost) fails the attempt as soon as
    its death is known (the other workers are stopped, not left to their collectives'
    timeouts), and the cell runs again on fresh actors, at most `ATTEMPTS` times in all:
    the gradients are seeded, so a retried cell gives the same result."""
    from gcbench.backends.simulate import plan_record
    from gcbench.cluster.worker import Worker

    profile, step, period = check_cell(cell)
    steps = max(steps, period)  # the virtual clock times every step of the period
    held = _held_out(cell, step.plan)

    def call(workers: list[Any], servers: list[Any]) -> list[Any]:
        return [w.run.remote(cell, steps, keep, servers, step.plan, held) for w in workers]

    results, attempt, startup_s, server_nodes = run_actors(cell, Worker, call, None, timeout_s)
    fid = results[0]["fidelity"]
    record = None
    if strategies.get(cell.strategy).planner:
        metrics = {**results[0]["metrics"], "planner_s": step.planner_s}
        record = plan_record(cell, profile, step.plan, metrics)
        record["planner_parts"] = dict(step.planner_parts)
    return Emulation(
        plan=record,
        phase_bytes=[r["phase_bytes"][0] for r in results],
        iteration_s=max(r["iteration_s"] for r in results),
        metrics=results[0]["metrics"],
        planner_s=step.planner_s,
        aggregates=results[0]["aggregates"],
        error_first=fid["error_first"],
        error_total=fid["error_total"],
        bound_ratio=fid["bound_ratio"],
        startup_s=startup_s,
        nodes=[r["node"] for r in results],
        server_nodes=server_nodes,
        step_wall_s=[max(r["step_s"][k] for r in results) for k in range(steps)],
        attempts=attempt,
        spans=results[0]["spans"],
        step_metrics=results[0]["step_metrics"],
        held_out_passes=sum(r["held_out_passes"] for r in results),
    )


def _held_out(cell: Cell, planned: Any) -> dict[Any, Any]:
    """For real gradients (`compute_time: measured`): what the size model counts on
    held-out backward passes, computed here, once, for every payload the workers' plans
    lower (each step of the period timed once asks for them), and handed to the workers:
    otherwise each would run the passes itself, in the middle of its clock."""
    if not cell.measured_compute:
        return {}
    from gcbench.cluster.backward import held_out_state
    from gcbench.sim.iteration import simulate

    profile, period = period_of(cell, planned)
    for s in period:
        simulate(profile, s.costs, s.plan, keep_jobs=False)
    return held_out_state(profile, cell.seed)


def run_actors(
    cell: Cell, actor_cls: Any, call: Any, gpus: bool | None, timeout_s: float = 600.0
) -> tuple[list[Any], int, float, list[str]]:
    """`call(actors, servers)` (their result refs) on one fresh `actor_cls(rank, world,
    gpus, port, host=...)` per GPU of `cell` and its summation servers (`_on_actors`;
    `gpus`: whether each actor holds a GPU, None: where the Ray cluster has GPUs now):
    the results by rank, the attempts it took, the last one's start-up seconds and its
    servers' nodes. A dead actor fails the attempt at once; the cell runs again on fresh
    actors, `ATTEMPTS` times in all."""
    from ray.exceptions import RayActorError

    for attempt in range(1, ATTEMPTS + 1):
        try:
            results, startup_s, servers = _on_actors(cell, actor_cls, call, timeout_s, gpus)
            return results, attempt, startup_s, servers
        except RayActorError as e:
            if attempt == ATTEMPTS:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise RuntimeError(
                    f"{cell.mode}: a worker died in each of {ATTEMPTS} attempts: {first}"
                ) from None
    raise AssertionError("unreachable")


def _on_actors(
    cell: Cell, actor_cls: Any, call: Any, timeout_s: float, gpus: bool | None = None
) -> tuple[list[dict[str, Any]], float, list[str]]:
    """Place one `actor_cls` per GPU of `cell` (and its summation servers), wait for them
    to start, and gather `call(workers, servers)`: the results by rank, the start-up
    seconds and the servers' nodes. `gpus`: whether each actor holds a GPU (None: where
    the Ray cluster has GPUs now). The actors and their placement groups are released
    whatever happens."""
    import ray
    from ray.util.placement_group import (
        placement_group,
        placement_group_table,
        remove_placement_group,
    )
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from gcbench.cluster.server import Server

    machines, per_machine = cell.cluster.machines, cell.cluster.gpus_per_machine
    world = machines * per_machine
    alive = [n for n in ray.nodes() if n.get("Alive")]
    # where the Ray cluster has GPUs, each worker holds one (`num_gpus=1`)
    if gpus is None:
        gpus = any(n.get("Resources", {}).get("GPU", 0) for n in alive)
    per_gpu = 1.0 if gpus else 0.0
    try:
        refuse_placement(cell, alive)
    except ConfigError as e:  # it fitted when the run began: the cluster changed under it
        raise InfeasibleError(f"{e.messages[0]} (the Ray cluster changed during the run)") from None
    bundle = {"CPU": WORKER_CPUS * per_machine,
              **({"GPU": per_gpu * per_machine} if per_gpu else {})}  # fmt: skip
    # named for the cell, so that the driver can remove them if this task dies
    # (`remove_placement_groups`): Ray keeps a dead task's groups until the job ends
    named = f"{PG_PREFIX}{cell.id}:{uuid.uuid4().hex[:8]}"
    pg = placement_group(
        [bundle] * machines,
        strategy="STRICT_SPREAD" if worker_nodes(alive, gpus) >= machines > 1 else "PACK",
        name=f"{named}:workers",
    )
    k = cell.cluster.cpu_servers
    # the summation servers: on the nodes that declare the resource, where some do
    summation = any(n.get("Resources", {}).get("summation", 0) for n in alive)
    server_bundle = {"CPU": WORKER_CPUS, **({"summation": 1.0} if summation else {})}
    spg = None
    if k:
        spg = placement_group([server_bundle] * k, strategy="SPREAD", name=f"{named}:servers")
    groups = [pg] + ([spg] if spg is not None else [])
    wait_s = placement_timeout_s()
    ready, _ = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=wait_s)
    if len(ready) < len(groups):  # the autoscaler did not deliver, or the cluster changed
        for g in groups:
            remove_placement_group(g)
        raise InfeasibleError(
            f"{cell.mode}: {machines} bundles of {bundle} for the workers"
            f"{f' and {k} servers' if k else ''} still pending after {wait_s:.0f} s (live "
            f"nodes: {len(alive)}, {worker_nodes(alive, gpus)} able to hold workers); "
            "waiting for an autoscaler? raise GCBENCH_PLACEMENT_TIMEOUT_S"
        )
    workers: list[Any] = []
    servers: list[Any] = []
    try:
        # free here; on a cluster of several hosts, assumed free on rank 0's too (a
        # clash fails the attempt, and the next one draws another port)
        port = free_port()
        nodes = placement_group_table(pg)["bundles_to_node_id"]
        alive = [n for n in ray.nodes() if n.get("Alive")]
        host = rendezvous_host(alive, [nodes[m] for m in range(machines)])
        t0 = time.perf_counter()
        actor: Any = ray.remote(actor_cls)
        workers = [
            actor.options(
                num_cpus=WORKER_CPUS,
                num_gpus=per_gpu,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=r // per_machine
                ),
            ).remote(r, world, per_machine, port, host=host)
            for r in range(world)
        ]
        server: Any = ray.remote(Server)
        memory = strategies.get(cell.strategy).memory_kind(cell.compressor)
        servers = [] if spg is None else [
            server.options(
                num_cpus=WORKER_CPUS,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    spg, placement_group_bundle_index=i
                ),
            ).remote(cell.compressor.kind, cell.compressor.params(), memory)
            for i in range(k)
        ]
        up = [s.ready.remote() for s in servers]
        _gather([w.ready.remote() for w in workers] + up, timeout_s, "start")
        server_nodes = ray.get(up)  # answered already: in the servers' order
        startup_s = time.perf_counter() - t0
        results = _gather(call(workers, servers), timeout_s, "finish")
    finally:
        for a in workers + servers:
            ray.kill(a)
        for g in groups:
            remove_placement_group(g)
    return sorted(results, key=lambda r: r["rank"]), startup_s, server_nodes


def _gather(refs: list[Any], timeout_s: float, what: str) -> list[Any]:
    """The results of `refs` as they come: the first failure (a dead worker) raises at
    once rather than after the others' collectives time out."""
    import ray

    out: list[Any] = []
    pending = list(refs)
    deadline = time.monotonic() + timeout_s
    while pending:
        done, pending = ray.wait(
            pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic())
        )
        if not done:
            raise TimeoutError(
                f"emulate: {len(pending)} of {len(refs)} workers did not {what} in "
                f"{timeout_s:.0f} s"
            )
        out.append(ray.get(done[0]))
    return out
