"""Data-dependent payload sizes (issue #14's expected-size line): what the compressors
actually send for a model's fusion buckets, on emulation's synthetic gradients and on
real gradients from one backward pass, against the size model the simulator plans with.

    python benchmarks/payload_sizes.py [--model resnet50] [--batch 8] [--ef-steps 5]
                                       [--compressors threelc,dgc,threshold:threshold=0.001]
                                       [--spread K]

Per compressor: the bytes of every bucket's payload (rank 0, step 0, no error feedback)
summed, over the compressor's `expected_bytes` for the same buckets (its expected-size
model on the gradient law, `compress.law`, which the simulator plans with; derived from
the law, not fitted to anything printed here), for the synthetic heavy-tailed gradients
(`cluster.gradients`: the law's Student-t(3), scaled per tensor) and for the real
gradients of the zoo model (`cluster.backward`: its forward and backward on random input
of `--batch` samples, cross-entropy against random labels, weights at initialisation):
`real/law` against the model at the law's scales (what a `compute_time: profile` cell
plans with), `real/fitted` against the model at each tensor's scale fitted on another
input's backward pass (`cluster.backward.fitted_scales`, rank -1: what a `compute_time:
measured` cell plans with; out of sample, rank 0's gradients are not seen by the fit),
and `2-sum/fitted`: ranks 0 and 1's real gradients summed (what a payload compressed
after an intra-machine reduce-scatter of 2 GPUs holds) against the model of a sum of 2
(`summed=2`, `law.sum_tail`) at the fitted scales. For a compressor whose payload adds
over its tensors (threshold) and for 3LC, `real/held-out` and `2-sum/held-out` are
against what a `compute_time: measured` cell now plans with instead (`Costs.bucket_bytes`
of such a cell): threshold's bytes counted on one held-out backward pass, and on the sum
of two (`cluster.backward.held_out_bytes`, ranks -1 and -2); 3LC's from the peak and
shares observed on them (`held_out_peaks`). Out of sample: no rank's gradients are seen.
Then the synthetic sizes at step `--ef-steps` with residual error feedback (what the
model does not cover: it is step 0's), and the model over the compressor's data-free
`wire_bytes` (for 3LC its upper bound, which the simulator used before). Also prints the
share of |g| at or above each threshold tried. One process, no Ray.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--ef-steps", type=int, default=5)
    parser.add_argument("--spread", type=int, default=0,
                        help="also print the share past each threshold on ranks 0..K-1 "
                        "and held-out inputs -1..-K (how much one input's sizes vary)")
    parser.add_argument(
        "--compressors",
        default="threelc,threelc:sparsity=1.5,dgc,threshold:threshold=0.001,threshold:threshold=0.0001,"
        "threshold:threshold=0.01",
    )
    args = parser.parse_args()

    import torch

    from gcbench.backends.simulate import costs_for
    from gcbench.cluster.backward import Backward, fitted_scales
    from gcbench.cluster.emulate import plan_of
    from gcbench.cluster.gradients import bucket_gradient
    from gcbench.compress import create
    from gcbench.compress.memory import ResidualMemory
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
    backward = Backward(profile, cell.seed)
    grads, _, _ = backward.step(0, 0)
    other, _, _ = backward.step(1, 0)
    took = time.perf_counter() - t0
    print(f"{args.model}, batch {args.batch}: {len(plan.buckets)} ddp buckets, "
          f"{sum(numels):,} values; one backward pass in {took:.1f} s")  # fmt: skip
    sources = {
        "synthetic": lambda b, bucket: bucket_gradient(cell.seed, 0, 0, bucket, numels),
        "real": lambda b, bucket: torch.cat([grads[i] for i in bucket]),
        "2-sum": lambda b, bucket: torch.cat([grads[i] + other[i] for i in bucket]),
    }
    ef = args.ef_steps
    t0 = time.perf_counter()
    scales = fitted_scales(profile, cell.seed)
    print(f"scales fitted on another input's backward pass in {time.perf_counter() - t0:.1f} s")
    print(f"{'compressor':28s} {'synthetic/model':>15s} {'real/law':>9s} {'real/fitted':>11s} "
          f"{'2-sum/fitted':>12s} {'real/held-out':>13s} {'2-sum/held-out':>14s} "
          f"{f'EF step {ef}/model':>16s} "
          f"{'model/wire_bytes':>16s}")  # fmt: skip
    for spec in args.compressors.split(","):
        kind, _, rest = spec.partition(":")
        params = {k: float(v) for k, v in (p.split("=") for p in rest.split(";") if p)}
        comp = create(kind, **params)
        model = sum(comp.expected_bytes([numels[i] for i in k]) for k in plan.buckets)
        fitted, summed = (
            sum(
                comp.expected_bytes([numels[i] for i in k], [scales[i] for i in k], workers)
                for k in plan.buckets
            )
            for workers in (1, 2)
        )
        bound = sum(comp.wire_bytes(sum(numels[i] for i in k), 0) for k in plan.buckets)
        sent = []
        for get in sources.values():
            comp = create(kind, **params)
            sent.append(sum(
                comp.compress(get(b, k), f"bucket{b}", 0).wire_bytes
                for b, k in enumerate(plan.buckets)
            ))  # fmt: skip
        ratios = [sent[0] / model, sent[1] / model, sent[1] / fitted, sent[2] / summed]
        held = ["", ""]
        if comp.law_sized:  # what a measured cell plans with: `Costs.bucket_bytes`
            measured = Cell.model_validate({**cell.model_dump(), "compressor": spec,
                                            "strategy": "allgather",
                                            "mode": "emulate", "compute_time": "measured"})
            planned = costs_for(measured).bucket_bytes
            for j, workers in enumerate((1, 2)):
                want = sum(planned(tuple(k), workers) for k in plan.buckets)
                held[j] = f"{sent[1 + j] / want:.3f}"
        comp, memory = create(kind, **params), ResidualMemory()
        for step in range(ef + 1):  # rank 0's synthetic gradients with error feedback
            ef_sent = 0
            for b, k in enumerate(plan.buckets):
                g = memory.compensate(bucket_gradient(cell.seed, 0, step, k, numels), f"{b}", step)
                payload = comp.compress(g, f"{b}", step)
                memory.update(g, f"{b}", step, comp, payload)
                ef_sent += payload.wire_bytes
        print(f"{spec:28s} {ratios[0]:15.3f} {ratios[1]:9.3f} {ratios[2]:11.3f} "
              f"{ratios[3]:12.3f} {held[0]:>13s} {held[1]:>14s} {ef_sent / model:16.3f} "
              f"{model / bound:16.4f}")  # fmt: skip
    real = torch.cat(grads).abs()
    synthetic = torch.cat([sources["synthetic"](b, k) for b, k in enumerate(plan.buckets)]).abs()
    for t in (1e-3, 1e-4):
        print(f"share of |g| >= {t:g}: synthetic {float((synthetic >= t).float().mean()):.3f}, "
              f"real {float((real >= t).float().mean()):.3f}")  # fmt: skip
    if args.spread:
        ranks = [*range(args.spread), *range(-1, -args.spread - 1, -1)]
        print(f"share of |g| past each threshold, per input (rank; negative: held out): "
              f"{' '.join(f'{r:>9d}' for r in ranks)}")  # fmt: skip
        passes = [backward.step(r, 0)[0] for r in ranks]
        values = [torch.cat(g).abs() for g in passes]
        for t in (1e-2, 1e-3, 1e-4):
            shares = " ".join(f"{float((v >= t).float().mean()):9.2e}" for v in values)
            print(f"  tau {t:g}: {shares}")
        print("bytes sent (every bucket), per input:")
        for spec in args.compressors.split(","):
            kind, _, rest = spec.partition(":")
            params = {k: float(v) for k, v in (p.split("=") for p in rest.split(";") if p)}
            comp = create(kind, **params)
            sizes = [
                sum(comp.compress(torch.cat([g[i] for i in k]), f"s{r}:{b}", 0).wire_bytes
                    for b, k in enumerate(plan.buckets))
                for r, g in zip(ranks, passes, strict=True)
            ]  # fmt: skip
            print(f"  {spec:28s} {' '.join(f'{x:9d}' for x in sizes)}   "
                  f"max/min {max(sizes) / max(min(sizes), 1):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
