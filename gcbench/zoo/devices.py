"""Device table: peak rates, link speeds, and the efficiencies that turn FLOPs into seconds.

Torch-free on purpose: suite validation checks device names against this table.

Peak rates and bandwidths are the vendors' datasheet figures (dense, no sparsity). In fp32
training PyTorch runs matmuls in true FP32 but lets cuDNN run convolutions in TF32 where
the GPU has it (`torch.backends.cuda.matmul.allow_tf32 = False`,
`torch.backends.cudnn.allow_tf32 = True`, the defaults since PyTorch 1.12), so
convolutions use the tensor cores' TF32 peak on A100, H100 and the other Ampere and
Hopper GPUs; a model's `precision` moves matmuls to TF32 too (`tf32`) or both to half
precision under autocast (`amp-fp16`, `amp-bf16`): `Device.math`.

Efficiencies (achieved / peak, per operation class and math unit) and the per-kernel cost
come from two fits, each on measured backward times, each with its residuals out of
sample in BENCHMARKS.md:

- V100 (`benchmarks/calibrate_v100.py`): the FP32 cores, on the V100 backward times the
  ByteComp/Espresso authors published for eight models (leave one model out: six of
  eight within 0.86-1.20; vgg16 2.25 and lstm 1.43 miss, each the one model that
  constrains a constant; tests/test_calibration.py).
- H100 (`benchmarks/calibrate_h100.py`): the tensor cores (TF32 convolutions) and the
  FP32-core matmuls, memory and per-kernel cost, on measured H100 profiles of resnet50
  and bert-base at batch 32 (alternate blocks of ready gradients held out: convolutions
  1.04, matmuls 1.10 of measured; forward and update, never fitted, within 10%).

Every other GPU borrows, and says so in `efficiencies`: the Ampere and Hopper GPUs every
constant from the H100 fit, the older ones the V100 fit's FP32-core, memory and per-kernel
constants and the H100 fit's tensor-core ones (used under AMP). Nothing here is measured
under AMP or with TF32 matmuls: cuBLAS on tensor cores is taken to reach the fraction of
its peak that it reaches of the FP32 peak. `gcbench profile --torch-device cuda` measures
a GPU's own profile.

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

# Fitted on H100 by benchmarks/calibrate_h100.py: two measured H100 80GB profiles (resnet50
# batch 32, bert-base batch 32 x 64 tokens, torch defaults: TF32 convolutions, FP32
# matmuls), per block of ready gradients (held-out residuals per class in BENCHMARKS.md).
# On tensor cores, in direct-convolution FLOPs: 3x3 convolutions 0.148 of the TF32 peak,
# other convolutions 0.094, 1x1 convolutions 0.090 (cuDNN); FP32-core matmuls 0.665
# (cuBLAS); memory-bound kernels 0.854 of HBM3; 11.8 us per kernel. At batch 32 an
# H100's kernels are small: the per-kernel cost is most of a layer's time, and the same
# cost makes larger batches run closer to peak.
H100_TENSOR_WINOGRAD_EFFICIENCY = 0.148
H100_TENSOR_CONV_EFFICIENCY = 0.0944
H100_TENSOR_CONV1X1_EFFICIENCY = 0.0898
H100_MATMUL_EFFICIENCY = 0.665
# Not measured (BERT ran its matmuls in FP32): cuBLAS GEMMs on tensor cores (TF32, AMP)
# are taken to reach the fraction of their peak that they reach of the FP32 peak.
H100_TENSOR_MATMUL_EFFICIENCY = H100_MATMUL_EFFICIENCY
H100_MEMORY_EFFICIENCY = 0.854
H100_KERNEL_OVERHEAD_US = 11.8


FITTED = (
    "FP32 cores fitted on V100 backward times (benchmarks/calibrate_v100.py); tensor "
    "cores (AMP) borrowed from the H100 fit"
)
BORROWED = (
    "borrowed: FP32 cores, memory and per-kernel cost from the V100 fit, tensor cores "
    "from the H100 fit (no public per-tensor profile of this GPU)"
)
H100_FITTED = "fitted on measured H100 backward times (benchmarks/calibrate_h100.py)"
HOPPER_BORROWED = (
    "borrowed from the H100 fit (the same software and tensor-core generation or the "
    "one before; no per-tensor profile of this GPU)"
)


# What a model's spec may ask for (`ModelSpec.precision`): torch's defaults, TF32 for
# matmuls too, or automatic mixed precision
PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16")
CONVOLUTIONS = ("winograd", "conv", "conv1x1")


@dataclass(frozen=True)
class Device:
    """One GPU (or this host): datasheet peaks and bandwidths, and the fractions of them
    its kernels reach, per operation class and per math unit: the FP32 cores (`*_efficiency`)
    or the tensor cores (`tensor_*`, TF32 and FP16/BF16 alike: a fraction of the peak of
    the mode in use)."""

    name: str
    peak_fp32_tflops: float
    peak_tf32_tflops: float | None  # tensor-core TF32, dense; None where the GPU has none
    peak_fp16_tflops: float  # FP16 (tensor cores with FP32 accumulate where it has them), dense
    mem_bandwidth_gbs: float  # device memory, GB/s
    pcie_gbs: float  # host link, GB/s per direction
    nvlink_gbs: float | None  # GB/s per GPU per direction; None without NVLink
    winograd_efficiency: float  # FP32 cores: 3x3 stride-1 convolutions, in direct-conv FLOPs
    conv_efficiency: float  # FP32 cores: other convolutions
    matmul_efficiency: float  # FP32 cores: matrix multiplies and 1x1 convolutions
    memory_efficiency: float  # achieved / peak memory bandwidth for memory-bound kernels
    kernel_overhead_us: float  # launch + tail per kernel
    source: str  # where the peak rates and bandwidths come from
    efficiencies: str = BORROWED  # where the efficiencies and overhead come from
    tensor_winograd_efficiency: float = 0.0  # tensor cores: 3x3 stride-1 convolutions
    tensor_conv_efficiency: float = 0.0  # tensor cores: other convolutions
    tensor_conv1x1_efficiency: float = 0.0  # tensor cores: 1x1 convolutions (cuDNN)
    tensor_matmul_efficiency: float = 0.0  # tensor cores: matrix multiplies (cuBLAS)
    tensor_cores: bool = True  # FP16 runs on tensor cores (P100's is FP32-core half2)

    def math(self, kind: str, precision: str = "fp32") -> str:
        """The math an operation class runs in: "fp32", "tf32" or "fp16" (BF16 alike).
        torch's defaults (`fp32`) let cuDNN run convolutions in TF32 where the GPU has it
        (`torch.backends.cudnn.allow_tf32 = True`) and keep matmuls in FP32
        (`torch.backends.cuda.matmul.allow_tf32 = False`, since PyTorch 1.12); `tf32`
        sets both; under autocast (`amp-*`) matmuls and convolutions run in half precision
        (torch.amp's autocast op reference: the ops that autocast to float16/bfloat16)."""
        if kind not in CONVOLUTIONS and kind != "matmul":
            return "fp32"  # memory-bound: no math rate applies
        if precision.startswith("amp-"):
            return "fp16"
        tf32 = self.peak_tf32_tflops is not None and (
            precision == "tf32" or kind in CONVOLUTIONS
        )
        return "tf32" if tf32 else "fp32"

    def flops_per_s(self, kind: str, precision: str = "fp32") -> float:
        """Achieved FLOP/s of an operation class (`trace.Op.kind`) in training at
        `precision` (`PRECISIONS`)."""
        math = self.math(kind, precision)
        if math == "fp32" or (math == "fp16" and not self.tensor_cores):
            peak = self.peak_fp32_tflops if math == "fp32" else self.peak_fp16_tflops
            eff = {
                "winograd": self.winograd_efficiency,
                "conv1x1": self.matmul_efficiency,  # a 1x1 convolution is a GEMM
                "conv": self.conv_efficiency,
            }.get(kind, self.matmul_efficiency)
            return peak * 1e12 * eff
        tensor = self.peak_tf32_tflops if math == "tf32" else self.peak_fp16_tflops
        assert tensor is not None
        eff = {
            "winograd": self.tensor_winograd_efficiency,
            "conv": self.tensor_conv_efficiency,
            "conv1x1": self.tensor_conv1x1_efficiency,
        }.get(kind, self.tensor_matmul_efficiency)
        return tensor * 1e12 * eff

    def bf16(self) -> bool:
        """Whether it has BF16 tensor cores (Ampere and later: the GPUs with TF32)."""
        return self.peak_tf32_tflops is not None


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
    """A GPU with the V100 fit's FP32-core, memory and per-kernel constants and the H100
    fit's tensor-core ones (`_hopper` for Ampere and Hopper GPUs)."""
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
        tensor_winograd_efficiency=H100_TENSOR_WINOGRAD_EFFICIENCY,
        tensor_conv_efficiency=H100_TENSOR_CONV_EFFICIENCY,
        tensor_conv1x1_efficiency=H100_TENSOR_CONV1X1_EFFICIENCY,
        tensor_matmul_efficiency=H100_TENSOR_MATMUL_EFFICIENCY,
    )


