"""Compressor speed on this host: compress time against a plain copy, side by side.

    python benchmarks/compressors.py [--method both|new|old] [--pairs 31] [--only a,b]
                                     [--exponent 24] [--sizes 22,24] [--torch-device cpu]

Two methods, both printed by default (`--method`), each saying which it is:

- **new** (issue #16's acceptance method): ratio = median of `buf.copy_(x)` into a
  preallocated buffer ÷ median of `compress(x, key, step)` called repeatedly on one key
  with a new step each call (so a compressor may reuse that key's payload buffers), 2^24
  float32 elements (`--exponent`), `--pairs` interleaved (copy, compress) pairs after two
  warm-up pairs, one run. Targets: fp16 >= 1.0, efsignsgd >= 0.8, randomk (1%) >= 1.5,
  threelc >= 0.5; every kind is printed. Multi-round compressors (PowerSGD) are timed over
  all their rounds; low-rank ones get a square matrix of that many elements.
- **old** (the method of issue #4, this script before issue #16): the same pairs at 2^22
  and 2^24 (`--sizes`), 31 pairs after one warm-up pair, ratio = copy / compress; then fp16
  and PowerSGD against the arithmetic of torch's own DDP hooks on the same tensors
  (`fp16_compress_hook`: cast and divide; `powerSGD_hook`: P = M Q, orthogonalise,
  Q = Mᵀ P, M̂ = P Qᵀ), also interleaved. Issue #4's targets at 2^24: fp16 >= 0.4,
  efsignsgd >= 0.2, randomk (1%) >= 0.5, threelc >= 0.1.

gcbench sets GOMP_SPINCOUNT=10000 unless it is set (`gcbench/__init__.py`): torch's
OpenMP threads otherwise spin for milliseconds after the copy, holding the core that the
compressors' numpy pool wants. `GOMP_SPINCOUNT=300000 python benchmarks/compressors.py`
gives libgomp's default for comparison.

On a shared 2-core host the copy (torch's two intra-op threads) is the figure most moved
by other processes: when the other core is busy its second thread waits for a scheduler
tick. The load average is printed before and after each table.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

# isort: off
import gcbench  # noqa: F401 - first: sets GOMP_SPINCOUNT before torch loads (gcbench/__init__.py)
import torch

# isort: on

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import interleaved_medians  # noqa: E402

from gcbench.compress import create, names  # noqa: E402

PARAMS = {"threshold": {"threshold": 2.0}}
LOWRANK = ("powersgd", "acpsgd")
TARGETS_NEW = {"fp16": 1.0, "efsignsgd": 0.8, "randomk": 1.5, "threelc": 0.5}  # issue #16
TARGETS_OLD = {"fp16": 0.4, "efsignsgd": 0.2, "randomk": 0.5, "threelc": 0.1}  # issue #4


def tensor_for(name: str, exponent: int, device: str = "cpu") -> torch.Tensor:
    torch.manual_seed(0)
    if name in LOWRANK:
        side = 2 ** (exponent // 2)
        return torch.randn(side, 2**exponent // side).to(device)
    return torch.randn(2**exponent).to(device)


def compress_fn(name: str, x: torch.Tensor) -> Callable[[], object]:
    """compress(x, one key, a new step each call), every round of the step."""
    c = create(name, **PARAMS.get(name, {}))
    step = [0]

    def run() -> object:
        step[0] += 1
        p = c.compress(x, "bench#0", step[0])
        for _ in range(1, c.rounds):
            p = c.compress(x, "bench#0", step[0], prev=p)
        return p

    return run


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def sync_for(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def new_method(chosen: list[str], exponent: int, pairs: int, device: str) -> None:
    print(
        f"NEW method (issue #16 acceptance): 2^{exponent} float32 on {device}, median of "
        f"buf.copy_(x) / median of compress(x, key, new step), {pairs} interleaved pairs, "
        f"one run; {load()}"
    )
    print(f"{'compressor':12s} {'copy ms':>9s} {'compress ms':>12s} {'ratio':>7s}  target")
    sync = sync_for(device)
    for name in chosen:
        x = tensor_for(name, exponent, device)
        buf = torch.empty_like(x)
        copy, comp = interleaved_medians(
            [lambda buf=buf, x=x: buf.copy_(x), compress_fn(name, x)], pairs, 2, sync
        )
        ratio = copy / comp
        target = TARGETS_NEW.get(name)
        verdict = "" if target is None else f">= {target}: {'met' if ratio >= target else 'MISSED'}"
        print(f"{name:12s} {copy * 1e3:9.2f} {comp * 1e3:12.2f} {ratio:7.3f}  {verdict}")
        del x, buf
    print(f"({load()})")


def torch_powersgd(m: torch.Tensor, rank: int) -> Callable[[], object]:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

    g = torch.Generator().manual_seed(0)
    batch = m.unsqueeze(0)  # the hook works on batches of matrices (torch.bmm)
    q = torch.randn(1, m.shape[1], rank, generator=g)
    p = torch.empty(1, m.shape[0], rank)
    out = torch.empty_like(batch)

    def run() -> object:  # the hook's arithmetic, writing back into the gradient bucket
        torch.bmm(batch, q, out=p)
        _orthogonalize(p)
        torch.bmm(batch.transpose(1, 2), p, out=q)
        return torch.bmm(p, q.transpose(1, 2), out=out)

    return run


def old_method(chosen: list[str], sizes: list[int], pairs: int) -> None:
    print(
        f"OLD method (issue #4, this script before issue #16): ratio = copy / compress at "
        f"2^{', 2^'.join(map(str, sizes))}, {pairs} interleaved pairs; {load()}"
    )
    print(f"{'compressor':12s} {'size':>5s} {'copy ms':>9s} {'compress ms':>12s} {'ratio':>7s}")
    for exponent in sizes:
        for name in chosen:
            x = tensor_for(name, exponent)
            dst = torch.empty_like(x)
            copy, comp = interleaved_medians(
                [lambda dst=dst, x=x: dst.copy_(x), compress_fn(name, x)], pairs
            )
            target = TARGETS_OLD.get(name) if exponent == 24 else None
            verdict = (
                ""
                if target is None
                else f"  >= {target}: " + ("met" if copy / comp >= target else "MISSED")
            )
            print(
                f"{name:12s} 2^{exponent:<3d} {copy * 1e3:9.2f} {comp * 1e3:12.2f} "
                f"{copy / comp:7.3f}{verdict}"
            )

    print("\nagainst torch's DDP hook arithmetic (same tensors, interleaved):")
    for exponent in sizes:
        x = tensor_for("fp16", exponent)
        ours, theirs = interleaved_medians(
            [compress_fn("fp16", x), lambda x=x: x.to(torch.float16).div_(1)], pairs
        )
        print(
            f"  fp16        2^{exponent}: gcbench {ours * 1e3:7.2f} ms  torch hook "
            f"{theirs * 1e3:7.2f} ms  ratio torch/gcbench {theirs / ours:.2f}"
        )
        m = tensor_for("powersgd", exponent)
        for rank in (4, 32):
            c = create("powersgd", rank=rank)
            step = [0]
            out = torch.empty_like(m)

            def full(c=c, m=m, step=step, out=out) -> object:
                step[0] += 1
                p = c.compress(m, "bench#0", step[0])
                q = c.compress(m, "bench#0", step[0], prev=c.reduce([p]))
                return c.decompress(c.reduce([q]), "bench#0", step[0], out=out)

            ours, theirs = interleaved_medians([full, torch_powersgd(m, rank)], pairs)
            print(
                f"  powersgd r{rank:<3d} 2^{exponent}: gcbench {ours * 1e3:7.2f} ms  torch hook "
                f"{theirs * 1e3:7.2f} ms  ratio torch/gcbench {theirs / ours:.2f}"
            )
    print(f"({load()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", choices=("both", "new", "old"), default="both")
    parser.add_argument("--pairs", type=int, default=31)
    parser.add_argument("--exponent", type=int, default=24, help="the new method's size")
    parser.add_argument("--sizes", default="22,24", help="the old method's sizes")
    parser.add_argument("--only", default="")
    parser.add_argument("--torch-device", default="cpu", help="the new method's device")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else names()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs,"
        f" GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')} (gcbench's default: 10000)"
    )
    if args.method in ("both", "new"):
        new_method(chosen, args.exponent, args.pairs, args.torch_device)
    if args.method == "both":
        print()
    if args.method in ("both", "old"):
        old_method(chosen, [int(s) for s in args.sizes.split(",")], args.pairs)


if __name__ == "__main__":
    main()
