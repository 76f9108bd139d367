"""The GPU-worker stand-in (issue #14, DESIGN §6): a Ray actor that joins a
`torch.distributed` process group with its peers, as Ray Train sets up its workers,
holds its gradients and executes a plan bucket by bucket (`execute.run_option`).

Process groups: `flat` (every worker), `intra` (one per machine: ranks m·G .. m·G+G-1)
and `inter` (one per local rank j: ranks j, G+j, 2G+j, ...); every worker creates every
group in the same order, as `new_group` requires. gloo binds to loopback
(`GLOO_SOCKET_IFNAME=lo`) and the rendezvous store listens on a socket rank 0 binds to
127.0.0.1 itself (torch's own `TCPStore` server binds every address); every collective
times out after `timeout_s`, so a dead peer fails the cell rather than hanging the run.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Any

import torch
import torch.distributed as dist

from gcbench.cluster.execute import Groups, compressed_phase, run_option
from gcbench.cluster.gradients import bucket_gradient
from gcbench.compress import create, create_memory
from gcbench.config import Cell
from gcbench.sim.iteration import Plan, simulate


def memory_kind(compressor: str) -> str:
    """The error-feedback memory a compressor runs with: DGC's own (momentum
    correction), none for the casts (lossless enough to need none), else the residual."""
    if compressor == "dgc":
        return "dgc"
    if compressor in ("none", "fp16", "bf16"):
        return "none"
    return "residual"


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


class Worker:
    """One emulated GPU: rank `rank` of `world`, `gpus` to a machine."""

    def __init__(self, rank: int, world: int, gpus: int, port: int, timeout_s: float = 30.0):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        torch.set_num_threads(1)  # the workers share the host's cores
        self.rank, self.world, self.gpus = rank, world, gpus
        timeout = datetime.timedelta(seconds=timeout_s)
        listen = None
        if rank == 0:  # the rendezvous store on a socket of ours: torch's binds every address
            listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listen.bind(("127.0.0.1", port))
            listen.listen(world)
        store = dist.TCPStore(
            "127.0.0.1",
            port,
            world,
            is_master=rank == 0,
            timeout=timeout,
            master_listen_fd=None if listen is None else listen.fileno(),
        )
        self._listen = listen  # kept open while the store serves on it
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
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
        self.groups = Groups(
            flat=dist.group.WORLD,
            intra=intra,
            inter=inter,
            sizes={"flat": world, "intra": gpus, "inter": machines},
            ranks={"flat": rank, "intra": rank % gpus, "inter": rank // gpus},
        )

    def run(self, cell: Cell, steps: int, keep: bool = False) -> dict[str, Any]:
        """`steps` iterations of the cell's plan on this worker's gradients: per step and
        bucket the bytes of each phase; (de)compression seconds; the virtual clock's
        iteration at step 0 (`clock`); and from rank 0 the fidelity (`Fidelity`), with
        `keep` its aggregated gradient of step 0 too (for small models: tests).

        The reference is every worker's raw gradient summed in float64 (a `reduce` to rank
        0 beside the plan's collectives, not counted in its bytes): the exact sum to
        within 2^-50 or so, against which rank 0 measures its aggregate."""
        from gcbench.cluster.emulate import plan_of

        profile, plan, costs = plan_of(cell)
        numels = [t.numel for t in profile.tensors]
        comp = create(cell.compressor.kind, **cell.compressor.params())
        memory = create_memory(memory_kind(cell.compressor.kind))
        phase_bytes: list[list[list[int]]] = []
        fid = Fidelity(self.world)
        mine: list[torch.Tensor] = []  # this worker's gradients summed over the steps
        total: list[torch.Tensor] = []  # rank 0: its aggregates summed over the steps
        kept: list[torch.Tensor] = []
        step_s: list[float] = []
        for step in range(steps):
            t0 = time.perf_counter()
            per_bucket = []
            for b, (bucket, option) in enumerate(zip(plan.buckets, plan.options, strict=True)):
                x = bucket_gradient(cell.seed, self.rank, step, bucket, numels)
                x64 = x.double()
                out = run_option(option, x, comp, memory, f"bucket{b}", step, self.groups)
                per_bucket.append(out.phase_bytes)
                if step == 0:
                    mine.append(x64.clone())
                    exact, absum = x64, x64.abs()
                    dist.reduce(exact, dst=0)
                    dist.reduce(absum, dst=0)
                    if self.rank == 0:
                        fid.first(out.aggregate, exact, absum)
                        total.append(out.aggregate.double())
                        if keep:
                            kept.append(out.aggregate.clone())
                else:
                    mine[b] += x64
                    if self.rank == 0:
                        total[b] += out.aggregate.double()
            phase_bytes.append(per_bucket)
            step_s.append(time.perf_counter() - t0)
        for b in range(len(plan.buckets)):
            dist.reduce(mine[b], dst=0)
            if self.rank == 0:
                fid.total(total[b], mine[b])
        iteration_s, metrics = self.clock(profile, plan, costs, phase_bytes[0])
        import ray

        return {
            "rank": self.rank,
            "node": ray.get_runtime_context().get_node_id(),
            "phase_bytes": phase_bytes,
            "iteration_s": iteration_s,
            "metrics": metrics,
            "step_s": step_s,
            "fidelity": fid.result() if self.rank == 0 else None,
            "aggregates": kept if self.rank == 0 else None,
        }

    def clock(
        self, profile: Any, plan: Plan, costs: Any, phase_bytes: list[list[int]]
    ) -> tuple[float, dict[str, Any]]:
        """The virtual clock (issue #14): the simulator's timeline of this worker, each
        bucket's compressed payload as this worker sent it, and every collective's start
        and end agreed with its peers (the latest start, the slowest peer's end): the
        timestamps travel in a small allgather per collective."""
        payloads: list[float | None] = []
        for option, sent in zip(plan.options, phase_bytes, strict=True):
            at = compressed_phase(option)
            payloads.append(None if at is None else float(sent[at]))

        def sync(level: str, start: float, dur: float) -> tuple[float, float]:
            group, size = self.groups.group(level), self.groups.sizes[level]
            mine = torch.tensor([start, dur], dtype=torch.float64)
            every = [torch.empty_like(mine) for _ in range(size)]
            dist.all_gather(every, mine, group=group)
            first = max(float(e[0]) for e in every)
            return first, max(first + float(e[1]) for e in every)

        result = simulate(profile, costs, plan, keep_jobs=False, payloads=payloads, sync=sync)
        return result.iteration_s, result.metrics

    def ready(self) -> int:
        """Answers once the actor has joined its process groups (start-up measured)."""
        return self.rank

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
