"""Measured profiles: run real training iterations of a zoo model on this host.

Each iteration runs forward, a scalar loss, backward and an SGD-with-momentum step on
random inputs of the model's shapes. A post-accumulate-grad hook on every parameter
timestamps the moment its gradient is complete (on CUDA with events on the current stream,
so GPU time is measured, not launch time). After warm-up iterations, the median over the
timed iterations of each timestamp, forward time and update time make the profile;
gradient order is the order of the median ready times.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gcbench.errors import ConfigError
from gcbench.zoo.catalog import MODELS
from gcbench.zoo.nets import build
from gcbench.zoo.profile import ModelProfile, TensorProfile
from gcbench.zoo.trace import model_input

Mark = float | Any  # perf_counter seconds on CPU, a recorded torch.cuda.Event on a GPU


@dataclass
class _Clock:
    """Timestamps: perf_counter on CPU, CUDA events on a GPU (so GPU time is measured,
    not launch time)."""

    device: torch.device

    def mark(self) -> Mark:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Mark, end: Mark) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return float(start.elapsed_time(end)) / 1e3  # type: ignore[union-attr]
        return float(end - start)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _loss(out: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    outs = out if isinstance(out, tuple) else (out,)
    return sum((o.float().mean() for o in outs), torch.zeros((), device=outs[0].device))


class _Session:
    """A model on a device with its inputs and optimizer, ready to run timed iterations."""

    def __init__(self, name: str, batch: int, seq: int | None, torch_device: str):
        self.device = torch.device(torch_device)
        torch.manual_seed(0)
        self.model = build(name, device=self.device)
        self.model.train()
        self.params = list(self.model.named_parameters())
        self.owner: dict[int, str] = {}  # a tied parameter belongs to its first module
        for mod, m in self.model.named_modules():
            for p in m.parameters(recurse=False):
                self.owner.setdefault(id(p), mod)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-6, momentum=0.9)
        self.clock = _Clock(self.device)
        self.inputs = model_input(name, batch, seq, self.device)
        self.marks: dict[int, Mark] = {}
        self.handles: list[torch.utils.hooks.RemovableHandle] = []

    def instrument(self, on: bool) -> None:
        """Add (or remove) the hooks that timestamp each gradient becoming ready."""
        for h in self.handles:
            h.remove()
        self.handles = []
        if on:
            marks, mark = self.marks, self.clock.mark
            for i, (_, p) in enumerate(self.params):

                def hook(_p: torch.Tensor, i: int = i) -> None:
                    marks[i] = mark()  # kept minimal: this runs inside backward

                self.handles.append(p.register_post_accumulate_grad_hook(hook))

    def iteration(self) -> tuple[float, float, float, dict[int, float]]:
        """(forward_s, backward_s, update_s, {parameter index: ready time after backward start})"""
        clock = self.clock
        self.marks.clear()
        clock.sync()
        t0 = clock.mark()
        loss = _loss(self.model(self.inputs))
        t1 = clock.mark()
        loss.backward()
        t2 = clock.mark()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        t3 = clock.mark()
        clock.sync()
        ready = {i: clock.seconds(t1, m) for i, m in self.marks.items()}
        return clock.seconds(t0, t1), clock.seconds(t1, t2), clock.seconds(t2, t3), ready


def _check(name: str, torch_device: str, warmup: int, iterations: int) -> None:
    if name not in MODELS:
        raise ConfigError([f"unknown model {name!r}; valid: {', '.join(sorted(MODELS))}"])
    if torch_device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(["--torch-device cuda: no CUDA device is visible to torch here"])
    if torch_device.split(":")[0] not in ("cpu", "cuda"):
        raise ConfigError([f"--torch-device must be cpu or cuda, got {torch_device!r}"])
    if iterations < 1 or warmup < 0:
        raise ConfigError([f"need iterations >= 1 and warmup >= 0, got {iterations}, {warmup}"])


def iteration_bytes(name: str, batch: int, seq: int | None) -> int:
    """About the memory one training iteration of `name` takes: its parameters, their
    gradients and SGD's momentum, the inputs, and every tensor the forward saves for
    backward, counted on the meta device (nothing allocated)."""
    model = build(name, device="meta")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    saved: dict[int, int] = {}  # a tensor two operations save counts once

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[id(t)] = t.numel() * t.element_size()
        return t

    x = model_input(name, batch, seq, "meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    outs = out if isinstance(out, tuple) else (out,)
    produced = sum(o.numel() * o.element_size() for o in outs)
    return 3 * weights + x.numel() * x.element_size() + sum(saved.values()) + produced


def available_bytes(torch_device: str) -> int | None:
    """Memory free for a new allocation on `torch_device` (None where unknown): the GPU's
    free memory, or the host's available memory (Linux's MemAvailable)."""
    if torch_device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(torch_device))
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_memory(name: str, batch: int, seq: int | None, torch_device: str) -> None:
    """Refuse, before anything is allocated, an iteration that cannot fit (issue #35:
    `--batch 100000` on resnet50 died allocating 60 GB)."""
    need = iteration_bytes(name, batch, seq)
    have = available_bytes(torch_device)
    if have is not None and need > have:
        raise ConfigError(
            [f"{name} at batch {batch}: an iteration needs about {need / 2**30:,.1f} GiB on "
             f"{torch_device}, {have / 2**30:,.1f} GiB is available; lower --batch"]
        )  # fmt: skip


def measure_profile(
    name: str,
    batch_size: int | None = None,
    seq_len: int | None = None,
    torch_device: str = "cpu",
    warmup: int = 2,
    iterations: int = 5,
    on_iteration: Callable[[int, int], None] | None = None,
) -> ModelProfile:
    """Measure `name` on `torch_device`; `on_iteration(done, total)` reports progress."""
    _check(name, torch_device, warmup, iterations)
    info = MODELS[name]
    batch = batch_size or info.batch_size
    seq = seq_len or info.seq_len
    _check_memory(name, batch, seq, torch_device)
    run = _Session(name, batch, seq, torch_device)
    run.instrument(True)
    ready: list[list[float]] = [[] for _ in run.params]
    forward: list[float] = []
    backward: list[float] = []
    update: list[float] = []
    total = warmup + iterations
    for it in range(total):
        fwd, bwd, upd, marks = run.iteration()
        if it >= warmup:
            forward.append(fwd)
            backward.append(bwd)
            update.append(upd)
            for i, t in marks.items():
                ready[i].append(t)
        if on_iteration:
            on_iteration(it + 1, total)
    run.instrument(False)

    missing = [run.params[i][0] for i, r in enumerate(ready) if not r]
    if missing:
        raise ConfigError([f"{name}: no gradient reached {', '.join(missing[:3])}"])
    medians = [statistics.median(r) for r in ready]
    order = sorted(range(len(run.params)), key=lambda i: (medians[i], -i))
    tensors: list[TensorProfile] = []
    previous = 0.0
    for i in order:
        pname, p = run.params[i]
        layer = run.owner.get(id(p), "")
        tensors.append(
            TensorProfile(pname, tuple(p.shape), p.numel(), layer, medians[i] - previous)
        )
        previous = medians[i]
    device = run.device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    return ModelProfile(
        name,
        batch,
        seq,
        info.sample_unit,
        f"{torch_device} ({where}, torch {torch.__version__})",
        statistics.median(forward),
        statistics.median(update),
        tuple(tensors),
        source="measured",
        notes=(
            f"median of {iterations} iterations after {warmup} warm-up; end-to-end backward "
            f"{statistics.median(backward):.6f} s",
        ),
    )


def instrumentation_overhead(
    name: str, batch_size: int, seq_len: int | None, pairs: int, torch_device: str = "cpu"
) -> tuple[list[float], list[float]]:
    """Backward seconds without and with the ready-time hooks, interleaved in `pairs`."""
    run = _Session(name, batch_size, seq_len, torch_device)
    run.iteration()  # warm-up
    plain: list[float] = []
    hooked: list[float] = []
    for _ in range(pairs):
        run.instrument(False)
        plain.append(run.iteration()[1])
        run.instrument(True)
        hooked.append(run.iteration()[1])
    run.instrument(False)
    return plain, hooked
