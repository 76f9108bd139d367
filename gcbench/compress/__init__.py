"""The compressor library: every algorithm of the papers behind one contract (`base.py`).

    from gcbench.compress import create
    c = create("topk", ratio=0.01)          # or a preset: create("topk-1pct")
    payload = c.compress(grad, key="layer1.weight", step=0)
    grad_hat = c.decompress(payload, key="layer1.weight", step=0)

Families (one module each, the quantize family two): `cast` (none, fp16, bf16, int8),
`sparsify` (topk, randomk, dgc, threshold), `quantize` (signsgd, efsignsgd, signum,
onebit) and `stochastic` (terngrad, qsgd), `threelc`, `lowrank` (powersgd, acpsgd),
`covap`; `memory` holds error feedback;
`specs` holds the torch-free parameter specs and presets that suites and `create` share.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gcbench.compress.base import Compressor, Memory, Payload
    from gcbench.compress.registry import create, create_memory, names

__all__ = ["Compressor", "Memory", "Payload", "create", "create_memory", "names"]

# Loaded on first use (PEP 562), so that `gcbench.compress.specs` (the suite specs, which
# `gcbench.config` validates with) can be imported without importing torch.
_LAZY = {
    "Compressor": "gcbench.compress.base",
    "Memory": "gcbench.compress.base",
    "Payload": "gcbench.compress.base",
    "create": "gcbench.compress.registry",
    "create_memory": "gcbench.compress.registry",
    "names": "gcbench.compress.registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
