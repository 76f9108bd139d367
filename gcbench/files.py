"""Writes a file atomically, so readers see the old file or the whole new one.

The data goes to a temporary name (`TMP_PREFIX` + the file's name + a random suffix) in
the same folder, is flushed to disk, and is renamed into place; a crash leaves either
the whole file or none, plus at most a temporary that callers may remove. Dependency-free
(stdlib only), so torch-free and ray-free modules such as `gcbench.zoo` can use it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["TMP_PREFIX", "atomic_write"]

TMP_PREFIX = ".tmp-"


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file, or all of the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
