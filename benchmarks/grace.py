"""gcbench's compressors against GRACE's on the same tensors, side by side (issue #34).

    python benchmarks/grace.py --grace GRACE [--exponent 22] [--repeats 15] [--only a,b]

GRACE (github.com/sands-lab/grace, `grace_dl/torch/compressor/*.py`) is not on PyPI:
`GRACE` is a checkout of it (fetched, never committed; its `grace_dl/torch` needs only
torch). For each kind both libraries have, one round trip — compress, then decompress
one payload — of the same 2^`exponent` float32 values, the two libraries interleaved
(`_timing.interleaved_medians`), on this host's CPU, twice: gcbench's torch paths alone
(`compress.base.HOST_FAST_PATHS = False`, the code a GPU runs) and with its CPU fast
paths. Printed per kind: each median and the ratio GRACE ÷ gcbench (above 1: gcbench is
faster). Issue #34's targets: every kind ≥ 1.0 on the torch paths; topk ≥ 1.2 with the
fast paths.

What each side does: the same algorithm at the same parameters (1% for the sparsifiers,
16 levels for QSGD, threshold 2.0); gcbench's payloads go into reused per-key buffers,
GRACE's are new tensors each call; GRACE's EFSignSGD and Signum keep their state in the
compressor as gcbench's keep theirs (error feedback itself is outside both: not timed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

# isort: off
import gcbench  # noqa: F401 - first: sets GOMP_SPINCOUNT before torch loads
import torch

# isort: on

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import interleaved_medians  # noqa: E402

from gcbench.compress import base, create  # noqa: E402

# kind -> (GRACE module, class, its arguments; gcbench's parameters)
PAIRS: dict[str, tuple[str, str, dict[str, object], dict[str, object]]] = {
    "fp16": ("fp16", "FP16Compressor", {}, {}),
    "topk": ("topk", "TopKCompressor", {"compress_ratio": 0.01}, {"ratio": 0.01}),
    "randomk": ("randomk", "RandomKCompressor", {"compress_ratio": 0.01}, {"ratio": 0.01}),
    "dgc": ("dgc", "DgcCompressor", {"compress_ratio": 0.01}, {"ratio": 0.01}),
    "threshold": ("threshold", "ThresholdCompressor", {"threshold": 2.0}, {"threshold": 2.0}),
    "signsgd": ("signsgd", "SignSGDCompressor", {}, {}),
    "efsignsgd": ("efsignsgd", "EFSignSGDCompressor", {"lr": 0.1}, {}),
    "signum": ("signum", "SignumCompressor", {"momentum": 0.9}, {}),
    "onebit": ("onebit", "OneBitCompressor", {}, {}),
    "terngrad": ("terngrad", "TernGradCompressor", {}, {}),
    "qsgd": ("qsgd", "QSGDCompressor", {"quantum_num": 16}, {"levels": 16}),
}


def grace_round_trip(kind: str, x: torch.Tensor) -> Callable[[], object]:
    import importlib

    module, cls, args, _ = PAIRS[kind]
    c = getattr(importlib.import_module(f"grace_dl.torch.compressor.{module}"), cls)(**args)

    def run() -> object:
        payload, ctx = c.compress(x, "bench")
        return c.decompress(payload, ctx)

    return run


def gcbench_round_trip(kind: str, x: torch.Tensor) -> Callable[[], object]:
    c = create(kind, **PAIRS[kind][3])
    step = [0]

    def run() -> object:
        step[0] += 1
        return c.decompress(c.compress(x, "bench", step[0]), "bench", step[0])

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grace", type=Path, required=True, help="a checkout of GRACE")
    ap.add_argument("--exponent", type=int, default=22)
    ap.add_argument("--repeats", type=int, default=15,
                    help="rounds at least; more for fast kinds, so each side runs >= 0.5 s")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    if not (args.grace / "grace_dl" / "torch").is_dir():
        sys.exit(f"--grace {args.grace}: no grace_dl/torch in it (a checkout of sands-lab/grace)")
    sys.path.insert(0, str(args.grace))
    kinds = [k for k in PAIRS if not args.only or k in args.only.split(",")]
    torch.manual_seed(0)
    x = torch.randn(2**args.exponent)
    print(f"GRACE against gcbench, one compress + decompress of 2^{args.exponent} float32 "
          f"values, median of >= {args.repeats} interleaved rounds (>= 0.5 s a side), torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
    for fast in (False, True):
        base.HOST_FAST_PATHS = fast
        print(f"\n  gcbench's {'CPU fast paths' if fast else 'torch paths alone (as on a GPU)'}")
        print(f"  {'kind':10s} {'GRACE ms':>9s} {'gcbench ms':>10s} {'GRACE/gcbench':>13s}")
        for kind in kinds:
            pair = [grace_round_trip(kind, x.clone()), gcbench_round_trip(kind, x.clone())]
            # a sub-millisecond kind over 15 rounds is noise: as many rounds as give each
            # side half a second
            once = max(interleaved_medians(pair, 3, warmup=2))
            calls = max(args.repeats, min(2000, int(0.5 / max(once, 1e-6))))
            block = max(1, calls // args.repeats)  # a run of calls each, as in training
            g, ours = interleaved_medians(pair, -(-calls // block), warmup=2,
                                          alternate=True, block=block)  # fmt: skip
            print(f"  {kind:10s} {g * 1e3:9.2f} {ours * 1e3:10.2f} {g / ours:13.2f}")


if __name__ == "__main__":
    main()
