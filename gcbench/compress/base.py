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
- `wire_bytes(numel, step)`: the bytes of one step, all rounds (exact where data-independent;
  for 3LC and threshold an upper bound); `payload_bytes(shape, key, step)`: the exact
  bytes of the last round's payload;
- `law_sized` and `expected_bytes(numels)`: the payload a bucket of tensors of the
  gradient law (`compress.law`) is expected to have, which the simulator plans with (3LC,
  threshold: their size follows the values, and no bound is close).

Payload buffers and phases (DESIGN §5: "a payload may reuse the compressor's buffers and
is valid until the next compress on the same key"). The compress loop allocates no
payloads: a payload's tensors are the compressor's buffers, kept per (tensor key, phase),
allocated at a key's first compress and rewritten by each later compress of that key in
that phase (`Compressor.buffers`). The **phase** is counted, not
passed: it is how many times this key was compressed before at this same step (0 for
the first compress of a step, 1 for the second, ...), so a divisible scheme that
compresses a key twice in one step, PowerSGD's two rounds, or several simulated workers
sharing one instance never overwrite a payload still in flight; a payload stays valid
until the compress of the same key and phase at a later step. The first `MAX_PHASES`
phases of each key get reused buffers; later ones (a test driving many workers through
one instance) get fresh tensors, so nothing is ever overwritten early. Callers keep the
tensor key alone (never "layer#1" per phase: keys carry state such as momentum, seeds
and COVAP's index). A payload that must outlive that (a copy kept across steps) is
cloned by its holder: `Payload.clone()`. A data-dependent payload (3LC, DGC, threshold)
may be a view of a larger buffer: `wire_bytes` counts its own elements, but pickling a
view would ship the whole buffer, so clone before pickling.

Fast host paths and device paths: several kinds (the quantizers, 3LC, randomk's gather)
have a CPU-only fast path (numpy, blocked and shared between threads by `chunks`) behind
`host_path(tensor)`; the torch paths are the device paths (CUDA) and give the same wire
bytes. `HOST_FAST_PATHS = False` makes CPU tensors take the device paths too (the tests
do, to check one against the other).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
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

    def clone(self) -> Payload:
        """A copy that owns its tensors (exactly sized), valid after the compressor reuses
        its buffers."""
        tensors = {k: v.clone() for k, v in self.tensors.items()}
        return Payload(tensors, self.shape, self.dtype, self.round, dict(self.info))


HOST_FAST_PATHS = True  # False: CPU tensors take the device (torch) paths, as the tests check
MAX_PHASES = 4  # phases per key with reused buffers: divisible schemes (2) x rounds (2)


def host_path(t: Tensor) -> bool:
    """Whether `t` takes a CPU-only fast path (see the module docstring)."""
    return HOST_FAST_PATHS and t.device.type == "cpu"


class _BufferStore:
    """A compressor's payload buffers: per key the (step, phase) of its last compress, and
    the tensors of every (key, phase, name)."""

    __slots__ = ("last", "tensors")

    def __init__(self) -> None:
        self.last: dict[str, tuple[int, int]] = {}
        self.tensors: dict[tuple[str, int, str], Tensor] = {}


class Buffers:
    """The payload buffers of one compress call: those of its (key, phase). Past
    `MAX_PHASES` (`phase` None) every request is a fresh tensor."""

    __slots__ = ("_store", "_key", "phase")

    def __init__(self, store: _BufferStore, key: str, phase: int | None):
        self._store, self._key, self.phase = store, key, phase

    def get(
        self, name: str, shape: int | tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> Tensor:
        """A tensor of exactly `shape` (contents undefined), the same one at every step
        while shape, dtype and device stay."""
        size = (shape,) if isinstance(shape, int) else tuple(shape)
        if self.phase is None:
            return torch.empty(size, dtype=dtype, device=device)
        k = (self._key, self.phase, name)
        t = self._store.tensors.get(k)
        if t is None or t.shape != size or t.dtype != dtype or t.device != torch.device(device):
            t = self._store.tensors[k] = torch.empty(size, dtype=dtype, device=device)
        return t

    def at_least(self, name: str, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """A 1-D tensor of at least n elements (for payloads whose size depends on the
        data: slice it), grown by a quarter when it is too small."""
        if self.phase is None:
            return torch.empty(n, dtype=dtype, device=device)
        k = (self._key, self.phase, name)
        t = self._store.tensors.get(k)
        if t is None or t.numel() < n or t.dtype != dtype or t.device != torch.device(device):
            grown = n if t is None or t.dtype != dtype else max(n, t.numel() + t.numel() // 4)
            t = self._store.tensors[k] = torch.empty(grown, dtype=dtype, device=device)
        return t


class Compressor(ABC):
    name: ClassVar[str]
    family: ClassVar[str]
    additive: ClassVar[bool] = False
    splittable: ClassVar[bool] = False
    rounds: ClassVar[int] = 1
    data_dependent: ClassVar[bool] = False
    law_sized: ClassVar[bool] = False  # expected_bytes follows the gradient law per tensor

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
        together, without touching data: exact for data-independent compressors, what
        DGC aims at, an upper bound for 3LC and threshold (see `expected_bytes`).
        Low-rank compressors need the shape: see their `wire_bytes_for_shape`."""

    def expected_bytes(
        self, numels: Sequence[int], scales: Sequence[float] | None = None, summed: int = 1
    ) -> float:
        """The bytes of one payload of a bucket of tensors of these sizes drawn from the
        gradient law (`compress.law`; each tensor at its scale in `scales`, the law's own
        by default), compressed from the sum of `summed` workers' gradients (after an
        uncompressed reduce), expected at step 0; `wire_bytes` of their sum unless
        `law_sized`."""
        return float(self.wire_bytes(sum(numels), 0))

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
        """Decompress and combine as the algorithm says; the default is the sum (in place in
        the first decompressed tensor: `decompress` returns a tensor of its own)."""
        out = self.decompress(payloads[0], key, step)
        for p in payloads[1:]:
            out += self.decompress(p, key, step)
        return out

    def buffers(self, key: str, step: int) -> Buffers:
        """The payload buffers of this compress of `key` at `step`: call it once per
        compress. Counts the phase (the module docstring): 0 for the first compress of the
        key at this step, one more for each further compress at the same step."""
        store = self.__dict__.get("_payload_buffers")
        if store is None:
            store = self.__dict__["_payload_buffers"] = _BufferStore()
        last = store.last.get(key)
        phase = last[1] + 1 if last is not None and last[0] == step else 0
        store.last[key] = (step, phase)
        return Buffers(store, key, phase if phase < MAX_PHASES else None)

    def reset(self) -> None:
        """Forget per-key state (subclasses extend it), the payload buffers included."""
        self.__dict__.pop("_payload_buffers", None)


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
