"""Measure a cell for real (issue #32, `mode: measure`): the zoo model trained with
PyTorch's `DistributedDataParallel` on one Ray actor per GPU, the cell's compressor
registered as a DDP communication hook (`gcbench.hooks`), and the iterations timed.

The actors are placed as emulation places its workers (`emulate.run_actors`: one
placement-group bundle per machine), each holding a GPU (`num_gpus=1`) unless the cell's
device is `cpu` (decided from the cell, not from the nodes alive when it starts: a `ray
up` cluster boots its GPU nodes on demand), and join one process group as Ray Train's
workers do (`worker.join`: rank 0's store on a port it picked, bounded timeouts,
destroyed when the actors are killed): NCCL on GPUs (a machine's ranks all see its GPUs,
each takes its own by `LOCAL_RANK` and `torch.cuda.set_device`), gloo on CPUs. Each
actor builds the cell's zoo model with the same seeded weights, draws its own seeded
batches (`backward.Backward`'s inputs and loss), wraps the model in DDP with the cell's
buckets (`ddp`: 25 MiB, `fixed:<bytes>`, `tensor`: one parameter a bucket), registers
the hook and runs `WARMUP` iterations then the timed ones, each forward, backward (with
the hook's communication) and torch's SGD step.

Timing: each iteration by the wall clock around it, the device synchronised at both
ends; the iteration is the slowest rank's. Its parts — forward (with the loss), backward
(with DDP's wait for every bucket's hook) and the update — are marked by CUDA events on a
GPU (read after the iteration's synchronisation: no extra host sync) and by the wall
clock on a CPU (`_Marks`), the slowest rank's, beside the profile's predicted forward,
backward and update. The communication's share comes from the hook's own timestamps:
gcbench's hooks run synchronously, so the seconds inside them (the slowest rank's, like
every part) are exposed communication and compression (`comm_exposed_s`) and the rest is
compute; torch's hooks (none, fp16, bf16 and PowerSGD on NCCL) run asynchronously, so
their split is not measured and those columns stay empty. After the last step every
rank's parameter checksum is allgathered: the cell fails if the ranks disagree (a hook
that averaged wrong).

Strategies that are not a DDP hook (PS and BytePS servers, CPU offload, the planner's
per-bucket hierarchical options) are refused by `check_cell` with the reason: emulate
or simulate them. Precision: `amp-fp16` and `amp-bf16` run under torch's autocast
(`AUTOCAST`), the others in fp32.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from typing import Any

import torch

from gcbench.config import Cell
from gcbench.errors import ConfigError

WARMUP = 2  # iterations before the timed ones: DDP's bucket rebuild, gloo's pairs, caches
# A model's precision as torch's automatic mixed precision runs it (torch.amp docs:
# autocast casts eligible ops, the weights and their gradients stay fp32, so DDP's hooks
# see fp32 buckets; fp16 needs a GradScaler); tf32 is a math mode, fp32 torch's default
AUTOCAST = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}
# strategy -> the hook's spec: the compressor's own for the compressing strategies
HOOKED = {"fp32": "none", "fp16": "fp16", "allreduce": None, "allgather": None,
          "powersgd": None, "acpsgd": None, "covap": None}  # fmt: skip


def hook_spec(cell: Cell) -> tuple[str, str | None]:
    """(the `gcbench.hooks` spec, the option its payloads travel by: `allreduce`,
    `allgather`, or None for the compressor's own) of a cell `check_cell` accepts."""
    spec = HOOKED[cell.strategy]
    if spec is not None:
        return spec, None
    option = cell.strategy if cell.strategy in ("allreduce", "allgather") else None
    return cell.compressor.label(), option  # (a preset's name, else kind:params[,ef=false])


def check_cell(cell: Cell) -> None:
    """ConfigError (one line) for a cell `measure` cannot run: a strategy that is not a
    DDP hook, a model with no module to run."""
    from gcbench.cluster.backward import check

    if cell.strategy not in HOOKED:
        raise ConfigError(
            [f"measure: {cell.strategy} is not a DDP communication hook (servers, CPU "
             f"offload and per-bucket hierarchical plans are not); measure runs "
             f"{', '.join(HOOKED)}: emulate or simulate it"]
        )  # fmt: skip
    # (`allreduce` of payloads that do not add up is refused by the cell itself)
    check(cell.model.profile, cell.model.name, "measure", "simulate or emulate it")


def refuse_placement(cell: Cell, nodes: list[dict[str, Any]]) -> None:
    """ConfigError when a GPU cell (device other than `cpu`) meets a Ray cluster with no
    GPU and no placement wait set (`GCBENCH_PLACEMENT_TIMEOUT_S`: an autoscaling cluster
    boots its GPU nodes when asked), else emulation's checks."""
    import os

    from gcbench.cluster.emulate import refuse_placement as placeable

    gpus = sum(n.get("Resources", {}).get("GPU", 0.0) for n in nodes)
    if cell.device != "cpu" and not gpus and not os.environ.get("GCBENCH_PLACEMENT_TIMEOUT_S"):
        raise ConfigError(
            [f"measure: device {cell.device} puts each rank on a GPU; this Ray cluster has "
             "none (device: cpu measures on CPUs; on an autoscaling cluster set "
             "GCBENCH_PLACEMENT_TIMEOUT_S so that its GPU nodes can boot)"]
        )  # fmt: skip
    placeable(cell, nodes)


def bucket_cap_mb(fusion: str) -> float:
    """DDP's `bucket_cap_mb` for a cell's fusion."""
    if fusion == "ddp":
        return 25.0
    if fusion == "tensor":
        return 1e-6  # every parameter its own bucket
    return int(fusion.split(":", 1)[1]) / 2**20


class Measurer:
    """One rank of a measured cell (a Ray actor): rank `rank` of `world`, `gpus` to a
    machine. It joins its process group in `run`, once the driver has told it which GPUs
    its machine's ranks hold (`where`): as Ray Train does, every rank of a machine sees
    them all (`CUDA_VISIBLE_DEVICES`, so NCCL can use the links between them), takes its
    own by `LOCAL_RANK` and `torch.cuda.set_device`."""

    def __init__(self, rank: int, world: int, gpus: int, port: int, timeout_s: float = 60.0,
                 host: str = "127.0.0.1"):  # fmt: skip
        self.rank, self.world = rank, world
        self._join_args = (rank, world, gpus, port, timeout_s, host)
        self.device = torch.device("cpu")  # (CUDA is not touched before `run`)

    def ready(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def where(self) -> tuple[str, list[str]]:
        """This actor's node and the GPU ids Ray gave it (none for a CPU actor)."""
        import ray

        return self.ready(), [str(i) for i in ray.get_gpu_ids()]

    def _join(self, visible: list[str], own: str | None) -> None:
        import os

        from gcbench.cluster.worker import join

        if own is not None:  # Ray Train's shared CUDA_VISIBLE_DEVICES and LOCAL_RANK
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
            local = visible.index(own)
            os.environ["LOCAL_RANK"] = str(local)
            self.device = torch.device("cuda", local)
            torch.cuda.set_device(self.device)
        else:
            torch.set_num_threads(1)  # the actors share the host's cores
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        self.groups, self._listen = join(*self._join_args, backend=backend)

    def run(self, cell: Cell, steps: int, visible: list[str] | None = None,
            own: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Join the process group (`visible`: the GPU ids of this machine's ranks, `own`
        this actor's; none on CPUs), then `WARMUP` and `steps` timed iterations: per step
        the wall seconds and the seconds inside gcbench's hook; the bytes the hook sent;
        the parameters' checksum of every rank after the last step."""
        self._join(visible or [], own)
        from torch.nn.parallel import DistributedDataParallel as DDP

        from gcbench.backends.simulate import cell_profile
        from gcbench.cluster import ddp_hooks
        from gcbench.cluster.backward import batch_loss
        from gcbench.compress.base import stable_seed
        from gcbench.zoo.nets import build
        from gcbench.zoo.trace import model_input

        profile = cell_profile(cell)
        torch.manual_seed(stable_seed("weights", cell.seed))  # the same weights everywhere
        model = build(profile.name, device=self.device)
        model.train()
        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = DDP(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb(cell.fusion))
        spec, option = hook_spec(cell)
        state, fn = ddp_hooks.hook(spec, None, option=option)
        inside = [0.0]

        def timed(state: Any, bucket: Any, fn: Any = fn) -> Any:
            t = time.perf_counter()
            fut = fn(state, bucket)
            inside[0] += time.perf_counter() - t
            return fut

        timed.__annotations__ = fn.__annotations__  # DDP checks them
        ddp.register_comm_hook(state, timed)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
        amp = AUTOCAST.get(cell.model.precision)  # torch's AMP: fp32 weights and gradients
        scaler = torch.amp.GradScaler(self.device.type) if amp == torch.float16 else None
        g = torch.Generator(device="cpu").manual_seed(stable_seed("input", cell.seed, self.rank))
        step_s, hook_s, parts = [], [], []
        for step in range(WARMUP + steps):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)))
            inputs = model_input(profile.name, profile.batch_size, profile.seq_len, self.device)
            self._sync()
            inside[0] = 0.0
            marks = _Marks(self.device)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=amp) if amp else nullcontext():
                loss = batch_loss(ddp(inputs), g)
            marks.mark()  # forward (and the loss) done
            (loss if scaler is None else scaler.scale(loss)).backward()
            marks.mark()  # backward done: DDP waits for every bucket's hook
            if scaler is None:
                opt.step()
            else:  # fp16 autocast: the step unscaled and skipped on inf
                scaler.step(opt)
                scaler.update()
            marks.mark()
            self._sync()
            if step >= WARMUP:
                step_s.append(marks.wall())
                hook_s.append(inside[0])
                parts.append(marks.spans())
        sent = getattr(state, "sent_bytes", None)
        per_step = None if not sent else sent / (WARMUP + steps)
        return {"rank": self.rank, "step_s": step_s, "hook_s": hook_s, "parts": parts,
                "device": self._device_name(), "node": self.ready(),
                "synchronous": isinstance(state, ddp_hooks.HookState),
                "wire_bytes": per_step, "checksums": self._checksums(model)}  # fmt: skip

    def _checksums(self, model: Any) -> list[float]:
        """Every rank's parameter checksum, allgathered (on the rank's device: NCCL
        gathers CUDA tensors only)."""
        import torch.distributed as dist

        total = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()
        sums = [torch.zeros(1, dtype=torch.float64, device=self.device) for _ in range(self.world)]
        dist.all_gather(sums, total.reshape(1).to(self.device))
        return [float(s) for s in sums]

    def _sync(self) -> None:
        sync(self.device)

    def _device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        import os
        import platform

        return f"CPU actor ({platform.machine()}, {os.cpu_count()} cores a node)"


