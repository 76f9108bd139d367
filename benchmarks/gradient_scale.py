"""The next step for threshold's expected size on real gradients (issue #14): the gradient
law with each tensor's scale measured from one backward pass instead of 1/sqrt(numel).

    python benchmarks/gradient_scale.py [--model resnet50] [--batch 8]
                                        [--thresholds 0.001,0.0001,0.01]

Out of sample: each tensor's scale is fitted on worker 0's step-0 gradients (`cluster.
backward`: the zoo model's forward and backward on seeded random input and labels,
weights at initialisation) — by the median |g| over the median of |T| for Student-t(3),
and by the RMS over √3 — and the number of values threshold keeps is predicted with the
law's tail for worker 1's step-1 gradients (other input, other labels), then counted.
Nothing here is used by the simulator yet: gcbench's law keeps 1/sqrt(numel), which
misses real gradients' scale (BENCHMARKS.md). One process, no Ray.
"""

from __future__ import annotations

import argparse
import math


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--thresholds", default="0.001,0.0001,0.01")
    args = parser.parse_args()

    import numpy as np

    from gcbench.cluster.backward import Backward
    from gcbench.compress.law import _tail_inverse, scale, tail
    from gcbench.config import Cell
    from gcbench.sim.costs import cell_profile

    cell = Cell.model_validate(
        {
            "model": {"name": args.model, "batch_size": args.batch},
            "compressor": "none",
            "network": {"inter_gbps": 25},
            "cluster": {"machines": 2, "gpus_per_machine": 2},
            "strategy": "fp32",
        }
    )
    backward = Backward(cell_profile(cell), cell.seed)
    fit, _, _ = backward.step(0, 0)  # worker 0, step 0
    test, _, _ = backward.step(1, 1)  # worker 1, step 1
    median_t3 = float(_tail_inverse(np.array([0.5]))[0])
    fitted = {
        "median": [float(g.abs().float().median()) / median_t3 if g.numel() else 1.0 for g in fit],
        "rms": [
            float(g.float().square().mean().sqrt()) / math.sqrt(3) if g.numel() else 1.0
            for g in fit
        ],  # fmt: skip
        "1/sqrt(numel)": [scale(g.numel()) for g in fit],
    }
    print(f"{args.model}, batch {args.batch}: kept by threshold on worker 1's step 1, "
          "predicted / counted")  # fmt: skip
    print(
        f"{'scale fitted by':15s} "
        + " ".join(f"{f'τ={t}':>10s}" for t in args.thresholds.split(","))
    )
    for how, scales in fitted.items():
        cells = []
        for t in (float(x) for x in args.thresholds.split(",")):
            predicted = sum(
                g.numel() * float(tail(t / max(s, 1e-30)))
                for g, s in zip(test, scales, strict=True)
            )
            counted = sum(int((g.abs() >= t).sum()) for g in test)
            cells.append(f"{predicted / max(counted, 1):10.3f}")
        print(f"{how:15s} " + " ".join(cells))


if __name__ == "__main__":
    main()
