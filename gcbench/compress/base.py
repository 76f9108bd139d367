"""The compressor contract (DESIGN §5): payloads cross the wire, state stays per key.

A `Compressor` turns one gradient tensor into a `Payload` and back. The step number is
passed explicitly — never counted inside — because a divisible scheme compresses twice in
one step and periodic algorithms (randomk's shared seed, COVAP's filter, ACP-SGD's P/Q
alternation) depend on it. All state (P/Q matrices, seeds, DGC's momentum) lives in the
compressor or its `Memory`, per tensor key; error feedback is a separate `Memory` so any
compressor runs with or without it.

Properties every compressor declares, read by the simulator and planner without data:
- `additive`: the sum of payloads is a valid payload (allreduce / reduce-scatter allowed);
- `splittable`: `split(payload, n)` gives n valid payloads (alltoall, divisible schemes);
- `rounds`: communication rounds per step (PowerSGD: P, then Q from the summed P);
- `data_dependent`: wire bytes depend on the values (3LC zero runs, DGC, threshold);
- `family`: cast | sparsify | quantize | threelc | lowrank | covap;
- `wire_bytes(numel, step)`: the bytes of one step, all rounds (exact where data-independent);
  `payload_bytes(shape, key, step)`: the exact bytes of the last round's payload.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor


@dataclass
class Payload:
    """What one worker sends for one tensor: named tensors, plus what the receiver needs
    to rebuild the gradient's shape (sent out of band: shapes are known to every worker)."""

    tensors: dict[str, Tensor]
    shape: torch.Size
    dtype: torch.dtype
    round: int = 0  # which communication round of the step (PowerSGD: 0 = P, 1 = Q)
    info: dict[str, Any] = field(default_factory=dict)  # never on the wire

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def wire_bytes(self) -> int:
        """Exact bytes of the tensors on the wire, indices and scales included."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class Compressor(ABC):
    name: ClassVar[str]
    family: ClassVar[str]
    additive: ClassVar[bool] = False
    splittable: ClassVar[bool] = False
    rounds: ClassVar[int] = 1
    data_dependent: ClassVar[bool] = False

    @abstractmethod
    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        """Compress `grad` (any shape, floating dtype). Multi-round compressors get the
        previous round's aggregated payload as `prev`."""

    @abstractmethod
    def decompress(self, payload: Payload, key: str, step: int) -> Tensor:
        """A tensor of the original shape and dtype."""

    @abstractmethod
    def wire_bytes(self, numel: int, step: int) -> int:
        """Bytes one worker sends for a tensor of `numel` elements in one step, all rounds
        together (the expected value for data-dependent compressors), without touching
        data. Low-rank compressors need the shape: see their `wire_bytes_for_shape`."""

    def payload_bytes(self, shape: tuple[int, ...], key: str, step: int) -> int:
        """Exact bytes of this key's last-round payload at `step` for a data-independent
        compressor (the default: `wire_bytes(numel, step)`; compressors whose bytes depend
        on the shape, the key or the round, such as low-rank or COVAP, override it)."""
        n = 1
        for s in shape:
            n *= s
        return self.wire_bytes(n, step)

    def reduce(self, payloads: list[Payload]) -> Payload:
        """Sum payloads elementwise (additive compressors only)."""
        if not self.additive:
            raise TypeError(f"{self.name} payloads are not additive")
        first = payloads[0]
        tensors = {
            k: torch.stack([p.tensors[k] for p in payloads]).sum(0).to(v.dtype)
            for k, v in first.tensors.items()
        }
        return Payload(tensors, first.shape, first.dtype, first.round, dict(first.info))

    def split(self, payload: Payload, n: int) -> list[Payload]:
        raise TypeError(f"{self.name} payloads cannot be split")

    def aggregate(self, payloads: list[Payload], key: str, step: int) -> Tensor:
        """Decompress and combine as the algorithm says; the default is the sum."""
        out = self.decompress(payloads[0], key, step).clone()
        for p in payloads[1:]:
            out += self.decompress(p, key, step)
        return out

    def reset(self) -> None:  # noqa: B027 - optional: stateless compressors keep nothing
        """Forget per-key state."""


class Memory(ABC):
    """Error feedback and friends: compensate before compress, update after."""

    name: ClassVar[str]

    @abstractmethod
    def compensate(self, grad: Tensor, key: str, step: int) -> Tensor: ...

    @abstractmethod
    def update(
        self, compensated: Tensor, key: str, step: int, compressor: Compressor, payload: Payload
    ) -> None: ...

    @abstractmethod
    def reset(self) -> None: ...


def flat(grad: Tensor) -> Tensor:
    """A contiguous 1-D view (or copy) of `grad`."""
    return grad.reshape(-1)


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from (seed, key, step, ...) that every worker computes alike
    (blake2b of the parts' text; never Python's salted `hash()`)."""
    import hashlib

    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def generator(*parts: object, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator seeded with `stable_seed(*parts)`."""
    g = torch.Generator(device=device)
    g.manual_seed(stable_seed(*parts))
    return g
