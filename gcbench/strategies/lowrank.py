"""The low-rank strategies, whose compressor is the strategy (`compress.lowrank`).

- `powersgd`: Power-SGD* (ACP-SGD §V-A: PowerSGD with wait-free backpropagation and
  tensor fusion, "implemented on PyTorch's communication hook"), as torch's
  `powerSGD_hook` runs each bucket: orthogonalise every reused Q and compute P = M Q;
  allreduce the bucket's uncompressed tensors (vectors), then the Ps; orthogonalise every
  P, compute Q = Mᵀ P and allreduce the Qs; decompress. Three allreduces and two QRs per
  matrix a step. Its last callback calls `torch.cuda.synchronize`, and a NCCL future is
  marked complete as soon as its collective is enqueued (ProcessGroupNCCL's
  `collective`), so `then` runs its callbacks inline (pytorch/pytorch#48499, #48561) on
  the thread that attaches them, the autograd thread calling the hook: backward stops
  until the bucket is synchronised, so no bucket overlaps the backward
  (`Costs.synchronous`). ACP-SGD §IV-A: in Power-SGD "the communication tasks will block
  the subsequent back-propagation operations"; §V-C calls it Power-SGD*'s "performance
  interference" on large models. The emulator runs the same order
  (`cluster.fused.HookFused`) and, on the wall clock, holds backward for each bucket;
  its PowerSGD orthogonalises P only (the reused Q's QR leaves the aggregate unchanged),
  so its wall clock lacks the hook's second QR.
- `acpsgd`: ACP-SGD (Algorithm 2): one allreduce per step, P on even steps, Q on odd
  ones; a period of two steps, reported as their mean (DESIGN §5 Metrics).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gcbench.sim.iteration import Costs, Plan, fuse
from gcbench.sim.options import Option
from gcbench.strategies.base import Step, Strategy, register
from gcbench.zoo.profile import ModelProfile

ALLREDUCE_PAYLOADS = Option.parse("gc flat:ar* gd")


def round_bytes(cell: Any, profile: ModelProfile, step: int = 0) -> tuple[tuple[float, ...], ...]:
    """Each round's payload bytes of each tensor at `step`, for low-rank compressors whose
    factors follow each tensor's shape (PowerSGD: P, then Q with the vectors; ACP-SGD: P
    on even steps, Q on odd ones)."""
    from gcbench.compress import create

    c: Any = create(cell.compressor.kind, **cell.compressor.params())
    return tuple(
        tuple(float(c.wire_bytes_for_shape(t.shape, step, round=r)) for t in profile.tensors)
        for r in range(c.rounds)
    )


def torch_hook_costs(costs: Costs, synchronous: bool = True) -> Costs:
    """PowerSGD's costs as torch's `powerSGD_hook` incurs them: a first allreduce of the
    bucket's uncompressed tensors, then P's, then Q's (the compressor's two rounds carry
    P, then Q with the uncompressed tensors); each matrix's reused Q orthogonalised as
    well as its P (warm start); on GPUs the hook synchronous (module docstring)."""
    assert costs.tensor_round_bytes is not None and len(costs.tensor_round_bytes) == 2
    p, q = costs.tensor_round_bytes
    raw = tuple(b if a == 0 else 0.0 for a, b in zip(p, q, strict=True))
    factors = tuple(0.0 if a == 0 else b for a, b in zip(p, q, strict=True))
    extra = costs.tensor_compress_s
    return replace(
        costs,
        tensor_round_bytes=(raw, p, factors),
        tensor_compress_s=None if extra is None else tuple(2 * s for s in extra),
        synchronous=synchronous,
    )


@register
class PowerSGD(Strategy):
    name = "powersgd"
    description = (
        "Power-SGD* as torch's powerSGD_hook runs it: per bucket allreduce the vectors, "
        "then P, then Q; the hook's final synchronize holds backward until the bucket is done"
    )
    source = "ACP-SGD §V-A (Power-SGD*)"
    compressor = "own"
    own = "powersgd"
    torch_hook = True

    def build(self, cell: Any, profile: ModelProfile, costs: Costs) -> list[Step]:
        plan = Plan.uniform(fuse(profile, cell.fusion), ALLREDUCE_PAYLOADS)
        # the hook synchronises only where CUDA is (its `torch.cuda.is_available()` guard);
        # on CPU workers (gloo) its callbacks run as each allreduce ends, off the autograd
        # thread
        return [Step(plan, torch_hook_costs(costs, synchronous=cell.device != "cpu"))]


@register
class ACPSGD(Strategy):
    name = "acpsgd"
    description = "ACP-SGD: one allreduce per step, alternating P and Q"
    source = "ACP-SGD §IV, Algorithm 2"
    compressor = "own"
    own = "acpsgd"

    def build(self, cell: Any, profile: ModelProfile, costs: Costs) -> list[Step]:
        plan = Plan.uniform(fuse(profile, cell.fusion), ALLREDUCE_PAYLOADS)
        return [
            Step(plan, replace(costs, tensor_round_bytes=round_bytes(cell, profile, step)), 0.5)
            for step in (0, 1)  # P, then Q
        ]

    def memory_kind(self, spec: Any) -> str:
        # ACP-SGD's Algorithm 2 keeps the residual itself (its error feedback is its own)
        return "none" if spec.kind == "acpsgd" else super().memory_kind(spec)
