"""A worker's real forward and backward pass, for `compute_time: measured` (issue #14):
the zoo model built on the actor's device (a GPU where the actor holds one, else the
CPU), the same weights on every worker (seeded by the cell), a batch of the cell's size
of random input different per worker and step, and a cross-entropy loss against random
labels (the mean of the outputs for models without class scores). The gradients are the
real ones, handed over per tensor as backward produces them, and the compute is timed:
forward, and for each tensor the time from the previous gradient becoming ready to its
own (a post-accumulate-grad hook per parameter, as `zoo.measure` times a profile). The
update is not run (the workers' weights stay equal): its time stays the profile's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from gcbench.backends.simulate import HELD_OUT
from gcbench.compress.base import stable_seed
from gcbench.errors import ConfigError
from gcbench.zoo.profile import ModelProfile


def check(profile_file: str | None, name: str, what: str = "emulate: compute_time: measured",
          instead: str = "compute_time: profile") -> None:  # fmt: skip
    """ConfigError unless a real backward can run: a zoo model, not one whose profile
    comes from a file (it has no module to run); `what` runs it, `instead` says what to
    use otherwise."""
    from gcbench.zoo.nets import BUILDERS

    if profile_file is not None or name not in BUILDERS:
        raise ConfigError(
            [f"{what} runs a zoo model's real backward; {profile_file or name} is not one "
             f"({instead})"]
        )  # fmt: skip


class Backward:
    """The model of `profile` on `device`, ready to run seeded iterations."""

    def __init__(self, profile: ModelProfile, seed: int, device: str = "cpu"):
        from gcbench.zoo.nets import build

        check(None, profile.name)
        self.profile, self.seed, self.device = profile, seed, torch.device(device)
        torch.manual_seed(stable_seed("weights", seed))  # the same weights on every worker
        self.model = build(profile.name, device=self.device)
        self.model.train()
        params = dict(self.model.named_parameters())
        missing = [t.name for t in profile.tensors if t.name not in params]
        if missing:
            raise ConfigError(
                [f"compute_time: measured: {profile.name}'s profile names {missing[0]!r}, "
                 "which the model does not have"]
            )  # fmt: skip
        self.order = [params[t.name] for t in profile.tensors]

    def step(
        self,
        rank: int,
        step: int,
        ready: Callable[[int, torch.Tensor], float | None] | None = None,
    ) -> tuple[list[torch.Tensor], ModelProfile, float]:
        """One forward and backward on this worker's input for `step`: every tensor's
        gradient (1-D float32 on the CPU, in the profile's order), the profile as
        measured, and when forward began (`time.perf_counter`). `ready(i, grad)` is
        called inside backward as tensor i's gradient is complete; the seconds it
        returns held backward (a synchronous hook waiting for communication) and are left
        out of the measured backward times."""
        from gcbench.zoo.trace import model_input

        p = self.profile
        g = torch.Generator(device="cpu").manual_seed(stable_seed("input", self.seed, rank, step))
        # the input and the forward's own draws (dropout) from this worker's seed, so the
        # gradients depend on (seed, rank, step) alone, not on what the process ran before
        # (on a GPU up to the order of atomic additions in some backward kernels)
        with _forked():
            drawn = int(torch.randint(0, 2**62, (1,), generator=g))
            torch.default_generator.manual_seed(drawn)
            if self.device.type == "cuda":  # initialised by the model: `_forked` keeps it
                torch.cuda.manual_seed_all(drawn)
            inputs = model_input(p.name, p.batch_size, p.seq_len, self.device)
            return self._run(inputs, g, ready)

    def _run(
        self,
        inputs: Any,
        g: torch.Generator,
        ready: Callable[[int, torch.Tensor], float | None] | None,
    ) -> tuple[list[torch.Tensor], ModelProfile, float]:
        p = self.profile
        marks: dict[int, float] = {}
        grads: list[torch.Tensor | None] = [None] * len(self.order)
        held = 0.0  # seconds `ready` held backward so far

        def hook(param: torch.Tensor, i: int) -> None:
            nonlocal held
            assert param.grad is not None
            grads[i] = param.grad.detach().reshape(-1).float().to("cpu", copy=True)
            self._sync()
            marks[i] = time.perf_counter() - held
            if ready is not None:
                held += ready(i, grads[i]) or 0.0  # type: ignore[arg-type]

        handles = [
            t.register_post_accumulate_grad_hook(lambda q, i=i: hook(q, i))
            for i, t in enumerate(self.order)
        ]
        try:
            self._sync()
            t0 = time.perf_counter()
            loss = batch_loss(self.model(inputs), g)
            self._sync()
            t1 = time.perf_counter()
            loss.backward()
        finally:
            for h in handles:
                h.remove()
            self.model.zero_grad(set_to_none=True)
        # a parameter backward did not reach (unused): a zero gradient
        out = [
            x if x is not None else torch.zeros(t.numel)
            for x, t in zip(grads, p.tensors, strict=True)
        ]
        previous, tensors = t1, []
        for i, t in enumerate(p.tensors):
            at = max(marks.get(i, previous), previous)  # out of order: no time of its own
            tensors.append(replace(t, backward_s=at - previous))
            previous = at
        measured = replace(p, forward_s=t1 - t0, tensors=tuple(tensors), source="measured")
        return out, measured, t0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


FIT_RANK = -1  # the input the expected-size model's scales are fitted on: no worker's
# What this process fitted or counted on held-out passes (`_observed`): (kind, *model,
# label, k), model = `_model_key`; the cell's task computes them and hands them to its
# workers (`held_out_state`, `prime`): no worker runs passes
_HELD: dict[tuple[Any, ...], Any] = {}


_PASSES = [0]  # held-out backward passes this process ran


def held_out_passes() -> int:
    """How many held-out backward passes this process ran (a worker handed the cell's
    counts runs none: tests check it)."""
    return _PASSES[0]


def _model_key(profile: ModelProfile, seed: int) -> tuple[Any, ...]:
    return (profile.name, profile.batch_size, profile.seq_len, len(profile.tensors), seed)


def held_out_state(profile: ModelProfile, seed: int) -> dict[tuple[Any, ...], Any]:
    """Everything this process fitted or counted on held-out passes of this model and
    seed (`fitted_scales`, `held_out_bytes`, `held_out_peaks`), for `prime` in another
    process."""
    model = _model_key(profile, seed)
    return {k: v for k, v in _HELD.items() if k[1 : 1 + len(model)] == model}


def prime(state: dict[tuple[Any, ...], Any]) -> None:
    """Take what another process fitted or counted (`held_out_state`): the passes are
    not run again here."""
    _HELD.update(state)


def _forked() -> Any:
    """The caller's random state kept aside (restored on exit), CUDA's included where
    this process has it initialised."""
    cuda = torch.cuda.is_initialized()
    return torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else [])


def _observed(
    kind: str,
    profile: ModelProfile,
    seed: int,
    label: str,
    summed: int,
    summarise: Callable[[list[torch.Tensor]], Any],
) -> Any:
    """`summarise` of the sum of `summed` real backward passes on inputs no worker draws
    (ranks `FIT_RANK`, `FIT_RANK` - 1, ...), kept in `_HELD` per kind, model shape, seed,
    compressor (`label`) and prefix of the passes (every prefix up to `summed` is
    summarised on the way); the caller's random state is left as it was."""
    key = (kind, *_model_key(profile, seed), label)
    if (*key, summed) not in _HELD:
        with _forked():
            backward = Backward(profile, seed)
            total: list[torch.Tensor] = []
            for j in range(summed):
                grads, _, _ = backward.step(FIT_RANK - j, 0)
                _PASSES[0] += 1
                if total:
                    grads = [a.add_(g) for a, g in zip(total, grads, strict=True)]
                total = grads
                _HELD[(*key, j + 1)] = summarise(total)
    return _HELD[(*key, summed)]


def fitted_scales(profile: ModelProfile, seed: int) -> tuple[float, ...]:
    """Each tensor's gradient scale (`law.fit_scale`) from one held-out pass: the size
    model real gradients were planned with before `held_out_bytes` and `held_out_peaks`,
    kept for `benchmarks/payload_sizes.py`'s comparison."""
    from gcbench.compress.law import fit_scale

    return _observed(
        "scales", profile, seed, "", 1, lambda total: tuple(fit_scale(g.numpy()) for g in total)
    )


def held_out_bytes(
    profile: ModelProfile, seed: int, compressor: Any, label: str, summed: int = 1
) -> tuple[float, ...]:
    """Per tensor, the bytes `compressor.counted_bytes` counts (a compressor whose payload
    adds over its tensors: threshold) on the sum of `summed` held-out passes
    (`_observed`): the expected-size model of a `compute_time: measured` cell, out of
    sample. Counted on real gradients, not on a law: their tails (bert-base-squad's are
    far lighter than t₃'s) and the correlation between workers (the same weights: a sum
    keeps values past τ that neither worker's gradient had) are in the counts. One pass
    per worker summed; `label` names the compressor and its parameters (the cell's
    `compressor.label()`)."""
    return _observed(
        "counts", profile, seed, label, summed,
        lambda total: tuple(compressor.counted_bytes(g) for g in total),
    )  # fmt: skip


def held_out_peaks(
    profile: ModelProfile, seed: int, sparsity: float, label: str, summed: int = 1
) -> tuple[tuple[float, ...], np.ndarray]:
    """3LC's view of the sum of `summed` held-out passes (`_observed`): each tensor's peak
    |g|, and `encoded[i, j]`, the bytes of tensor i's zero-run encoded stream (3LC §3.3,
    groups of five from its first value) when the bucket's peak is tensor j's: its values
    past `sparsity` · that peak / 2 are the nonzero ones. A bucket's peak is its largest
    tensor's, so a bucket's payload is read from this table (`ThreeLC.observed_bytes`),
    the runs as the real values leave them."""
    from gcbench.compress.threelc import bytes_at_cuts

    def summarise(total: list[torch.Tensor]) -> tuple[tuple[float, ...], np.ndarray]:
        peaks = np.array([float(g.abs().max()) if g.numel() else 0.0 for g in total])
        cuts = (peaks * sparsity).astype(np.float32).astype(np.float64) / 2  # fp32 m, as sent
        order = np.argsort(cuts, kind="stable")
        encoded = np.empty((len(total), len(total)))
        for i, g in enumerate(total):
            m = g.abs().numpy()  # float32: exact in the float64 comparisons below
            whole = m.size // 5 * 5
            top = m[:whole].reshape(-1, 5).max(axis=1).astype(np.float64)
            if m.size % 5:  # a last group padded with trit 0 is never the zero byte:
                top = np.append(top, np.nan)  # NaN passes no cut (and sorts last)
            encoded[i, order] = bytes_at_cuts(top, np.argsort(top), cuts[order])
        return tuple(peaks.tolist()), encoded

    return _observed("peaks", profile, seed, label, summed, summarise)


def batch_loss(out: Any, g: torch.Generator) -> torch.Tensor:
    """Cross-entropy against random labels where the output holds class scores (the last
    dimension), else the mean of the outputs (a tuple's summed)."""
    if isinstance(out, torch.Tensor) and out.dim() >= 2 and out.shape[-1] > 1:
        scores = out.reshape(-1, out.shape[-1]).float()
        labels = torch.randint(0, out.shape[-1], (scores.shape[0],), generator=g)
        return torch.nn.functional.cross_entropy(scores, labels.to(scores.device))
    outs = out if isinstance(out, tuple) else (out,)
    return sum((o.float().mean() for o in outs), torch.zeros((), device=outs[0].device))


# the simulate backend sizes real gradients' payloads with these (`backends.simulate`)
HELD_OUT.update(bytes=held_out_bytes, peaks=held_out_peaks)
