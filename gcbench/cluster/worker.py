"""The GPU-worker stand-in (issue #14, DESIGN §6): a Ray actor that joins a
`torch.distributed` process group with its peers, as Ray Train sets up its workers,
holds its gradients and executes a plan bucket by bucket (`execute.run_option`).

Process groups: `flat` (every worker), `intra` (one per machine: ranks m·G .. m·G+G-1)
and `inter` (one per local rank j: ranks j, G+j, 2G+j, ...); every worker creates every
group in the same order, as `new_group` requires. On one host (a local run, or
`ray.cluster_utils.Cluster`'s nodes) gloo binds to loopback (`GLOO_SOCKET_IFNAME=lo`) and
the rendezvous store listens on a socket rank 0 binds to 127.0.0.1 itself (torch's own
`TCPStore` server binds every address); on a cluster of several hosts (`ray up`), on
rank 0's node address (`emulate.rendezvous_host`); every collective
times out after `timeout_s`, so a dead peer fails the cell rather than hanging the run.
"""

from __future__ import annotations

import datetime
import os
import queue
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from gcbench import strategies
from gcbench.cluster.execute import (
    DEFERRED,
    Groups,
    Outcome,
    execute,
    payloads,
    run_option,
    shard_slices,
)
from gcbench.cluster.gradients import bucket_gradient
from gcbench.compress import create, create_memory
from gcbench.config import Cell
from gcbench.sim.iteration import Plan, Result, simulate, timeline_metrics
from gcbench.sim.options import Op, Option
from gcbench.sim.timeline import Job

# How long backward waits for a bucket under a synchronous hook before the step fails
# (the process groups' own timeout is 30 s)
SYNC_WAIT_S = 60.0


class Fidelity:
    """Rank 0's running comparison of its aggregates with the exact sums: the relative L2
    error at step 0 and of the sums over the steps, and at step 0 the largest
    |aggregate - exact| / ((n - 1) · 2^-23 · Σ|g|) (at most 1 for an fp32 sum of n
    workers: its worst-case rounding)."""

    def __init__(self, world: int):
        self.world = world
        self.err = self.ref = self.err_total = self.ref_total = self.ratio = 0.0

    def first(self, aggregate: torch.Tensor, exact: torch.Tensor, absum: torch.Tensor) -> None:
        d = aggregate.double() - exact
        self.err += float(d.square().sum())
        self.ref += float(exact.square().sum())
        allowed = absum * ((self.world - 1) * 2.0**-23)
        worst = torch.where(allowed > 0, d.abs() / allowed, d.abs() * float("inf"))
        worst = torch.nan_to_num(worst, nan=0.0)  # 0 / 0: an exact zero
        if worst.numel():
            self.ratio = max(self.ratio, float(worst.max()))

    def total(self, aggregate: torch.Tensor, exact: torch.Tensor) -> None:
        self.err_total += float((aggregate - exact).square().sum())
        self.ref_total += float(exact.square().sum())

    def result(self) -> dict[str, float]:
        return {
            "error_first": (self.err / self.ref) ** 0.5 if self.ref else 0.0,
            "error_total": (self.err_total / self.ref_total) ** 0.5 if self.ref_total else 0.0,
            "bound_ratio": self.ratio,
        }


def on_gpu(option: Option) -> bool:
    """Whether the option's work before its first phase is the GPU's (it then runs on
    the compute thread, behind backward); CPU compression runs, with the phases, on the
    communication thread (the simulator gives it a core of its own: an approximation
    that serialises it with the other buckets' phases)."""
    first = option.steps[0]
    return not isinstance(first, Op) or first.where == "gpu"


def _holds_gpu() -> bool:
    """Whether Ray gave this actor a GPU."""
    import ray

    return bool(ray.get_gpu_ids())


def _sleep_until(t: float) -> None:
    """Wait until `time.perf_counter()` reaches `t` (compute the profile times)."""
    left = t - time.perf_counter()
    if left > 0:
        time.sleep(left)


LOOPBACK = "127.0.0.1"


