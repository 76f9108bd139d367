"""gcbench's compute model against published single-GPU throughputs it was never fitted on.

    python benchmarks/published_throughputs.py

NVIDIA's DeepLearningExamples publish PyTorch ResNet-50 v1.5 training throughputs per GPU
and precision (PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training
performance results", pytorch-21.03 NGC container; batch sizes and memory formats from
PyTorch/Classification/ConvNets/configs.yml: V100 FP32 112, every other case 256; AMP in
NHWC, which gcbench does not model). None of these numbers went into any fit: the V100
constants come from the ByteComp authors' V100 profiles at batch 32, the tensor-core ones
from one H100 at batch 32 (`gcbench/zoo/devices.py`). This is a check of how those
constants transfer to other GPUs, precisions and batch sizes, printed side by side with
the error of each, and the 8-GPU strong scaling the same pages publish against the
scaling factor gcbench predicts for 8 GPUs in one NVLink machine (DDP, fp32 gradients).
"""

from __future__ import annotations

import statistics

from gcbench.backends.simulate import simulate_cell
from gcbench.config import Cell

# (device, precision, batch, published images/s on 1 GPU, on 8 GPUs)
PUBLISHED = [
    ("v100", "fp32", 112, 367.0, 2855.0),  # DGX-1 16GB, FP32
    ("v100", "amp-fp16", 256, 1200.0, 8322.0),  # DGX-1 16GB, AMP (NHWC)
    ("a100-80g", "fp32", 256, 938.0, 7248.0),  # DGX A100 80GB, TF32 (torch's default)
    ("a100-80g", "amp-fp16", 256, 2470.0, 16621.0),  # DGX A100 80GB, AMP (NHWC)
]


def predicted(device: str, precision: str, batch: int, gpus: int) -> dict[str, float]:
    cell = Cell.model_validate({
        "model": {"name": "resnet50", "batch_size": batch, "precision": precision},
        "device": device, "strategy": "fp32", "compressor": "none",
        "cluster": {"machines": 1, "gpus_per_machine": gpus},
        "network": {"inter_gbps": 100},  # one machine: no link between machines is read
    })  # fmt: skip
    return simulate_cell(cell).metrics


def main() -> None:
    print("ResNet-50 v1.5 training, NVIDIA DeepLearningExamples (PyTorch) against gcbench, "
          "never fitted on these")  # fmt: skip
    print(f"  {'device':9s} {'precision':9s} {'batch':>5s} {'published':>9s} {'gcbench':>8s} "
          f"{'error':>7s} | 8-GPU scaling published {'gcbench':>7s}")  # fmt: skip
    errors = []
    for device, precision, batch, one, eight in PUBLISHED:
        got1 = predicted(device, precision, batch, 1)["throughput"]
        got8 = predicted(device, precision, batch, 8)["scaling_factor"]
        err = got1 / one - 1
        errors.append(abs(err))
        print(f"  {device:9s} {precision:9s} {batch:5d} {one:9.0f} {got1:8.0f} {err:+7.1%} | "
              f"{eight / one / 8:24.3f} {got8:7.3f}")  # fmt: skip
    print(f"  median |error| of the single-GPU throughputs: {statistics.median(errors):.1%}")


if __name__ == "__main__":
    main()
