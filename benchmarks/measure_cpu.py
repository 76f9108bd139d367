"""Measure this host for the `cpu` entry of the device table (gcbench/zoo/devices.py).

    python benchmarks/measure_cpu.py

Prints, from medians of repeated runs with torch's default thread count:
- peak: float32 GEMM rate of 2048x2048 @ 2048x2048 (the `cpu` entry's peak, so its
  matmul efficiency is 1 by definition);
- winograd efficiency: a ResNet 3x3 stride-1 convolution (8x64x56x56), over that peak;
- conv efficiency: a ResNet 7x7 stride-2 stem convolution (8x3x224x224), over that peak;
- memory bandwidth: a 64 MiB tensor copy (bytes read + written per second);
- kernel overhead: a tiny elementwise add.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _timing import median_s


def main() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    peak = 2 * 2048**3 / median_s(lambda: a @ b, 15)
    x, w = torch.randn(8, 64, 56, 56), torch.randn(64, 64, 3, 3)
    conv3 = 2 * 8 * 64 * 56 * 56 * 64 * 9 / median_s(lambda: F.conv2d(x, w, padding=1), 15)
    xs, ws = torch.randn(8, 3, 224, 224), torch.randn(64, 3, 7, 7)
    stem = (
        2
        * 8
        * 64
        * 112
        * 112
        * 3
        * 49
        / median_s(lambda: F.conv2d(xs, ws, stride=2, padding=3), 15)
    )
    src = torch.randn(16 * 2**20)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / median_s(lambda: dst.copy_(src), 15)
    tiny = torch.randn(8)
    overhead = median_s(lambda: tiny.add(1.0), 201)
    print(f"threads            {torch.get_num_threads()}")
    print(f"peak_fp32_tflops   {peak / 1e12:.4f}")
    print(f"winograd_efficiency {conv3 / peak:.3f}")
    print(f"conv_efficiency    {stem / peak:.3f}")
    print(f"mem_bandwidth_gbs  {bandwidth / 1e9:.2f}")
    print(f"kernel_overhead_us {overhead * 1e6:.2f}")


if __name__ == "__main__":
    main()
