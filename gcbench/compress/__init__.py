"""The compressor library: every algorithm of the papers behind one contract (`base.py`).

    from gcbench.compress import create
    c = create("topk", ratio=0.01)          # or a preset: create("topk-1pct")
    payload = c.compress(grad, key="layer1.weight", step=0)
    grad_hat = c.decompress(payload, key="layer1.weight", step=0)

Families (one module each): `cast` (none, fp16, bf16, int8), `sparsify` (topk, randomk,
dgc, threshold), `quantize` (signsgd, efsignsgd, signum, onebit, terngrad, qsgd),
`threelc`, `lowrank` (powersgd, acpsgd), `covap`; `memory` holds error feedback.
"""

from gcbench.compress.base import Compressor, Memory, Payload
from gcbench.compress.registry import create, create_memory, names

__all__ = ["Compressor", "Memory", "Payload", "create", "create_memory", "names"]
