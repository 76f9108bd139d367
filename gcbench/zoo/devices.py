"""Device table: peak rates and the efficiencies that turn FLOPs into seconds.

Torch-free on purpose: suite validation checks device names against this table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    name: str
    peak_fp32_tflops: float
    mem_bandwidth_gbs: float  # device memory, GB/s
    matmul_efficiency: float  # achieved / peak for convolutions and matrix multiplies
    kernel_overhead_us: float  # launch + tail per kernel
    source: str


# Efficiencies: the V100 value is fitted so that the FLOP-based backward time of resnet50
# at batch 32 (2 x 8.2 GFLOP x 32 = 525 GFLOP) matches the 63.5 ms measured on V100 by the
# ByteComp/Espresso authors (sum of resnet50's ready gaps in their public profile):
# 525e9 / 63.5e-3 s = 8.27 TFLOP/s = 0.53 x 15.7. The other GPUs reuse that fraction until
# the model-zoo issue (#3) calibrates each operation class separately.
DEVICES: dict[str, Device] = {
    d.name: d
    for d in [
        Device(
            "v100",
            15.7,
            900.0,
            0.53,
            5.0,
            "NVIDIA V100 SXM2 datasheet (15.7 TFLOP/s FP32, 900 GB/s HBM2)",
        ),
        Device(
            "a100",
            19.5,
            1555.0,
            0.53,
            5.0,
            "NVIDIA A100 40GB datasheet (19.5 TFLOP/s FP32, 1,555 GB/s)",
        ),
        Device(
            "h100",
            67.0,
            3350.0,
            0.53,
            4.0,
            "NVIDIA H100 SXM5 datasheet (67 TFLOP/s FP32, 3.35 TB/s)",
        ),
        Device(
            "rtx2080ti",
            13.4,
            616.0,
            0.53,
            5.0,
            "NVIDIA RTX 2080 Ti spec (13.4 TFLOP/s FP32, 616 GB/s)",
        ),
        Device("t4", 8.1, 320.0, 0.53, 5.0, "NVIDIA T4 datasheet (8.1 TFLOP/s FP32, 320 GB/s)"),
    ]
}


def device_names() -> list[str]:
    return sorted(DEVICES)
