"""Device table: peak rates, link speeds, and the efficiencies that turn FLOPs into seconds.

Torch-free on purpose: suite validation checks device names against this table.

Peak rates and bandwidths are the vendors' datasheet figures (dense, no sparsity). In fp32
training PyTorch runs matmuls in true FP32 but lets cuDNN run convolutions in TF32 where
the GPU has it (`torch.backends.cuda.matmul.allow_tf32 = False`,
`torch.backends.cudnn.allow_tf32 = True`, the defaults since PyTorch 1.12), so
convolutions use the TF32 peak on A100 and H100.

Efficiencies (achieved / peak, per operation class) and the per-kernel overhead of the
GPUs are those fitted on V100: `benchmarks/calibrate_v100.py` fits them so that the zoo's
FLOP-based backward times match the V100 backward times the ByteComp/Espresso authors
published for vgg16, resnet50, resnet101, bert-base-squad, bert-large-squad, gpt2, lstm
and ugatit (minimising the worst model's |log ratio|, by coordinate descent from seeded
random starts; result and residuals in BENCHMARKS.md). Refitted on seven models, the
eighth is predicted within 0.86-1.20 for six of them; vgg16 (2.25) and lstm (1.43) miss,
each being the one model that constrains a constant (tests/test_calibration.py).
The other GPUs borrow the V100 fractions (each entry's `efficiencies` says so): no public
per-tensor profile exists for them, and the fraction of peak a cuDNN/cuBLAS kernel
reaches changes less between generations than the peaks do. Borrowed fractions need not
hold for small-batch convolutions on a newer GPU, where launch overhead and memory-bound
layers weigh more; `gcbench profile --torch-device cuda` measures a GPU's own.

The `cpu` entry is this project's CI host (2 cores), measured with
`benchmarks/measure_cpu.py`: peak = the float32 matmul rate of a 2048x2048 GEMM (so the
matmul efficiency is 1 by definition), conv efficiency = a ResNet 3x3 convolution's rate
over that peak, memory bandwidth = a large tensor copy, overhead = a tiny elementwise op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Fitted on V100 by benchmarks/calibrate_v100.py (see the module docstring).
# Result (BENCHMARKS.md has each model's ratio, in sample all within 0.90-1.11): Winograd
# 3x3 convs reach 1.55x the FP32 peak counted in direct-convolution FLOPs; other convs
# (7x7 stems, strided 3x3, UGATIT's 4x4 and 7x7 layers with few channels) only 0.16; GEMMs
# and 1x1 convs 0.76; memory-bound kernels 70% of the HBM2 bandwidth; 2 us per kernel.
V100_WINOGRAD_EFFICIENCY = 1.55
V100_CONV_EFFICIENCY = 0.16
V100_MATMUL_EFFICIENCY = 0.76
V100_MEMORY_EFFICIENCY = 0.7
V100_KERNEL_OVERHEAD_US = 2.0


FITTED = "fitted on V100 backward times (benchmarks/calibrate_v100.py)"
BORROWED = "borrowed from the V100 fit (no public per-tensor profile of this GPU)"


@dataclass(frozen=True)
class Device:
    name: str
    peak_fp32_tflops: float
    peak_tf32_tflops: float | None  # tensor-core TF32, dense; None where the GPU has none
    peak_fp16_tflops: float  # tensor-core FP16 with FP32 accumulate, dense
    mem_bandwidth_gbs: float  # device memory, GB/s
    pcie_gbs: float  # host link, GB/s per direction
    nvlink_gbs: float | None  # GB/s per GPU per direction; None without NVLink
    winograd_efficiency: float  # 3x3 stride-1 convolutions, in direct-convolution FLOPs
    conv_efficiency: float  # achieved / peak for other convolutions
    matmul_efficiency: float  # achieved / peak for matrix multiplies
    memory_efficiency: float  # achieved / peak memory bandwidth for memory-bound kernels
    kernel_overhead_us: float  # launch + tail per kernel
    source: str  # where the peak rates and bandwidths come from
    efficiencies: str = BORROWED  # where the efficiencies and overhead come from

    def flops_per_s(self, kind: str) -> float:
        """Achieved FLOP/s of an operation class in fp32 training."""
        if kind in ("conv", "winograd", "conv1x1"):
            peak = self.peak_tf32_tflops or self.peak_fp32_tflops
            eff = {
                "winograd": self.winograd_efficiency,
                "conv1x1": self.matmul_efficiency,  # a 1x1 convolution is a GEMM
                "conv": self.conv_efficiency,
            }[kind]
            return peak * 1e12 * eff
        return self.peak_fp32_tflops * 1e12 * self.matmul_efficiency


def _gpu(
    name: str,
    fp32: float,
    tf32: float | None,
    fp16: float,
    mem: float,
    pcie: float,
    nvlink: float | None,
    source: str,
) -> Device:
    return Device(
        name,
        fp32,
        tf32,
        fp16,
        mem,
        pcie,
        nvlink,
        V100_WINOGRAD_EFFICIENCY,
        V100_CONV_EFFICIENCY,
        V100_MATMUL_EFFICIENCY,
        V100_MEMORY_EFFICIENCY,
        V100_KERNEL_OVERHEAD_US,
        source,
    )


DEVICES: dict[str, Device] = {
    d.name: d
    for d in [
        replace(_gpu(
            "v100", 15.7, None, 125.0, 900.0, 15.75, 150.0,
            "NVIDIA V100 SXM2 datasheet: 15.7 TFLOP/s FP32, 125 TFLOP/s tensor, 900 GB/s HBM2, "
            "NVLink 2.0 300 GB/s (6 links x 25 GB/s each way), PCIe 3.0 x16",
        ), efficiencies=FITTED),
        _gpu(
            "p100", 10.6, None, 21.2, 732.0, 15.75, 80.0,
            "NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOP/s FP32, 21.2 FP16 (no tensor cores), "
            "732 GB/s HBM2, NVLink 1.0 160 GB/s (4 links x 20 GB/s each way), PCIe 3.0 x16",
        ),
        _gpu(
            "a100", 19.5, 156.0, 312.0, 1555.0, 31.5, 300.0,
            "NVIDIA A100 SXM4 40GB datasheet: 19.5 TFLOP/s FP32, 156 TF32, 312 FP16, "
            "1,555 GB/s HBM2, NVLink 3.0 600 GB/s, PCIe 4.0 x16",
        ),
        _gpu(
            "a100-80g", 19.5, 156.0, 312.0, 2039.0, 31.5, 300.0,
            "NVIDIA A100 SXM4 80GB datasheet: 19.5 TFLOP/s FP32, 156 TF32, 312 FP16, "
            "2,039 GB/s HBM2e, NVLink 3.0 600 GB/s, PCIe 4.0 x16",
        ),
        _gpu(
            "h100", 67.0, 494.7, 989.4, 3350.0, 63.0, 450.0,
            "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32, 494.7 TF32 and 989.4 FP16 (dense), "
            "3.35 TB/s HBM3, NVLink 4.0 900 GB/s, PCIe 5.0 x16",
        ),
        _gpu(
            "rtx2080ti", 13.45, None, 53.8, 616.0, 15.75, None,
            "NVIDIA Turing architecture whitepaper (RTX 2080 Ti Founders Edition): 13.45 "
            "TFLOP/s FP32, 53.8 FP16 tensor with FP32 accumulate, 616 GB/s GDDR6, PCIe 3.0",
        ),
        _gpu(
            "rtx3090", 35.6, 35.6, 71.0, 936.0, 31.5, None,
            "NVIDIA Ampere GA102 whitepaper (GeForce RTX 3090): 35.6 TFLOP/s FP32, 35.6 TF32 "
            "and 71 FP16 tensor with FP32 accumulate (dense), 936 GB/s GDDR6X, PCIe 4.0 x16 "
            "(no NVLink bridge assumed)",
        ),
        _gpu(
            "a10", 31.2, 62.5, 125.0, 600.0, 31.5, None,
            "NVIDIA A10 datasheet: 31.2 TFLOP/s FP32, 62.5 TF32 and 125 FP16 tensor (dense), "
            "600 GB/s GDDR6, PCIe 4.0 x16",
        ),
        _gpu(
            "t4", 8.1, None, 65.0, 320.0, 15.75, None,
            "NVIDIA T4 datasheet: 8.1 TFLOP/s FP32, 65 FP16 tensor, 320 GB/s GDDR6, PCIe 3.0",
        ),
        Device(
            "cpu", 0.21, None, 0.21, 18.8, 18.8, None, 0.8, 0.75, 1.0, 1.0, 6.5,
            "measured on the CI host (2 cores, torch 2.13 CPU, 2 threads) by "
            "benchmarks/measure_cpu.py on 2026-11-22: 0.20-0.23 TFLOP/s 2048^2 sgemm, 3x3 conv "
            "0.80-0.83 and 7x7 stem 0.69-0.83 of it, 17.8-19.9 GB/s copy, 6.5 us per tiny op; "
            "pcie_gbs is host memory (no PCIe hop)",
            "measured on this host by benchmarks/measure_cpu.py",
        ),
    ]
}  # fmt: skip


def device_names() -> list[str]:
    return sorted(DEVICES)
