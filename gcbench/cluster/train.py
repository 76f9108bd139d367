"""Train for real (issue #33, `mode: train`): measure's DDP workers (`measure.Measurer`,
one Ray actor per GPU, the cell's compressor as the DDP hook) training the cell's zoo
model on the `train:` section's dataset, and logging the loss and held-out accuracy.

One repetition is one training run from its own seed (`cell.seed + repetition`): the seed
draws the initial weights (the same on every rank) and the order of the samples. Every
step takes the next global batch of `world x batch_size` samples from a per-epoch shuffle
(drawn alike on every rank) and each rank takes its own contiguous slice, so the ranks'
DDP-averaged gradient is exactly the gradient of the global batch one process would
compute (the test: `fit` with `world=1` and the global batch gives the same loss curve
to 1e-5). Every `eval_every` steps, and after the last, the ranks' training losses are
averaged (one allreduce) and the held-out split is scored (accuracy, cross-entropy) on
rank 0's weights, which every rank shares (their checksums are compared at the end).

Each step is timed by the wall clock (the device synchronised); a cell's iteration is the
median step of the slowest rank, and `time_to_target_s` is the steps to the target times
that. With a `project:` section the cell is also simulated on that cluster and model, and
the steps to target times its iteration is `projected_time_to_target_s`: the small task's
steps on a large cluster's clock, a proxy the report labels as one.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from contextlib import nullcontext
from typing import Any

import torch

from gcbench.cluster.measure import (
    AUTOCAST,
    Measurer,
    bucket_cap_mb,
    check_agree,
    check_cell,
    hardware,
    hook_spec,
    rank_calls,
    sync,
)
from gcbench.config import Cell
from gcbench.errors import ConfigError


def check_train_cell(cell: Cell) -> None:
    """ConfigError (one line) for a cell `train` cannot run, before Ray starts: measure's
    refusals, a model that reads token ids, a dataset that does not load (digits without
    scikit-learn, a tensor file that is not one) or does not fit the model's input."""
    from gcbench.zoo.catalog import MODELS
    from gcbench.zoo.datasets import fit_input, load_once

    check_cell(cell)
    assert cell.train is not None
    if MODELS[cell.model.name].vocab is not None:
        raise ConfigError([f"train: {cell.model.name} reads token ids; the train datasets "
                           "are classification inputs (image and MLP models take them)"])
    data = load_once(cell.train.dataset)
    fit_input(data.x[:2], MODELS[cell.model.name].input_shape, cell.model.name)


def _optimizer(params: Any, cell: Cell) -> tuple[Any, Any]:
    t = cell.train
    assert t is not None
    if t.optimizer == "adam":
        opt: Any = torch.optim.Adam(params, lr=t.lr)
    else:
        opt = torch.optim.SGD(params, lr=t.lr, momentum=t.momentum)
    sched = None
    if t.schedule == "cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda k: 0.5 * (1 + math.cos(math.pi * min(k, t.steps) / t.steps))
        )
    return opt, sched


def _batches(n: int, size: int, steps: int, seed: int) -> Any:
    """Each step's global batch (indices), from a fresh shuffle every epoch; the same
    on every rank, since the generator is seeded alike."""
    from gcbench.compress.base import stable_seed

    g = torch.Generator().manual_seed(stable_seed("batches", seed))
    order, at = torch.randperm(n, generator=g), 0
    for _ in range(steps):
        if at + size > n:
            order, at = torch.randperm(n, generator=g), 0
        yield order[at : at + size]
        at += size


def _score(model: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float | None]:
    """Held-out (accuracy, cross-entropy)."""
    with torch.no_grad():
        was = model.training
        model.eval()
        out = model(x).float()
        model.train(was)
    acc = float((out.argmax(dim=1) == y).float().mean())
    return acc, _finite(float(torch.nn.functional.cross_entropy(out, y)))


def _finite(value: float) -> float | None:
    """A loss, or None where the run diverged (inf or NaN: the results hold finite
    numbers only)."""
    return value if math.isfinite(value) else None


def fit(cell: Cell, seed: int, data: Any, *, rank: int = 0, world: int = 1,
        batch: int | None = None, wrap: Any = None, device: Any = "cpu",
        ) -> dict[str, Any]:  # fmt: skip
    """One training run of `cell` from `seed` as rank `rank` of `world` (`batch`
    samples a rank a step, default the model's batch size; `wrap`: the DDP wrapper, None
    for one process). Returns the curve (steps, mean training loss over the ranks,
    held-out accuracy), the final held-out accuracy and loss, each step's seconds and the
    trained model."""
    import torch.distributed as dist

    from gcbench.compress.base import stable_seed
    from gcbench.zoo.catalog import MODELS
    from gcbench.zoo.datasets import fit_input
    from gcbench.zoo.nets import build

    t = cell.train
    assert t is not None
    shape = MODELS[cell.model.name].input_shape
    x, x_test = (fit_input(v, shape, cell.model.name).to(device) for v in (data.x, data.x_test))
    y, y_test = data.y.to(device), data.y_test.to(device)
    torch.manual_seed(stable_seed("weights", seed))  # the same weights on every rank
    model = build(cell.model.name, device=device)
    size = int(batch or cell.model.batch_size or 1)  # (a zoo model always has its batch)
    if size * world > len(x):
        raise ConfigError([f"train: a global batch of {size * world} ({world} x {size}) is "
                           f"more than the dataset's {len(x)} training samples"])  # fmt: skip
    with torch.no_grad():  # (eval: batch norm's statistics untouched)
        classes = model.eval()(x[:2]).shape[-1]
    model.train()
    if classes < data.classes:
        raise ConfigError([f"train: {cell.model.name} scores {classes} classes; the dataset "
                           f"has {data.classes}"])  # fmt: skip
    net = wrap(model) if wrap is not None else model
    opt, sched = _optimizer(net.parameters(), cell)
    amp = AUTOCAST.get(cell.model.precision)  # torch's AMP, as measure runs it
    scaler = torch.amp.GradScaler(torch.device(device).type) if amp == torch.float16 else None
    steps: list[int] = []
    losses: list[float | None] = []
    metrics: list[float] = []
    step_s: list[float] = []
    for k, idx in enumerate(_batches(len(x), size * world, t.steps, seed), start=1):
        mine = idx[rank * size : (rank + 1) * size].to(device)
        sync(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=amp) if amp else nullcontext():
            loss = torch.nn.functional.cross_entropy(net(x[mine]).float(), y[mine])
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if sched is not None:
            sched.step()
        sync(device)
        step_s.append(time.perf_counter() - t0)
        if k % t.eval_every == 0 or k == t.steps:
            mean = loss.detach().reshape(1).double()
            if world > 1:
                dist.all_reduce(mean)
            steps.append(k)
            losses.append(_finite(float(mean) / world))
            metrics.append(_score(model, x_test, y_test)[0])
    acc, final_loss = _score(model, x_test, y_test)
    return {"curve_step": steps, "curve_loss": losses, "curve_metric": metrics,
            "final_metric": acc, "final_loss": final_loss, "step_s": step_s,
            "model": model}  # fmt: skip


