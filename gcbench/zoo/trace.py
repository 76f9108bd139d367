"""Trace one forward pass of a zoo model on the meta device into a list of costed operations.

Every aten operation the forward runs is recorded with its class (convolution, matmul,
embedding, or memory-bound), its forward FLOPs (torch's own `flop_counter` registry) and
the bytes it moves, plus the FLOPs and bytes of its backward:

- a convolution or matmul computes one gradient GEMM per operand that needs a gradient
  (input gradient and weight gradient: 2x the forward FLOPs; 1x for the first layer, whose
  input needs none);
- a memory-bound operation's backward reads the output gradient and a saved tensor and
  writes the input gradient: 1.5x its forward traffic;
- an embedding's backward zeroes its full-size gradient and scatters the rows into it.

Operations whose inputs need no gradient (index arithmetic, masks) have no backward.
A parameter's gradient is ready once the backward of its earliest use in the forward has
run (views such as `weight.t()` count as uses of the parameter), so a tied embedding,
used first and last, is ready last.

3x3 stride-1 convolutions are their own class ("winograd"): cuDNN computes them with
Winograd transforms, so their achieved rate, counted in direct-convolution FLOPs, can exceed
the GPU's peak (the V100 profile of VGG-16 shows about 27 TFLOP/s on a 15.7 TFLOP/s GPU).

The result depends only on the model, batch size and sequence length, never on a device,
so `gcbench.zoo.profile` turns it into times for any device without tracing again.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from gcbench.zoo.catalog import MODELS
from gcbench.zoo.nets import build
from gcbench.zoo.traces import ModelTrace, Op, Param

aten = torch.ops.aten

CONV = {aten.convolution, aten._convolution, aten.convolution_overrideable, aten.cudnn_convolution}
MATMUL = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}
# Operations that return a view (or nothing) and launch no kernel.
VIEWS = {
    aten.t, aten.transpose, aten.view, aten._unsafe_view, aten.reshape, aten.expand,
    aten.permute, aten.unsqueeze, aten.squeeze, aten.slice, aten.select, aten.split,
    aten.split_with_sizes, aten.unsafe_split, aten.unbind, aten.detach, aten.alias,
    aten.as_strided, aten.narrow, aten.chunk, aten.view_as, aten.expand_as, aten.lift_fresh,
    aten._reshape_alias, aten.flatten, aten.empty, aten.empty_like, aten.empty_strided,
}  # fmt: skip
# Operands (by position) of a GEMM whose gradients cost one GEMM each.
GEMM_OPERANDS = {aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2)}




def _nbytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches for `t`: a broadcast view reads its storage, not its numel."""
    dense = t.numel() * t.element_size()
    try:
        return min(dense, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return dense


def _winograd(args: tuple[Any, ...]) -> bool:
    """A 3x3, stride-1, ungrouped 2-D convolution: cuDNN runs these with Winograd kernels,
    which need 2.25-4x fewer multiplies than the direct FLOP count says."""
    weight, stride, dilation, groups = args[1], args[3], args[5], args[8]
    return (
        weight.dim() == 4
        and tuple(weight.shape[2:]) == (3, 3)
        and all(s == 1 for s in stride)
        and all(d == 1 for d in dilation)
        and groups == 1
    )


def _pointwise(args: tuple[Any, ...]) -> bool:
    """A 1x1 convolution: a GEMM over channels, which cuDNN runs at matmul efficiency."""
    weight, groups = args[1], args[8]
    return weight.dim() == 4 and tuple(weight.shape[2:]) == (1, 1) and groups == 1


_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "signbit"}


def _broadcast(*shapes: torch.Size) -> tuple[int, ...]:
    """NumPy broadcasting of concrete shapes (torch.broadcast_shapes imports sympy)."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, start=ndim - len(shape)):
            if n != 1:
                if out[i] not in (1, n):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                out[i] = n
    return tuple(out)


def _like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous meta tensor of x's shape (torch.empty_like's meta kernel imports sympy)."""
    return torch.empty(tuple(x.shape), dtype=dtype or x.dtype, device="meta")