def interface_of(address: str) -> str | None:
    """The name of the network interface holding this IPv4 address (Linux), or None."""
    import fcntl
    import struct

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                got = fcntl.ioctl(s.fileno(), siocgifaddr, request)
            except OSError:  # no IPv4 address on this interface
                continue
            if socket.inet_ntoa(got[20:24]) == address:
                return name
    return None


def _compressor_and_memory(
    cell: Cell, profile: Any, buckets: list[list[int]], strategy: Any
) -> tuple[Any, Any]:
    """The cell's compressor as a worker runs it (a low-rank one fused per bucket of
    `buckets`, torch's hook's variant under a `torch_hook` strategy) and the
    error-feedback memory `strategy` keeps for it (COVAP's scaled by its coefficient)."""
    comp = create(cell.compressor.kind, **cell.compressor.params())
    if comp.family == "lowrank":  # factors of each tensor's matrix, fused per bucket
        from gcbench.cluster.fused import Fused, HookFused

        shapes = {f"bucket{b}": [tuple(profile.tensors[i].shape) for i in bucket]
                  for b, bucket in enumerate(buckets)}  # fmt: skip
        # torch's powerSGD_hook (the `powersgd` strategy): three allreduces a bucket
        comp = (HookFused if strategy.torch_hook else Fused)(comp, shapes)
    ef: dict[str, Any] = {}
    if comp.family == "covap" and cell.compressor.ef:  # §III-D: the residual scaled by
        # the ascending coefficient
        ef["coefficient"] = comp.ef_coefficient  # type: ignore[attr-defined]
    memory = create_memory(strategy.memory_kind(cell.compressor), **ef)
    return comp, memory


class _Draws:
    """A worker's synthetic gradients (`gradients.bucket_gradient`), bucket by bucket;
    a run of shards of one bucket (`cuts`, `execute.shard_slices`) is drawn once, at
    its first shard, and sliced."""

    def __init__(self, seed: int, rank: int, numels: list[int], cuts: list[tuple[int, int] | None]):
        self.seed, self.rank, self.numels, self.cuts = seed, rank, numels, cuts
        self.whole: dict[tuple[int, ...], torch.Tensor] = {}  # a step's bucket split in shards

    def draw(self, step: int, b: int, bucket: list[int]) -> torch.Tensor:
        """Bucket `b`'s (of tensors `bucket`) synthetic gradient (its slice, for a shard)
        at `step`."""
        cut = self.cuts[b]
        if cut is None:
            return bucket_gradient(self.seed, self.rank, step, bucket, self.numels)
        if cut[0] == 0:  # the first shard: draw the bucket once for all of them
            self.whole.clear()
            self.whole[tuple(bucket)] = bucket_gradient(
                self.seed, self.rank, step, bucket, self.numels
            )
        return self.whole[tuple(bucket)][cut[0] : cut[1]].clone()


class _Sums:
    """What the fidelity (`Fidelity`) compares, bucket by bucket: this worker's gradients
    summed over the steps (float64, reduced to rank 0 at the end) and, on rank 0, its
    aggregates summed over the steps; with `keep`, rank 0's aggregates of step 0."""

    def __init__(self, rank: int, world: int, keep: bool):
        self.rank, self.keep = rank, keep
        self.fid = Fidelity(world)
        self.mine: list[torch.Tensor] = []  # this worker's gradients summed over the steps
        self.total: list[torch.Tensor] = []  # rank 0: its aggregates summed over the steps
        self.kept: list[torch.Tensor] = []

    def add(self, step: int, b: int, x: torch.Tensor, out: Outcome) -> None:
        """Fold bucket `b`'s gradient and aggregate into the fidelity's sums (at step 0,
        the exact sum and Σ|g| reduced to rank 0 for `Fidelity.first`)."""
        x64 = x.double()
        if step == 0:
            self.mine.append(x64.clone())
            exact, absum = x64, x64.abs()
            dist.reduce(exact, dst=0)
            dist.reduce(absum, dst=0)
            if self.rank == 0:
                self.fid.first(out.aggregate, exact, absum)
                self.total.append(out.aggregate.double())
                if self.keep:
                    self.kept.append(out.aggregate.clone())
        else:
            self.mine[b] += x64
            if self.rank == 0:
                self.total[b] += out.aggregate.double()

    def finish(self, buckets: int) -> None:
        """Every worker's summed gradients reduced to rank 0, which measures its summed
        aggregates against them (`Fidelity.total`)."""
        for b in range(buckets):
            dist.reduce(self.mine[b], dst=0)
            if self.rank == 0:
                self.fid.total(self.total[b], self.mine[b])