def _hopper(device: Device, efficiencies: str = HOPPER_BORROWED) -> Device:
    """An Ampere or Hopper GPU: every constant from the H100 fit (TF32 convolutions by
    default, as measured there)."""
    return replace(
        device,
        matmul_efficiency=H100_MATMUL_EFFICIENCY,
        memory_efficiency=H100_MEMORY_EFFICIENCY,
        kernel_overhead_us=H100_KERNEL_OVERHEAD_US,
        efficiencies=efficiencies,
    )


DEVICES: dict[str, Device] = {
    d.name: d
    for d in [
        replace(_gpu(
            "v100", 15.7, None, 125.0, 900.0, 15.75, 150.0,
            "NVIDIA V100 SXM2 datasheet: 15.7 TFLOP/s FP32, 125 TFLOP/s tensor, 900 GB/s HBM2, "
            "NVLink 2.0 300 GB/s (6 links x 25 GB/s each way), PCIe 3.0 x16",
        ), efficiencies=FITTED),
        replace(_gpu(
            "p100", 10.6, None, 21.2, 732.0, 15.75, 80.0,
            "NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOP/s FP32, 21.2 FP16 (no tensor cores), "
            "732 GB/s HBM2, NVLink 1.0 160 GB/s (4 links x 20 GB/s each way), PCIe 3.0 x16",
        ), tensor_cores=False),
        _hopper(_gpu(
            "a100", 19.5, 156.0, 312.0, 1555.0, 31.5, 300.0,
            "NVIDIA A100 SXM4 40GB datasheet: 19.5 TFLOP/s FP32, 156 TF32, 312 FP16, "
            "1,555 GB/s HBM2, NVLink 3.0 600 GB/s, PCIe 4.0 x16",
        )),
        _hopper(_gpu(
            "a100-80g", 19.5, 156.0, 312.0, 2039.0, 31.5, 300.0,
            "NVIDIA A100 SXM4 80GB datasheet: 19.5 TFLOP/s FP32, 156 TF32, 312 FP16, "
            "2,039 GB/s HBM2e, NVLink 3.0 600 GB/s, PCIe 4.0 x16",
        )),
        _hopper(_gpu(
            "h100", 67.0, 494.7, 989.4, 3350.0, 63.0, 450.0,
            "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32, 494.7 TF32 and 989.4 FP16 (dense), "
            "3.35 TB/s HBM3, NVLink 4.0 900 GB/s, PCIe 5.0 x16",
        ), H100_FITTED),
        _hopper(_gpu(
            "h200", 67.0, 494.7, 989.4, 4800.0, 63.0, 450.0,
            "NVIDIA H200 SXM datasheet: 67 TFLOP/s FP32, 989 TF32 and 1,979 FP16 with "
            "sparsity (494.7 and 989.4 dense), 4.8 TB/s HBM3e (141 GB), NVLink 4.0 900 GB/s, "
            "PCIe 5.0 x16 (128 GB/s both ways)",
        )),
        _gpu(
            "rtx2080ti", 13.45, None, 53.8, 616.0, 15.75, None,
            "NVIDIA Turing architecture whitepaper (RTX 2080 Ti Founders Edition): 13.45 "
            "TFLOP/s FP32, 53.8 FP16 tensor with FP32 accumulate, 616 GB/s GDDR6, PCIe 3.0",
        ),
        _hopper(_gpu(
            "rtx3090", 35.6, 35.6, 71.0, 936.0, 31.5, None,
            "NVIDIA Ampere GA102 whitepaper (GeForce RTX 3090): 35.6 TFLOP/s FP32, 35.6 TF32 "
            "and 71 FP16 tensor with FP32 accumulate (dense), 936 GB/s GDDR6X, PCIe 4.0 x16 "
            "(no NVLink bridge assumed)",
        )),
        _hopper(_gpu(
            "a10", 31.2, 62.5, 125.0, 600.0, 31.5, None,
            "NVIDIA A10 datasheet: 31.2 TFLOP/s FP32, 62.5 TF32 and 125 FP16 tensor (dense), "
            "600 GB/s GDDR6, PCIe 4.0 x16",
        )),
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
            "measured on this host by benchmarks/measure_cpu.py", tensor_cores=False,
        ),
    ]
}  # fmt: skip


def device_names() -> list[str]:
    return sorted(DEVICES)
