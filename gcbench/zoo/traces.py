"""A model's traced forward as plain data (`ModelTrace`: costed operations and parameters,
`gcbench.zoo.trace` makes it) and its cache on disk: tracing imports torch and runs the
model on the meta device (about 1.2 s for bert-base), a cached trace reads in a
millisecond without torch.

The cache is a folder of gzipped JSON files, one per (model, batch, sequence length,
fingerprint): the fingerprint hashes the zoo's own source (the architectures, the tracer,
the catalog) and torch's version, so a change to any of them traces again. The folder is
`$GCBENCH_CACHE/traces`, else `$XDG_CACHE_HOME/gcbench/traces`, else
`~/.cache/gcbench/traces`; a cache that cannot be written or read is passed over (the
model is traced), never an error. Torch-free.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gcbench.errors import ConfigError
from gcbench.files import atomic_write, gunzip_limited, read_limited

FORMAT = 1
MAX_BYTES = 16 * 2**20  # a cached trace, gzipped or not (llama-2-7b's: about 0.1 MB)
# The zoo's modules whose code decides a trace
SOURCES = ("catalog.py", "nets.py", "trace.py", "vision.py", "imagenet.py", "language.py",
           "ugatit.py", "traces.py")  # fmt: skip


@dataclass(frozen=True)
class Op:
    kind: str  # "winograd" | "conv1x1" | "conv" | "matmul" | "embedding" | "memory"
    flops: float  # forward
    nbytes: float  # forward memory traffic
    bwd_flops: float
    bwd_nbytes: float
    bwd_kernels: int  # kernels its backward launches (0: no backward)


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    layer: str  # the module that owns it
    first_use: int  # index of its earliest use among the ops


@dataclass(frozen=True)
class ModelTrace:
    name: str
    batch_size: int
    seq_len: int | None
    ops: tuple[Op, ...]  # forward order
    params: tuple[Param, ...]  # registration order


def cache_dir() -> Path:
    root = os.environ.get("GCBENCH_CACHE")
    if root:
        return Path(root) / "traces"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gcbench" / "traces"


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """What a cached trace must have been made by: the zoo's source and torch's version."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    here = Path(__file__).parent
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    try:
        h.update(version("torch").encode())
    except PackageNotFoundError:
        h.update(b"no torch")
    return h.hexdigest()[:16]


def cache_path(name: str, batch_size: int, seq_len: int | None) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return cache_dir() / f"{safe}-b{batch_size}-s{seq_len}-{fingerprint()}.json.gz"


def to_json(trace: ModelTrace) -> dict[str, Any]:
    return {"format": FORMAT, "fingerprint": fingerprint(), **asdict(trace)}


def from_json(data: dict[str, Any]) -> ModelTrace:
    """A trace from `to_json`'s form; KeyError, TypeError or ValueError where it is not."""
    if data.get("format") != FORMAT or data.get("fingerprint") != fingerprint():
        raise ValueError("a trace of another gcbench or torch")
    return ModelTrace(
        str(data["name"]),
        int(data["batch_size"]),
        None if data["seq_len"] is None else int(data["seq_len"]),
        tuple(Op(str(o["kind"]), float(o["flops"]), float(o["nbytes"]), float(o["bwd_flops"]),
                 float(o["bwd_nbytes"]), int(o["bwd_kernels"])) for o in data["ops"]),
        tuple(Param(str(p["name"]), tuple(int(x) for x in p["shape"]), str(p["layer"]),
                    int(p["first_use"])) for p in data["params"]),
    )  # fmt: skip


def read_cached(name: str, batch_size: int, seq_len: int | None) -> ModelTrace | None:
    """The cached trace, or None: none there, or one that does not read back as this
    model's trace (it is traced again and the file replaced)."""
    path = cache_path(name, batch_size, seq_len)
    try:
        raw = gunzip_limited(read_limited(path, MAX_BYTES, "trace"), MAX_BYTES, str(path),
                             "trace")  # fmt: skip
        trace = from_json(json.loads(raw))
    except (OSError, ConfigError, ValueError, KeyError, TypeError, AttributeError):
        return None
    same = (trace.name, trace.batch_size, trace.seq_len) == (name, batch_size, seq_len)
    return trace if same else None


def write_cached(trace: ModelTrace) -> None:
    """Keep `trace` in the cache; a cache that cannot be written is passed over."""
    path = cache_path(trace.name, trace.batch_size, trace.seq_len)
    try:
        data = gzip.compress(json.dumps(to_json(trace), separators=(",", ":")).encode(), 6)
        atomic_write(path, data, durable=False)
    except OSError:
        pass
