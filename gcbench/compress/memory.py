"""Memories: what a worker keeps between steps to correct for what compression dropped.

- `none`: nothing.
- `residual`: error feedback (Seide et al. 2014; COVAP Algorithm 1): compensate g + c·r,
  then r = compensated − decompress(payload). `coefficient(step)` scales the residual
  before it is added (1 by default; COVAP's scheduler, `Covap.ef_coefficient`, §III-D).
- `dgc`: DGC's momentum correction and factor masking (Lin et al. 2018 §3.2): u = m·u + g,
  v = v + u, compress v; where an element was sent, zero it in both u and v.
All state is per key; `reset()` forgets it.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from gcbench.compress.base import Compressor, Memory, Payload
from gcbench.compress.registry import register_memory


@register_memory
class NoMemory(Memory):
    name = "none"

    def compensate(self, grad: Tensor, key: str, step: int) -> Tensor:
        return grad

    def update(
        self, compensated: Tensor, key: str, step: int, compressor: Compressor, payload: Payload
    ) -> None:
        pass

    def reset(self) -> None:
        pass


@register_memory
class ResidualMemory(Memory):
    name = "residual"

    def __init__(self, coefficient: Callable[[int], float] | None = None):
        self.coefficient = coefficient
        self.residuals: dict[str, Tensor] = {}

    def compensate(self, grad: Tensor, key: str, step: int) -> Tensor:
        r = self.residuals.get(key)
        if r is None:
            return grad
        c = 1.0 if self.coefficient is None else self.coefficient(step)
        return grad + c * r if c != 1.0 else grad + r

    def update(
        self, compensated: Tensor, key: str, step: int, compressor: Compressor, payload: Payload
    ) -> None:
        self.residuals[key] = compensated - compressor.decompress(payload, key, step)

    def reset(self) -> None:
        self.residuals.clear()


@register_memory
class DgcMemory(Memory):
    name = "dgc"

    def __init__(self, momentum: float = 0.9):
        self.momentum = momentum
        self.u: dict[str, Tensor] = {}
        self.v: dict[str, Tensor] = {}

    def compensate(self, grad: Tensor, key: str, step: int) -> Tensor:
        u = self.u.get(key)
        u = grad.clone() if u is None else u.mul_(self.momentum).add_(grad)
        v = self.v.get(key)
        v = u.clone() if v is None else v.add_(u)
        self.u[key], self.v[key] = u, v
        return v

    def update(
        self, compensated: Tensor, key: str, step: int, compressor: Compressor, payload: Payload
    ) -> None:
        sent = compressor.decompress(payload, key, step) != 0
        self.u[key].masked_fill_(sent, 0)
        self.v[key].masked_fill_(sent, 0)

    def reset(self) -> None:
        self.u.clear()
        self.v.clear()


def run_step(compressor: Compressor, memory: Memory, grad: Tensor, key: str, step: int) -> Payload:
    """compensate → compress → update, for single-round compressors."""
    compensated = memory.compensate(grad, key, step)
    payload = compressor.compress(compensated, key, step)
    memory.update(compensated, key, step, compressor, payload)
    return payload