def _fast_meta(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of a common operation on meta tensors, built directly.

    Many of torch's meta kernels are Python decompositions (batch norm costs ~3 ms a call);
    tracing a 1,700-operation LSTM through them takes seconds. Shapes of these operations
    are simple, so we build their outputs here; anything else returns None and runs for real.
    """
    packet = func._overloadpacket
    shape: Any  # each branch builds its own
    if packet is aten.convolution and not args[6]:  # not transposed
        x, w, stride, padding, dilation = args[0], args[1], args[3], args[4], args[5]
        spatial = [
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, k, s, p, d in zip(
                x.shape[2:], w.shape[2:], stride, padding, dilation, strict=True
            )
        ]
        return torch.empty((x.shape[0], w.shape[0], *spatial), dtype=x.dtype, device="meta")
    if packet in (aten.mean, aten.sum) and len(args) == 1 and set(kwargs) <= {"dtype"}:
        return torch.empty((), dtype=kwargs.get("dtype") or args[0].dtype, device="meta")
    if packet in (aten.mean, aten.sum, aten.var_mean) and len(args) >= 2 and args[1]:
        x, dims = args[0], [d % args[0].dim() for d in args[1]]
        positional = len(args) > 2 and packet is not aten.var_mean
        keep = kwargs.get("keepdim", args[2] if positional else False)
        shape = [1 if i in dims else n for i, n in enumerate(x.shape) if keep or i not in dims]
        out = torch.empty(shape, dtype=x.dtype, device="meta")
        return (out, _like(out)) if packet is aten.var_mean else out
    if packet in (aten.tril, aten.triu, aten.masked_fill, aten.clone):
        return _like(args[0])
    if packet in (aten.zeros_like, aten.ones_like, aten.full_like, aten.empty_like):
        return _like(args[0], kwargs.get("dtype"))
    if packet is aten.embedding:
        weight, indices = args[0], args[1]
        return torch.empty((*indices.shape, weight.shape[1]), dtype=weight.dtype, device="meta")
    if packet in (aten.reflection_pad2d, aten.replication_pad2d):
        x, (left, right, top, bottom) = args[0], args[1]
        shape = (*x.shape[:-2], x.shape[-2] + top + bottom, x.shape[-1] + left + right)
        return torch.empty(shape, dtype=x.dtype, device="meta")
    if packet in (aten.mse_loss, aten.l1_loss, aten.binary_cross_entropy_with_logits):
        reduction = kwargs.get("reduction", next((a for a in args[2:] if isinstance(a, int)), 1))
        if reduction == 0:  # "none"
            return _like(args[0])
        return torch.empty((), dtype=args[0].dtype, device="meta")
    if packet is aten.arange and all(isinstance(a, int) for a in args):
        start, end, step = (0, *args, 1)[-3:] if len(args) == 1 else (*args, 1)[:3]
        length = max(0, -(-(end - start) // step))
        return torch.empty((length,), dtype=kwargs.get("dtype") or torch.long, device="meta")
    if packet is aten.mv:
        return torch.empty((args[0].shape[0],), dtype=args[0].dtype, device="meta")
    if packet is aten.dot:
        return torch.empty((), dtype=args[0].dtype, device="meta")
    if packet in (aten.cat, aten.stack) and args[0]:
        parts = args[0]
        dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % (
            parts[0].dim() + (packet is aten.stack)
        )
        shape = list(parts[0].shape)
        if packet is aten.stack:
            shape.insert(dim, len(parts))
        else:
            parts = [p for p in parts if p.dim() > 1 or p.numel() > 0]  # cat skips empty 1-D
            shape[dim] = sum(p.shape[dim] for p in parts)
        return torch.empty(shape, dtype=parts[0].dtype, device="meta")
    if packet is aten.upsample_nearest2d and args[1] is not None:
        x = args[0]
        return torch.empty((*x.shape[:-2], *args[1]), dtype=x.dtype, device="meta")
    if packet is aten.bmm:
        a, b = args[0], args[1]
        return torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device="meta")
    if packet is aten.max_pool2d_with_indices:
        return _max_pool_meta(args)
    if packet in (aten.adaptive_max_pool2d, aten._adaptive_avg_pool2d):
        x, size = args[0], list(args[1])
        out = torch.empty((*x.shape[:-2], *size), dtype=x.dtype, device="meta")
        if packet is aten.adaptive_max_pool2d:
            return out, torch.empty(out.shape, dtype=torch.long, device="meta")
        return out
    if packet in (aten.mm, aten.addmm):
        a, b = args[-2], args[-1]
        return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device="meta")
    if packet in (aten.native_batch_norm, aten._native_batch_norm_legit):
        x = args[0]
        stats = torch.empty((x.shape[1],), dtype=x.dtype, device="meta")
        return _like(x), stats, _like(stats)
    if packet is aten.native_layer_norm:
        x, normalized = args[0], args[1]
        stat_shape = (*x.shape[: x.dim() - len(normalized)], *([1] * len(normalized)))
        stats = torch.empty(stat_shape, dtype=x.dtype, device="meta")
        return _like(x), stats, _like(stats)
    if packet is aten.linalg_vector_norm and not kwargs:
        x = args[0]
        dims = [d % x.dim() for d in (args[2] if len(args) > 2 and args[2] else range(x.dim()))]
        keep = len(args) > 3 and args[3]
        shape = [1 if i in dims else n for i, n in enumerate(x.shape) if keep or i not in dims]
        return torch.empty(shape, dtype=x.dtype, device="meta")
    if torch.Tag.pointwise in func.tags:
        return _pointwise_meta(packet, args, kwargs)
    return None


def _max_pool_meta(args: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The output and indices of `aten.max_pool2d_with_indices` on meta tensors (its
    optional stride, padding, dilation and ceil_mode as torch defaults them)."""
    x, kernel = args[0], list(args[1])
    stride = list(args[2]) if len(args) > 2 and args[2] else kernel
    padding = list(args[3]) if len(args) > 3 else [0]
    dilation = list(args[4]) if len(args) > 4 else [1]
    ceil = bool(args[5]) if len(args) > 5 else False
    k, st, p, d = (v * 2 if len(v) == 1 else v for v in (kernel, stride, padding, dilation))
    spatial = []
    for i in range(2):
        span = x.shape[-2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1
        n = (-(-span // st[i]) if ceil else span // st[i]) + 1
        if ceil and (n - 1) * st[i] >= x.shape[-2 + i] + p[i]:
            n -= 1
        spatial.append(n)
    out = torch.empty((*x.shape[:-2], *spatial), dtype=x.dtype, device="meta")
    return out, torch.empty(out.shape, dtype=torch.long, device="meta")


def _pointwise_meta(packet: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of a pointwise operation (`torch.Tag.pointwise`) on meta tensors: its
    `out=` tensor where that has the broadcast shape, the first argument for an in-place
    one, else a new tensor of the broadcast shape; None (run it for real) for comparisons,
    mixed dtypes, other keyword arguments or an `out=` of another shape."""
    if isinstance(kwargs.get("out"), torch.Tensor):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        shape = _broadcast(*(t.shape for t in tensors))
        return kwargs["out"] if kwargs["out"].shape == shape else None
    if set(kwargs) <= {"approximate", "alpha"}:
        name = packet.__name__
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or name.rstrip("_") in _COMPARISONS:
            return None
        if any(t.dtype != tensors[0].dtype for t in tensors):
            return None
        if name.endswith("_"):
            return args[0]
        shape = _broadcast(*(t.shape for t in tensors))
        return torch.empty(shape, dtype=tensors[0].dtype, device="meta")
    return None


class _Recorder(TorchDispatchMode):
    def __init__(self, params: dict[int, int]):
        super().__init__()
        self.ops: list[Op] = []
        self.uses: dict[int, int] = {}  # param index -> first op index
        self.derived: dict[int, frozenset[int]] = {}  # tensor id -> params it views
        self.grad: set[int] = set(params)  # ids of tensors that need a gradient
        self.params = params
        self.keep: list[Any] = []  # holds outputs alive so their ids stay unique

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in `torch._disable_dynamo` unless a mode opts out,
        # and that wrapper imports torch._dynamo (2+ s) on first use. Nothing here is ever
        # compiled, so opt out and keep a cold `gcbench model` fast.
        return False

    def _sources(self, t: torch.Tensor) -> frozenset[int]:
        if id(t) in self.params:
            return frozenset([self.params[id(t)]])
        return self.derived.get(id(t), frozenset())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = _fast_meta(func, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        packet = func._overloadpacket
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        self.keep.append(out)
        needs_grad = any(id(t) in self.grad for t in inputs)
        if needs_grad:
            self.grad.update(id(o) for o in outputs)
        if packet in VIEWS:
            sources = frozenset().union(*(self._sources(t) for t in inputs))
            if sources:
                for o in outputs:
                    self.derived[id(o)] = sources
            return out
        index = len(self.ops)
        for t in inputs:
            for p in self._sources(t):
                self.uses.setdefault(p, index)
        nbytes = float(sum(_nbytes(t) for t in inputs) + sum(_nbytes(o) for o in outputs))
        flops = 0.0
        if packet in flop_registry and (packet in CONV or packet in MATMUL):
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
        if packet in CONV:
            operands = (args[0], args[1])
            grads = sum(id(t) in self.grad for t in operands)
            kind = "winograd" if _winograd(args) else "conv1x1" if _pointwise(args) else "conv"
            op = Op(kind, flops, nbytes, flops * grads, nbytes * grads, grads)
        elif packet in MATMUL:
            operands = tuple(args[i] for i in GEMM_OPERANDS[packet])
            grads = sum(id(t) in self.grad for t in operands)
            op = Op("matmul", flops, nbytes, flops * grads, nbytes * grads, grads)
        elif packet is aten.embedding:
            weight = args[0]
            wants = id(weight) in self.grad
            bwd = _nbytes(weight) + _nbytes(outputs[0]) if wants else 0.0
            op = Op("embedding", 0.0, float(2 * _nbytes(outputs[0])), 0.0, bwd, 2 * int(wants))
        else:
            bwd = 1.5 * nbytes if needs_grad else 0.0
            op = Op("memory", 0.0, nbytes, 0.0, bwd, int(needs_grad))
        self.ops.append(op)
        return out


def model_input(name: str, batch_size: int, seq_len: int | None, device: Any = "meta") -> Any:
    """A batch of inputs for a zoo model: images, or token ids of shape (batch, seq_len)."""
    info = MODELS[name]
    if info.vocab is not None:
        length = seq_len or info.seq_len or 1
        if device == "meta":
            return torch.empty((batch_size, length), dtype=torch.long, device=device)
        return torch.randint(0, info.vocab, (batch_size, length), device=device)
    if device == "meta":
        return torch.empty((batch_size, *info.input_shape), device=device)
    return torch.randn((batch_size, *info.input_shape), device=device)


def trace_model(name: str, batch_size: int, seq_len: int | None = None) -> ModelTrace:
    """Trace `name` at a per-GPU batch (and sequence length) on the meta device."""
    model = build(name)
    model.train()
    named = list(model.named_parameters())
    ids = {id(p): i for i, (_, p) in enumerate(named)}
    owner: dict[int, str] = {}
    for mod_name, module in model.named_modules():
        for p in module.parameters(recurse=False):
            owner.setdefault(id(p), mod_name)
    recorder = _Recorder(ids)
    with torch.no_grad(), recorder:
        model(model_input(name, batch_size, seq_len))
    params = tuple(
        Param(n, tuple(p.shape), owner.get(id(p), ""), recorder.uses.get(i, 0))
        for i, (n, p) in enumerate(named)
    )
    return ModelTrace(name, batch_size, seq_len, tuple(recorder.ops), params)
