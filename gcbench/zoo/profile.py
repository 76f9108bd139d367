"""ModelProfile: a model's gradient tensors in ready order with FLOP-based compute times.

One forward pass on the meta device under torch's FLOP counter gives each leaf module's
FLOPs and output size. Time = FLOPs / (peak x efficiency) for matrix work, bytes / memory
bandwidth for elementwise work (normalisation, activations, pooling), plus a fixed
overhead per kernel. Backward is twice the forward FLOPs (input and weight gradients).
The model-zoo issue (#3) refines this per operation class and adds measured profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gcbench.zoo.catalog import MODELS
from gcbench.zoo.devices import DEVICES, Device

ELEMENTWISE_PASSES_FWD = 2  # read input, write output
ELEMENTWISE_PASSES_BWD = 3  # read input and output gradient, write input gradient
UPDATE_PASSES = 4  # SGD with momentum: read grad, read+write momentum, write weight (fp32)


@dataclass(frozen=True)
class TensorProfile:
    name: str
    shape: tuple[int, ...]
    numel: int
    layer: str
    backward_s: float  # compute time from the previous gradient becoming ready to this one

    @property
    def nbytes(self) -> int:
        return self.numel * 4


@dataclass(frozen=True)
class ModelProfile:
    name: str
    batch_size: int
    seq_len: int | None
    sample_unit: str
    device: str
    forward_s: float
    update_s: float
    tensors: tuple[TensorProfile, ...]  # gradient-ready order: output layer first

    @property
    def backward_s(self) -> float:
        return sum(t.backward_s for t in self.tensors)

    @property
    def compute_s(self) -> float:
        """One GPU's iteration with no communication: forward + backward + update."""
        return self.forward_s + self.backward_s + self.update_s

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def samples_per_iteration(self) -> int:
        """Per GPU, in the model's unit (images, tokens or samples)."""
        return (
            self.batch_size * (self.seq_len or 1)
            if self.sample_unit == "tokens"
            else self.batch_size
        )


def _leaf_costs(
    name: str, batch_size: int
) -> list[tuple[str, list[tuple[str, tuple[int, ...]]], float, int]]:
    """Leaf modules in forward order: (name, [(param name, shape)], forward FLOPs, output numel)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from gcbench.zoo.nets import build

    model = build(name)
    info = MODELS[name]
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]
    order: list[tuple[str, list[tuple[str, tuple[int, ...]]], float, int]] = []
    counter = FlopCounterMode(display=False)
    start: dict[str, float] = {}

    def pre(mod_name: str):
        def hook(_m, _inp):
            start[mod_name] = counter.get_total_flops()

        return hook

    def post(mod_name: str, mod: torch.nn.Module):
        def hook(_m, _inp, out):
            flops = counter.get_total_flops() - start[mod_name]
            params = [
                (f"{mod_name}.{p}" if mod_name else p, tuple(t.shape))
                for p, t in mod.named_parameters(recurse=False)
            ]
            numel = out.numel() if isinstance(out, torch.Tensor) else 0
            order.append((mod_name, params, float(flops), numel))

        return hook

    handles = []
    for n, m in leaves:
        handles.append(m.register_forward_pre_hook(pre(n)))
        handles.append(m.register_forward_hook(post(n, m)))
    x = torch.empty((batch_size, *info.input_shape), device="meta")
    with counter, torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return order


@lru_cache(maxsize=64)
def model_profile(
    name: str, batch_size: int | None = None, device: str = "v100", seq_len: int | None = None
) -> ModelProfile:
    """The FLOP-based profile of a zoo model on a device from the device table."""
    info = MODELS[name]
    batch = batch_size or info.batch_size
    dev: Device = DEVICES[device]
    flops_per_s = dev.peak_fp32_tflops * 1e12 * dev.matmul_efficiency
    mem_bps = dev.mem_bandwidth_gbs * 1e9
    overhead = dev.kernel_overhead_us * 1e-6

    def cost(flops: float, out_numel: int, passes: int, factor: float) -> float:
        if flops > 0:
            return factor * flops / flops_per_s + overhead
        return passes * out_numel * 4 / mem_bps + overhead

    leaves = _leaf_costs(name, batch)
    forward_s = sum(cost(f, n, ELEMENTWISE_PASSES_FWD, 1.0) for _, _, f, n in leaves)
    tensors: list[TensorProfile] = []
    pending = 0.0
    for layer, params, flops, out_numel in reversed(leaves):
        pending += cost(flops, out_numel, ELEMENTWISE_PASSES_BWD, 2.0)
        # Parameters of one module become ready together; the bias (registered last) first.
        for pname, shape in reversed(params):
            numel = 1
            for s in shape:
                numel *= s
            tensors.append(TensorProfile(pname, shape, numel, layer, pending))
            pending = 0.0
    total = sum(t.numel for t in tensors)
    update_s = UPDATE_PASSES * total * 4 / mem_bps + overhead * len(tensors)
    return ModelProfile(
        name,
        batch,
        seq_len or info.seq_len,
        info.sample_unit,
        device,
        forward_s,
        update_s,
        tuple(tensors),
    )