class _WallStep:
    """One iteration on the wall clock (`Worker.wall_step`): what its compute thread and
    its communication thread share, and the compute thread's work: forward and backward
    waited out as the profile times them (`compute`) or run for real (`measured`), each
    bucket handed over (`handed`) to the communication thread as its gradients are ready.
    `t0`, the iteration's start, is set once every worker has met (a barrier)."""

    def __init__(
        self,
        groups: Groups,
        rank: int,
        profile: Any,
        plan: Plan,
        xs: list[torch.Tensor],
        comp: Any,
        memory: Any,
        step: int,
        backward: Any,
        cuts: list[tuple[int, int] | None],
        synchronous: bool,
    ):
        self.groups, self.rank, self.profile, self.plan = groups, rank, profile, plan
        self.xs, self.comp, self.memory, self.step = xs, comp, memory, step
        self.backward, self.cuts, self.synchronous = backward, cuts, synchronous
        B = len(plan.buckets)
        self.finished = [threading.Event() for _ in range(B)]
        self.failed = threading.Event()  # the communication thread stopped on an error
        self.t0 = 0.0
        self.log: list[tuple[str, str, str, float, float, int]] = []
        self.outs = [Outcome(torch.empty(0)) for _ in range(B)]
        self.handed: queue.Queue[tuple[int, Iterator[str]] | None] = queue.Queue()

    def wait_for(self, b: int) -> float:
        """Under `synchronous`, wait until bucket `b` is done; the seconds waited."""
        if not self.synchronous:
            return 0.0
        w0 = time.perf_counter()
        if not self.finished[b].wait(SYNC_WAIT_S) or self.failed.is_set():
            raise RuntimeError(f"bucket {b} not synchronised (its communication failed)")
        return time.perf_counter() - w0

    def parts(self, b: int, option: Option) -> Iterator[str]:
        """Bucket `b`'s option executed on its gradient, in parts (`execute.execute`)."""
        return execute(
            option, self.xs[b], self.comp, self.memory, f"bucket{b}", self.step, self.groups,
            self.outs[b], self.log, f"bucket {b}", b,
        )  # fmt: skip

    def measured(self) -> float:
        """The real forward and backward (`Backward.step`), each bucket handed over whole
        once its last gradient is ready; the seconds from `t0` to backward's end."""
        plan, cuts, xs, t0 = self.plan, self.cuts, self.xs, self.t0
        owners: dict[int, list[int]] = {}  # a tensor's buckets (several: its shards)
        for b, bucket in enumerate(plan.buckets):
            for i in set(bucket):
                owners.setdefault(i, []).append(b)
        left = [len(set(bucket)) for bucket in plan.buckets]
        got: dict[int, torch.Tensor] = {}
        waited: dict[int, float] = {}  # after tensor i, backward held (synchronous)

        def hand(b: int) -> None:
            option, cut = plan.options[b], cuts[b]
            assert option is not None  # `emulate.check_cell` refuses buckets left out
            xs[b] = torch.cat([got[j] for j in plan.buckets[b]])
            if cut is not None:
                xs[b] = xs[b][cut[0] : cut[1]].clone()
            parts = self.parts(b, option)
            self.handed.put((b, parts))
            self.wait_for(b)  # (inside backward's hook, as torch's is)

        def ready(i: int, grad: torch.Tensor) -> float:
            """Hand over the buckets tensor i completes. Under `synchronous`, the
            seconds this held backward — the hand-over and the wait, which is the
            hook's time, not compute: `Backward.step` leaves it out of the profile."""
            r0 = time.perf_counter()
            got[i] = grad
            handed_one = False
            for b in owners[i]:
                left[b] -= 1
                if not left[b]:  # the bucket's last gradient: hand it over
                    hand(b)
                    handed_one = True
            if not (self.synchronous and handed_one):
                return 0.0
            waited[i] = time.perf_counter() - r0
            return waited[i]

        try:
            grads, done, start = self.backward.step(self.rank, self.step, ready)
            for b in range(len(plan.buckets)):  # buckets holding a parameter backward never reached
                if left[b] > 0:
                    got.update({j: grads[j] for j in plan.buckets[b] if j not in got})
                    hand(b)
            cursor = start - t0 + done.forward_s
            self.log.append(("compute", "forward", "forward", start, t0 + cursor, 0))
            for i, t in enumerate(done.tensors):
                self.log.append(("compute", t.name, "backward", t0 + cursor,
                                 t0 + cursor + t.backward_s, 0))  # fmt: skip
                cursor += t.backward_s + waited.get(i, 0.0)
            return cursor
        finally:
            self.handed.put(None)

    def compute(self) -> float:
        """Forward and backward waited out as the profile times them, each bucket's work
        before its first phase run once its gradients are ready (on the GPU: here, behind
        backward) and the bucket handed over; the seconds from `t0` to backward's end."""
        profile, plan, t0 = self.profile, self.plan, self.t0
        try:
            cursor = profile.forward_s
            self.log.append(("compute", "forward", "forward", t0, t0 + cursor, 0))
            done = 0
            for b, (bucket, option) in enumerate(zip(plan.buckets, plan.options, strict=True)):
                for i in bucket:
                    if i >= done:  # a tensor split over buckets is computed once
                        t = profile.tensors[i]
                        self.log.append(("compute", t.name, "backward", t0 + cursor,
                                         t0 + cursor + t.backward_s, 0))  # fmt: skip
                        cursor += t.backward_s
                        done = i + 1
                _sleep_until(t0 + cursor)
                assert option is not None  # `emulate.check_cell` refuses buckets left out
                parts = self.parts(b, option)
                if on_gpu(option):  # the bucket's work before its first phase
                    next(parts, None)
                    cursor = max(cursor, time.perf_counter() - t0)
                self.handed.put((b, parts))
                if self.synchronous:  # backward goes on once the bucket is done
                    self.wait_for(b)
                    cursor = max(cursor, time.perf_counter() - t0)
            return cursor
        finally:
            self.handed.put(None)


