"""gcbench: which gradient-compression strategy makes data-parallel training fastest?

The top level stays light (no pandas, torch or ray at import time) so that the CLI starts
fast; `load_results` is imported on first use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# torch's OpenMP threads (libgomp) busy-wait ~300,000 spins after each parallel op before
# they sleep: on a 2-core host that holds the second core for milliseconds, and the
# compressors' numpy pool (`compress/chunks.py`), which runs right after torch ops, loses
# it (efsignsgd at 2^24: 4.3 ms after a torch copy, 2.9 ms with short spins; the copy
# itself is unchanged: BENCHMARKS.md). libgomp reads this once, when torch loads, so it
# only takes effect when gcbench is imported first (the CLI, Ray workers started by
# gcbench, which inherit it); a value the user set wins.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

__version__ = "0.2.0"

if TYPE_CHECKING:
    from gcbench.results.store import load_results

__all__ = ["__version__", "load_results"]


def __getattr__(name: str) -> Any:
    if name == "load_results":
        from gcbench.results.store import load_results

        return load_results
    raise AttributeError(f"module 'gcbench' has no attribute {name!r}")