def sync(device: Any) -> None:
    """Wait for the device's queued work (a CUDA device's; a CPU's is done)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def hardware(results: list[dict[str, Any]]) -> str:
    """What a cell's ranks ran on (`hardware` column): `4 x <device> on 2 nodes`."""
    nodes = len({r["node"] for r in results})
    return f"{len(results)} x {results[0]['device']} on {nodes} node{'s' * (nodes > 1)}"


def check_agree(sums: list[float], mode: str, after: str) -> None:
    """RuntimeError where the ranks' allgathered parameter checksums differ (a hook that
    averaged wrong)."""
    if max(sums) - min(sums) > 1e-9 * max(1.0, abs(sums[0])):
        raise RuntimeError(f"{mode}: the ranks' parameters differ after {after} (checksums "
                           f"{', '.join(f'{c:.9g}' for c in sums)})")  # fmt: skip


class _Marks:
    """An iteration's timestamps: CUDA events on a GPU (read after the iteration's
    synchronisation, so marking costs no host sync), the wall clock on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.t0 = time.perf_counter()
        self.events: list[Any] = []
        if self.cuda:
            self.events.append(torch.cuda.Event(enable_timing=True))
            self.events[0].record()

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)
        else:
            self.events.append(time.perf_counter())

    def wall(self) -> float:
        return time.perf_counter() - self.t0

    def spans(self) -> list[float]:
        """Seconds between marks: forward, backward (with DDP's wait for the hooks),
        update."""
        if self.cuda:
            pairs = zip(self.events, self.events[1:], strict=False)
            return [a.elapsed_time(b) / 1e3 for a, b in pairs]
        points = [self.t0, *self.events]
        return [b - a for a, b in zip(points, points[1:], strict=False)]


def rank_calls(cell: Cell, steps: int) -> Any:
    """What the driver asks of a cell's actors: each machine's GPU ids (`where`), then
    every rank's `run` with its machine's."""

    def call(actors: list[Any], _servers: list[Any]) -> list[Any]:
        import ray

        places = ray.get([a.where.remote() for a in actors])
        shared: dict[str, list[str]] = {}
        for node, ids in places:
            shared.setdefault(node, []).extend(ids)
        return [a.run.remote(cell, steps, sorted(shared[node]), ids[0] if ids else None)
                for a, (node, ids) in zip(actors, places, strict=True)]  # fmt: skip

    return call


def measured(cell: Cell, repetitions: int = 1) -> list[dict[str, Any]]:
    """A Record's metrics per repetition for a measured cell: each repetition a timed
    iteration (the slowest rank's), with the simulator's prediction for the same cell
    beside it (`predicted_iteration_s`) and the spread of the timed iterations."""
    from gcbench.backends.simulate import cell_profile, simulate_cell
    from gcbench.cluster.emulate import run_actors

    check_cell(cell)
    steps = max(repetitions, 3)
    results, attempts, startup_s, _ = run_actors(cell, Measurer, rank_calls(cell, steps),
                                                 gpus=cell.device != "cpu")  # fmt: skip
    check_agree(results[0]["checksums"], "measure", f"{steps} steps")  # every rank's
    iters = [max(r["step_s"][k] for r in results) for k in range(steps)]
    slowest = [max(results, key=lambda r: r["step_s"][k]) for k in range(steps)]
    median = statistics.median(iters)
    simulated = cell.model_copy(update={"mode": "simulate"})
    sim = simulate_cell(simulated).metrics
    profile = cell_profile(simulated)
    per_iteration = sim["throughput"] * sim["iteration_s"]  # samples an iteration, all GPUs
    sync = results[0]["synchronous"]
    rows = []
    for k in range(steps)[-repetitions:]:
        # the slowest rank's, as its parts are: another rank's hook seconds are not part
        # of this iteration's backward (the largest over ranks exceeded it under load)
        hook = slowest[k]["hook_s"][k] if sync else None
        rows.append({
            **{m: None for m in sim},
            **{m: sim[m] for m in ("sample_unit", "tensors", "model_mib")}, "plan_file": "",
            "iteration_s": iters[k], "throughput": per_iteration / iters[k],
            "comm_exposed_s": hook, "compute_s": None if hook is None else iters[k] - hook,
            "wire_bytes": results[0]["wire_bytes"],
            "predicted_iteration_s": sim["iteration_s"],
            "predicted_compute_s": sim["compute_s"],
            "predicted_exposed_s": sim["comm_exposed_s"] + sim["compress_exposed_s"],
            # the slowest rank's parts of the step (`_Marks`), the profile's predicted
            **dict(zip(("forward_s", "backward_s", "update_s"), slowest[k]["parts"][k],
                       strict=True)),
            "predicted_forward_s": profile.forward_s,
            "predicted_backward_s": profile.backward_s, "predicted_update_s": profile.update_s,
            "iteration_spread": (max(iters) - min(iters)) / median,
            "attempts": attempts, "startup_s": startup_s, "hardware": hardware(results),
        })  # fmt: skip
    return rows
