"""Data-dependent payload sizes (issue #14's expected-size line): what the compressors
actually send for a model's fusion buckets, on emulation's synthetic gradients and on
real gradients from one backward pass, against the size model the simulator plans with.

    python benchmarks/payload_sizes.py [--model resnet50] [--batch 8]
                                       [--compressors threelc,dgc,threshold:threshold=0.001]

Per compressor: the bytes of every bucket's payload (rank 0, step 0, no error feedback)
summed, over the compressor's `wire_bytes` for the same buckets (its expected-size
model, which the simulator uses), for the synthetic heavy-tailed gradients
(`cluster.gradients`: Student-t(3), scaled per tensor) and for the real gradients of
the zoo model (`cluster.backward`: its forward and backward on random input of `--batch`
samples, cross-entropy against random labels, weights at initialisation). Also prints
the share of |g| at or above each threshold tried. One process, no Ray.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--compressors", default="threelc,threelc:sparsity=1.5,dgc,threshold:threshold=0.001"
    )
    args = parser.parse_args()

    import torch

    from gcbench.cluster.backward import Backward
    from gcbench.cluster.emulate import plan_of
    from gcbench.cluster.gradients import bucket_gradient
    from gcbench.compress import create
    from gcbench.config import Cell

    cell = Cell.model_validate(
        {
            "model": {"name": args.model, "batch_size": args.batch},
            "compressor": "none",
            "network": {"inter_gbps": 25},
            "cluster": {"machines": 2, "gpus_per_machine": 2},
            "strategy": "fp32",
        }
    )
    profile, plan, _ = plan_of(cell)
    numels = [t.numel for t in profile.tensors]
    t0 = time.perf_counter()
    grads, _, _ = Backward(profile, cell.seed).step(0, 0)
    took = time.perf_counter() - t0
    print(f"{args.model}, batch {args.batch}: {len(plan.buckets)} ddp buckets, "
          f"{sum(numels):,} values; one backward pass in {took:.1f} s")  # fmt: skip
    sources = {
        "synthetic": lambda b, bucket: bucket_gradient(cell.seed, 0, 0, bucket, numels),
        "real": lambda b, bucket: torch.cat([grads[i] for i in bucket]),
    }
    print(f"{'compressor':28s} {'synthetic/model':>15s} {'real/model':>10s}")
    for spec in args.compressors.split(","):
        kind, _, rest = spec.partition(":")
        params = {k: float(v) for k, v in (p.split("=") for p in rest.split(";") if p)}
        ratios = []
        for get in sources.values():
            comp = create(kind, **params)
            sent = model = 0
            for b, bucket in enumerate(plan.buckets):
                x = get(b, bucket)
                sent += comp.compress(x, f"bucket{b}", 0).wire_bytes
                model += comp.wire_bytes(x.numel(), 0)
            ratios.append(sent / model)
        print(f"{spec:28s} {ratios[0]:15.3f} {ratios[1]:10.3f}")
    real = torch.cat(grads).abs()
    synthetic = torch.cat([sources["synthetic"](b, k) for b, k in enumerate(plan.buckets)]).abs()
    for t in (1e-3, 1e-4):
        print(f"share of |g| >= {t:g}: synthetic {float((synthetic >= t).float().mean()):.3f}, "
              f"real {float((real >= t).float().mean()):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
