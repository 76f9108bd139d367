"""Model-zoo speed and measurement overhead, measured side by side in one run.

    python benchmarks/zoo.py [--models a,b,...] [--pairs N]

1. Warm: every zoo model's FLOP-based profile at its default batch in this process (torch
   imported, caches cleared before each model): build on meta + trace + times.
2. Cold: the same, first call in a fresh `python` process, torch import included (measured
   inside the process from before `import torch` to the profile; interpreter start-up,
   about 0.04 s here, excluded).
3. Instrumentation: backward time of resnet18-cifar (batch 32) and tiny-transformer (16
   sequences of 64 tokens; and its 4 x 32 default, where a backward takes only ~2.5 ms on
   CPU) with and without the ready-time hooks of `gcbench profile`, interleaved pairs,
   medians.

4. The `cpu` device entry against measurement: FLOP-based `cpu` profile vs `gcbench
   profile` on this host, forward and backward.

Targets (issue #3): warm <= 1 s and cold <= 3 s for every model; hooks within 5%.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COLD = """
import time
t = time.perf_counter()
import torch
from gcbench.zoo.profile import model_profile
model_profile({name!r})
print(time.perf_counter() - t)
"""


def main() -> None:
    from gcbench.zoo.catalog import MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--pairs", type=int, default=21)
    args = parser.parse_args()
    names = args.models.split(",")

    from gcbench.zoo.profile import cached_trace, model_profile

    model_profile("tiny-mlp")  # torch and the tracer loaded: "warm"
    print(f"{'model':18s} {'warm s':>7s} {'cold s':>7s}")
    worst = [0.0, 0.0]
    for name in names:
        cached_trace.cache_clear()
        model_profile.cache_clear()
        t = time.perf_counter()
        model_profile(name)
        warm = time.perf_counter() - t
        out = subprocess.run(
            [sys.executable, "-c", COLD.format(name=name)],
            capture_output=True,
            text=True,
            check=True,
        )
        cold = float(out.stdout.strip().splitlines()[-1])
        worst = [max(worst[0], warm), max(worst[1], cold)]
        print(f"{name:18s} {warm:7.3f} {cold:7.3f}")
    print(f"{'worst':18s} {worst[0]:7.3f} {worst[1]:7.3f}   (targets 1.0 and 3.0)")

    from gcbench.zoo.measure import instrumentation_overhead

    print(f"\ninstrumentation overhead, {args.pairs} interleaved pairs, median backward:")
    for name, batch, seq in (
        ("resnet18-cifar", 32, None),
        ("tiny-transformer", 16, 64),
        ("tiny-transformer", 4, 32),  # the default: a 2.5 ms backward, 28 hooks
    ):
        plain, hooked = instrumentation_overhead(name, batch, seq, args.pairs)
        p, h = statistics.median(plain), statistics.median(hooked)
        print(
            f"  {name:18s} b{batch:<3d} plain {p * 1e3:8.2f} ms  hooked {h * 1e3:8.2f} ms  "
            f"ratio {h / p:.3f}"
        )


def cpu_check() -> None:
    from gcbench.zoo.measure import measure_profile
    from gcbench.zoo.profile import model_profile

    print("\ncpu device entry: FLOP-based 'cpu' profile / measured here (fwd, bwd)")
    for name, batch in (("resnet18-cifar", 16), ("resnet50", 2), ("bert-base", 2)):
        m = measure_profile(name, batch, warmup=1, iterations=3)
        z = model_profile(name, batch, "cpu")
        print(
            f"  {name:18s} b{batch:<3d} fwd {z.forward_s / m.forward_s:5.2f}  "
            f"bwd {z.backward_s / m.backward_s:5.2f}   (measured bwd {m.backward_s * 1e3:.0f} ms)"
        )


if __name__ == "__main__":
    main()
    cpu_check()