class Trainer(Measurer):
    """One rank of a trained cell (a Ray actor): measure's placement and process group,
    `fit` for each seed."""

    def run(self, cell: Cell, seeds: int, visible: list[str] | None = None,
            own: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Join the process group, then train `seeds` runs (seeds `cell.seed + k`), each
        its own DDP with the cell's hook; the per-run results and every rank's final
        parameter checksums (allgathered)."""
        self._join(visible or [], own)
        from torch.nn.parallel import DistributedDataParallel as DDP

        from gcbench.cluster import ddp_hooks
        from gcbench.zoo.datasets import load

        assert cell.train is not None
        data = load(cell.train.dataset)
        spec, option = hook_spec(cell)
        runs, sent = [], []
        for k in range(seeds):
            state, hook = ddp_hooks.hook(spec, None, option=option)

            def wrap(model: Any, state: Any = state, hook: Any = hook) -> Any:
                ids = [self.device.index] if self.device.type == "cuda" else None
                ddp = DDP(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb(cell.fusion))
                ddp.register_comm_hook(state, hook)
                return ddp

            out = fit(cell, cell.seed + k, data, rank=self.rank, world=self.world, wrap=wrap,
                      device=self.device)  # fmt: skip
            out["checksums"] = self._checksums(out.pop("model"))
            runs.append(out)
            sb = getattr(state, "sent_bytes", None)
            sent.append(None if not sb else sb / cell.train.steps)
        return {"rank": self.rank, "runs": runs, "wire_bytes": sent, "node": self.ready(),
                "device": self._device_name()}  # fmt: skip


def _projected(cell: Cell) -> float | None:
    """The cell's strategy and compressor simulated on the `project:` cluster: its
    iteration seconds (None without a `project:` section)."""
    from gcbench.backends.simulate import simulate_cell

    assert cell.train is not None
    p = cell.train.project
    if p is None:
        return None
    target = Cell(model={"name": p.model}, compressor=cell.compressor, network=p.network,
                  cluster={"machines": p.machines, "gpus_per_machine": p.gpus_per_machine},
                  strategy=cell.strategy, device=p.device, seed=cell.seed)  # fmt: skip
    return float(simulate_cell(target).metrics["iteration_s"])


def trained(cell: Cell, repetitions: int = 1) -> list[dict[str, Any]]:
    """A Record's metrics per repetition (one training run from its own seed each)."""
    from gcbench.cluster.emulate import run_actors

    check_train_cell(cell)
    assert cell.train is not None
    results, attempts, startup_s, _ = run_actors(cell, Trainer, rank_calls(cell, repetitions),
                                                 gpus=cell.device != "cpu")  # fmt: skip
    projected = _projected(cell)
    world = len(results)
    rows = []
    for k in range(repetitions):
        run = results[0]["runs"][k]
        check_agree(run["checksums"], "train", f"seed {cell.seed + k}")
        steps = len(run["step_s"])
        per_step = [max(r["runs"][k]["step_s"][i] for r in results) for i in range(steps)]
        iteration = statistics.median(per_step)
        reached = None
        if cell.train.target is not None:
            curve = zip(run["curve_step"], run["curve_metric"], strict=True)
            reached = next((s for s, m in curve if m >= cell.train.target), None)
        rows.append({
            "iteration_s": iteration,
            "throughput": (cell.model.batch_size or 1) * world / iteration,
            "sample_unit": "samples", "plan_file": "",
            "wire_bytes": results[0]["wire_bytes"][k],
            "final_metric": run["final_metric"], "final_loss": run["final_loss"],
            # the curves as JSON lists (a parquet list column's type reads back renamed)
            **{m: json.dumps(run[m]) for m in ("curve_step", "curve_loss", "curve_metric")},
            "steps_to_target": reached,
            "time_to_target_s": None if reached is None else reached * iteration,
            "projected_iteration_s": projected,
            "projected_time_to_target_s": None if reached is None or projected is None
            else reached * projected,
            "iteration_spread": (max(per_step) - min(per_step)) / iteration,
            "attempts": attempts, "startup_s": startup_s, "hardware": hardware(results),
        })  # fmt: skip
    return rows
