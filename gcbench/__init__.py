"""gcbench: which gradient-compression strategy makes data-parallel training fastest?

The top level stays light (no pandas, torch or ray at import time) so that the CLI starts
fast; `load_results` is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from gcbench.results.store import load_results

__all__ = ["__version__", "load_results"]


def __getattr__(name: str) -> Any:
    if name == "load_results":
        from gcbench.results.store import load_results

        return load_results
    raise AttributeError(f"module 'gcbench' has no attribute {name!r}")
