"""Compressor speed on this host: compress time against a plain copy, side by side.

    python benchmarks/compressors.py [--pairs 31] [--sizes 22,24] [--only a,b]

For each compressor and size (2^22 and 2^24 float32 elements; low-rank ones get a square
matrix of that many elements), runs >= 31 interleaved pairs of (copy of the same tensor
into a preallocated buffer, compress) and prints the medians and ratio = copy / compress
(higher is faster; 1.0 means as fast as a copy). Multi-round compressors (PowerSGD) are
timed over all their rounds. Then compares fp16 and PowerSGD with the arithmetic of
torch's own DDP hooks on the same tensors (`fp16_compress_hook`: cast and divide;
`powerSGD_hook`: P = M Q, orthogonalise, Q = Mᵀ P, M̂ = P Qᵀ), also interleaved.

Targets (issue #4) at 2^24: fp16 >= 0.4, efsignsgd >= 0.2, randomk (1%) >= 0.5,
threelc >= 0.1; fp16 and PowerSGD at least as fast as torch's hooks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from gcbench.compress import create, names
from gcbench.compress.costs import median_pair

PARAMS = {"threshold": {"threshold": 2.0}}
LOWRANK = ("powersgd", "acpsgd")


def tensor_for(name: str, exponent: int) -> torch.Tensor:
    torch.manual_seed(0)
    if name in LOWRANK:
        side = 2 ** (exponent // 2)
        return torch.randn(side, 2**exponent // side)
    return torch.randn(2**exponent)


def compress_fn(name: str, x: torch.Tensor) -> Callable[[], object]:
    c = create(name, **PARAMS.get(name, {}))
    step = [0]

    def run() -> object:
        step[0] += 1
        p = c.compress(x, "bench#0", step[0])
        for _ in range(1, c.rounds):
            p = c.compress(x, "bench#0", step[0], prev=p)
        return p

    return run


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=31)
    parser.add_argument("--sizes", default="22,24")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else names()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.pairs} pairs")
    print(f"{'compressor':12s} {'size':>5s} {'copy ms':>9s} {'compress ms':>12s} {'ratio':>7s}")
    for exponent in map(int, args.sizes.split(",")):
        for name in chosen:
            x = tensor_for(name, exponent)
            dst = torch.empty_like(x)
            copy, comp = median_pair(
                lambda dst=dst, x=x: dst.copy_(x), compress_fn(name, x), args.pairs
            )
            print(
                f"{name:12s} 2^{exponent:<3d} {copy * 1e3:9.2f} {comp * 1e3:12.2f} "
                f"{copy / comp:7.3f}"
            )

    print("\nagainst torch's DDP hook arithmetic (same tensors, interleaved):")
    for exponent in map(int, args.sizes.split(",")):
        x = tensor_for("fp16", exponent)
        ours, theirs = median_pair(
            compress_fn("fp16", x), lambda x=x: x.to(torch.float16).div_(1), args.pairs
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

            ours, theirs = median_pair(full, torch_powersgd(m, rank), args.pairs)
            print(
                f"  powersgd r{rank:<3d} 2^{exponent}: gcbench {ours * 1e3:7.2f} ms  torch hook "
                f"{theirs * 1e3:7.2f} ms  ratio torch/gcbench {theirs / ours:.2f}"
            )


if __name__ == "__main__":
    main()