def join(rank: int, world: int, gpus: int, port: int, timeout_s: float = 30.0,
         host: str = LOOPBACK, backend: str = "gloo") -> tuple[Groups, Any]:
    """Join the cell's process groups as rank `rank` of `world`, `gpus` to a machine (the
    module docstring): its `Groups`, and rank 0's listening socket (None elsewhere),
    which must stay open while the store serves on it."""
    if host == LOOPBACK:  # one host: gloo's pairs on loopback too
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    else:  # the interface holding this node's Ray address (the hostname may resolve
        # to 127.0.1.1, which gloo would announce to the other hosts)
        import ray

        address = ray.util.get_node_ip_address()
        name = interface_of(address)
        if name is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = name
        else:  # gloo resolves the hostname, which may name a loopback address
            warnings.warn(
                f"emulate: no interface holds {address} as its IPv4 address; gloo "
                "picks one from the hostname (set GLOO_SOCKET_IFNAME if peers time out)",
                stacklevel=2,
            )
    timeout = datetime.timedelta(seconds=timeout_s)
    listen = None
    if rank == 0:  # the rendezvous store on a socket of ours: torch's binds every address
        listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.bind((host, port))
        listen.listen(world)
    store = dist.TCPStore(
        host,
        port,
        world,
        is_master=rank == 0,
        timeout=timeout,
        master_listen_fd=None if listen is None else listen.fileno(),
    )
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    machines = world // gpus
    intra = inter = None
    for m in range(machines):
        g = dist.new_group(list(range(m * gpus, (m + 1) * gpus)))
        if rank // gpus == m:
            intra = g
    for j in range(gpus):
        g = dist.new_group([m * gpus + j for m in range(machines)])
        if rank % gpus == j:
            inter = g
    groups = Groups(
        flat=dist.group.WORLD,
        intra=intra,
        inter=inter,
        sizes={"flat": world, "intra": gpus, "inter": machines},
        ranks={"flat": rank, "intra": rank % gpus, "inter": rank // gpus},
    )
    return groups, listen


class Worker:
    """One emulated GPU: rank `rank` of `world`, `gpus` to a machine."""

    def __init__(
        self,
        rank: int,
        world: int,
        gpus: int,
        port: int,
        timeout_s: float = 30.0,
        host: str = LOOPBACK,
    ):
        torch.set_num_threads(1)  # the workers share the host's cores
        self.rank, self.world, self.gpus = rank, world, gpus
        self.groups, self._listen = join(rank, world, gpus, port, timeout_s, host)

    def run(
        self,
        cell: Cell,
        steps: int,
        keep: bool = False,
        servers: list[Any] | None = None,
        planned: Plan | None = None,
        held_out: dict[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """`steps` iterations of the cell's plan on this worker's gradients: per step and
        bucket the bytes of each phase; the iteration (`metrics`, `iteration_s`) on the
        cell's clock — virtual (`clock`, step 0) or wall (`wall_step`, the last step: the
        ones before warm the caches, compile 3LC's kernel and open gloo's pairs); the wall
        time of each step; and from rank 0 the fidelity (`Fidelity`), with `keep` its
        aggregated gradient of step 0 too (for small models: tests).

        The reference is every worker's raw gradient summed in float64 (a `reduce` to rank
        0 after the iteration, not counted in its bytes or time): the exact sum to within
        2^-50 or so, against which rank 0 measures its aggregate. `servers`: the cell's
        summation servers (`server.Server` actors), pushed to on this worker's ring;
        `planned`: a planner's plan, made by the task that runs the cell; `held_out`: what
        that task counted and fitted on held-out passes for the size model of real
        gradients (`backward.held_out_state`), so this worker does not run them."""
        from gcbench.backends.simulate import period_mean, period_of
        from gcbench.cluster.backward import held_out_passes, prime
        from gcbench.cluster.server import Servers

        if servers:
            g = self.gpus
            self.groups.servers = Servers(servers, self.rank % g, self.world // g, self.rank // g)

        prime(held_out or {})
        profile, period = period_of(cell, planned)
        strategy = strategies.get(cell.strategy)
        plan = period[0].plan  # every step of a period has the same buckets
        numels = [t.numel for t in profile.tensors]
        comp, memory = _compressor_and_memory(cell, profile, plan.buckets, strategy)
        cuts = shard_slices(plan.buckets, plan.elements, numels)
        draws = _Draws(cell.seed, self.rank, numels, cuts)
        phase_bytes: list[list[list[int]]] = []
        sums = _Sums(self.rank, self.world, keep)
        step_s: list[float] = []
        walls: list[tuple[float, dict[str, Any], list[Job]]] = []  # wall clock, per step
        B = len(plan.buckets)
        backward = None
        if cell.measured_compute:  # real gradients from a real backward
            from gcbench.cluster.backward import Backward

            device = "cuda" if torch.cuda.is_available() and _holds_gpu() else "cpu"
            backward = Backward(profile, cell.seed, device)
        measured: list[Any] = []  # the profile as each step measured it
        for step in range(steps):
            plan, costs = period[step % len(period)].plan, period[step % len(period)].costs
            options = strategy.executed(plan.options)
            if cell.wall_clock:
                if backward is None:  # every gradient first: drawing them is not timed
                    xs = [draws.draw(step, b, plan.buckets[b]) for b in range(B)]
                else:  # made by backward, within the step
                    xs = [torch.empty(0)] * B
                t0 = time.perf_counter()
                outs, jobs, seconds = self.wall_step(
                    profile, replace(plan, options=options), xs, comp, memory, step, backward,
                    cuts, costs.synchronous,
                )  # fmt: skip
                step_s.append(time.perf_counter() - t0)
                phase_bytes.append([out.phase_bytes for out in outs])
                self._wire_bytes(profile, costs, plan, phase_bytes[-1], comp.splittable, jobs)
                walls.append(
                    (seconds, timeline_metrics(jobs, seconds, profile, self.world, B), jobs)
                )
                for b in range(B):  # released bucket by bucket: bert-base holds 440 MB
                    sums.add(step, b, xs[b], outs[b])
                    xs[b] = outs[b] = None  # type: ignore[call-overload]
                continue
            t0 = time.perf_counter()
            grads: list[torch.Tensor] = []
            if backward is not None:
                grads, done, _ = backward.step(self.rank, step)
                measured.append(done)
            per_bucket = []
            for b, (bucket, option) in enumerate(zip(plan.buckets, options, strict=True)):
                if backward is None:
                    x = draws.draw(step, b, bucket)
                else:
                    x = torch.cat([grads[i] for i in bucket])
                    x = x if cuts[b] is None else x[cuts[b][0] : cuts[b][1]]  # type: ignore[index]
                assert option is not None  # `emulate.check_cell` refuses buckets left out
                out = run_option(option, x, comp, memory, f"bucket{b}", step, self.groups, b)
                per_bucket.append(out.phase_bytes)
                sums.add(step, b, x, out)
            phase_bytes.append(per_bucket)
            step_s.append(time.perf_counter() - t0)
        sums.finish(len(plan.buckets))
        if cell.wall_clock:
            iteration_s, metrics, jobs = walls[-1]
        else:  # each step's compute as measured; a periodic strategy's mean over its period
            clocks = [
                self.clock(measured[k] if measured else profile, p.plan, p.costs, phase_bytes[k],
                           comp.splittable)  # fmt: skip
                for k, p in enumerate(period)
            ]
            jobs = clocks[0][2]
            metrics = period_mean(profile, [c[1] for c in clocks], [p.weight for p in period])
            iteration_s = metrics["iteration_s"]
        import ray

        return {
            "rank": self.rank,
            "node": ray.get_runtime_context().get_node_id(),
            "phase_bytes": phase_bytes,
            "iteration_s": iteration_s,
            "metrics": metrics,
            # rank 0: its timeline's spans, and on the wall clock each step's metrics
            "spans": Result(iteration_s, metrics, jobs).spans() if self.rank == 0 else None,
            "step_metrics": [w[1] for w in walls] if self.rank == 0 else None,
            "step_s": step_s,
            "fidelity": sums.fid.result() if self.rank == 0 else None,
            "aggregates": sums.kept if self.rank == 0 else None,
            "held_out_passes": held_out_passes(),
        }

    def wall_step(
        self,
        profile: Any,
        plan: Plan,
        xs: list[torch.Tensor],
        comp: Any,
        memory: Any,
        step: int,
        backward: Any = None,
        cuts: list[tuple[int, int] | None] | None = None,
        synchronous: bool = False,
    ) -> tuple[list[Outcome], list[Job], float]:
        """One iteration on the wall clock (issue #14's `clock: wall`), with the
        simulator's streams as threads: a compute thread waits out forward and backward
        as the profile times them (each tensor's gradient is ready when its backward
        would end) and runs each bucket's work before its first phase (compression, on
        the GPU's stream behind backward); this thread runs the buckets' phases in order
        as they are handed over (one communication stream, FIFO); the work after a
        phase's first GPU operation waits for backward to end, bucket by bucket; then the
        update, waited out. Every worker starts together (a barrier); the compression and
        the collectives are real, so their times are this machine's. Returns the
        buckets' outcomes, the jobs as they ran (seconds from the iteration's start) and
        the iteration's seconds.

        With `backward` (`compute_time: measured`), the compute thread runs the real
        forward and backward instead, and each bucket, filled into `xs` as its last
        gradient is ready, goes to this thread whole (its compression then runs here,
        beside backward, as on a stream of its own); `cuts`: each bucket's slice of its
        tensors' gradient (`execute.shard_slices`), where it is a shard.

        `synchronous` (torch's powerSGD_hook, `Costs.synchronous`): nothing is deferred,
        and backward waits for each bucket's last work before it goes on."""
        B = len(plan.buckets)
        cuts = cuts or [None] * B
        w = _WallStep(self.groups, self.rank, profile, plan, xs, comp, memory, step, backward,
                      cuts, synchronous)  # fmt: skip
        finished, outs, handed = w.finished, w.outs, w.handed
        dist.barrier(group=self.groups.flat)  # type: ignore[arg-type]
        t0 = w.t0 = time.perf_counter()
        with ThreadPoolExecutor(1) as pool:
            backward_done = pool.submit(w.compute if backward is None else w.measured)
            later: list[tuple[int, Iterator[str]]] = []
            try:
                while (item := handed.get()) is not None:
                    for marker in item[1]:  # the phases, up to the first deferred operation
                        if marker == DEFERRED and not synchronous:
                            later.append(item)
                            break
                    else:
                        self._drop(outs[item[0]])
                    finished[item[0]].set()
            except BaseException:  # a waiting backward fails now, not after SYNC_WAIT_S
                w.failed.set()
                for event in finished:
                    event.set()
                raise
            backward_end = t0 + backward_done.result()
        _sleep_until(backward_end)
        for b, parts in later:
            for _ in parts:
                pass
            self._drop(outs[b])
        start = time.perf_counter()
        _sleep_until(start + profile.update_s)
        end = time.perf_counter()
        w.log.append(("compute", "update", "update", start, end, 0))
        jobs = [Job(st, name, kind, b - a, nb, a - t0) for st, name, kind, a, b, nb in w.log]
        return outs, jobs, end - t0

    def _wire_bytes(
        self,
        profile: Any,
        costs: Any,
        plan: Plan,
        phase_bytes: list[list[int]],
        splittable: bool,
        jobs: list[Job],
    ) -> None:
        """Set the wall clock's communication jobs' bytes to the bytes on the wire as the
        simulator counts them (a ring allreduce's 2(n-1)/n of the vector...), for the
        payloads this step sent (`phase_bytes`, per bucket)."""
        sent = payloads(plan.options, [phase_bytes], self.groups.sizes, splittable)
        fed = simulate(profile, costs, plan, payloads=sent)
        wire = {j.name: j.bytes for j in fed.jobs if j.kind == "comm"}
        for j in jobs:
            j.bytes = wire.get(j.name, j.bytes)

    def _drop(self, out: Outcome) -> None:
        """Only rank 0 measures the aggregate (`Fidelity`): the others let theirs go as
        soon as it is complete (the wall clock holds every bucket's to the step's end)."""
        if self.rank:
            out.aggregate = torch.empty(0)

    def clock(
        self,
        profile: Any,
        plan: Plan,
        costs: Any,
        phase_bytes: list[list[int]],
        splittable: bool = False,
    ) -> tuple[float, dict[str, Any], list[Job]]:
        """The virtual clock (issue #14): the simulator's timeline of this worker, each
        bucket's compressed payload as this worker sent it (`splittable`: the
        compressor's, for `execute.payloads`), and every collective's start
        and end agreed with its peers (the latest start, the slowest peer's end): the
        timestamps travel in a small allgather per collective."""
        sizes = payloads(plan.options, [phase_bytes], self.groups.sizes, splittable)

        def sync(level: str, start: float, dur: float) -> tuple[float, float]:
            group, size = self.groups.group(level), self.groups.sizes[level]
            mine = torch.tensor([start, dur], dtype=torch.float64)
            every = [torch.empty_like(mine) for _ in range(size)]
            dist.all_gather(every, mine, group=group)
            first = max(float(e[0]) for e in every)
            return first, max(first + float(e[1]) for e in every)

        keep = self.rank == 0
        result = simulate(profile, costs, plan, keep_jobs=keep, payloads=sizes, sync=sync)
        return result.iteration_s, result.metrics, result.jobs

    def ready(self) -> int:
        """Answers once the actor has joined its process groups (start-up measured)."""
        return self.rank

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
