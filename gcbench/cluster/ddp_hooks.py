"""gcbench's compressors as PyTorch DDP communication hooks (issue #32), public as
`gcbench.hooks`.

Take the compressor a suite found fastest into your own training script:

    import gcbench.hooks
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(*gcbench.hooks.hook("dgc-1pct", process_group))

`hook(spec, process_group=None)` gives `(state, hook)` for `register_comm_hook`; `spec` is
what a suite's `compressor:` takes (a preset such as `dgc-1pct`, or `kind:param=value`).

- `none`, `fp16`, `bf16` and `powersgd` are torch's own hooks (`allreduce_hook`,
  `fp16_compress_hook`, `bf16_compress_hook`, `powerSGD_hook`), not rewritten. On a
  backend other than NCCL, bf16 (torch's needs NCCL) and PowerSGD (torch's chains its
  collectives from callbacks, which gloo received out of order between ranks here) are
  gcbench's, below: PowerSGD as torch's hook orders it (`cluster.fused.HookFused`). PowerSGD
  gets torch's `PowerSGDState` at the spec's rank with error feedback and warm start, and
  the smallest warm-up torch allows with them (`start_powerSGD_iter=2`; pass
  `start_powerSGD_iter=` and other `PowerSGDState` arguments through `hook(...)`).
- Every other compressor runs through gcbench's executor (`cluster.execute.run_option`),
  the code an emulated cell runs: the bucket is compensated by the error feedback the
  strategies keep for it (DGC its momentum correction, COVAP its scaled residual, the
  others the residual; in the hook's state, per bucket), compressed, and its payloads are
  allreduced where they add up (randomk, the low-rank and quantised-sum kinds: `gc
  flat:ar* gd`) or allgathered and decompressed each (`gc flat:ag* gd`); the sum over the
  ranks, divided by their number, is the bucket's averaged gradient, as DDP's own
  allreduce gives it. ACP-SGD's factors follow each parameter's shape in the bucket.

gcbench's hooks run synchronously (the returned future is already complete): the
bucket's communication does not overlap the rest of backward as DDP's asynchronous
allreduce does. They measure what a compressor does to the gradients and the bytes it
sends, not the overlap; the simulator times the overlap. DDP rebuilds its buckets after
the first iteration: a bucket's error-feedback memory is keyed by its index and size, so
a rebuilt bucket starts from no residual.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations as objects
# (`bucket: dist.GradBucket`, a `torch.futures.Future[torch.Tensor]` back)
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["HookState", "hook", "hooks"]

# The compressors torch ships a DDP hook for: gcbench uses them, not its own
TORCH_HOOKS = ("none", "fp16", "bf16", "powersgd")


def hooks() -> list[str]:
    """Every compressor kind `hook` takes."""
    from gcbench.compress.specs import KINDS

    return sorted(KINDS)


@dataclass
class HookState:
    """A gcbench hook's state: the compressor, its error-feedback memory, the option its
    payloads travel by, the process group and the step (counted at each iteration's last
    bucket)."""

    spec: str
    compressor: Any
    memory: Any
    option: Any
    process_group: Any = None
    step: int = 0
    sent_bytes: int = 0  # the bytes this rank sent so far, every bucket of every step


def spec_of(spec: str) -> Any:
    """The validated compressor spec of a preset or `kind:param=value` (ValueError of one
    line otherwise)."""
    from pydantic import TypeAdapter, ValidationError

    from gcbench.compress.specs import CompressorSpec, parse_compressor
    from gcbench.errors import first_error

    if not isinstance(spec, str):
        raise ValueError(f"compressor: a preset or 'kind:param=value' string (gcbench "
                         f"compressors), got {spec!r}")  # fmt: skip
    try:
        return TypeAdapter(CompressorSpec).validate_python(parse_compressor(spec))
    except ValidationError as e:
        raise ValueError(f"compressor {spec!r}: {first_error(e)}") from None


def hook(spec: str, process_group: Any = None, option: str | None = None,
         **torch_kwargs: Any) -> tuple[Any, Any]:  # fmt: skip
    """(state, hook) for `DistributedDataParallel.register_comm_hook` that compresses
    every bucket with `spec` (see the module docstring); `process_group`: the group DDP
    runs on (None: the default group); `option`: `allgather` (any compressor but those with
    a scheme of their own) or `allreduce` (additive ones only), else the compressor's way;
    anything else is a ValueError here, not a wrong gradient at the first backward.
    `torch_kwargs` go to torch's `PowerSGDState`."""
    s = spec_of(spec)
    kind, params = s.kind, s.params()
    if torch_kwargs and kind != "powersgd":
        raise ValueError(f"{spec}: {', '.join(torch_kwargs)}: only powersgd takes torch's "
                         "PowerSGDState arguments")  # fmt: skip
    # torch's bf16 hook runs on NCCL only, and its PowerSGD hook chains collectives from
    # callbacks, which gloo can receive out of order between ranks (measured: a size
    # mismatch abort in 2 runs of 3): on another backend both are gcbench's
    nccl = dist.is_initialized() and dist.get_backend(process_group) == "nccl"
    _check_option(spec, kind, option)
    # torch's hooks allreduce: an allgather asked for is gcbench's hook of the kind
    torch_hook = kind in TORCH_HOOKS and (kind not in ("bf16", "powersgd") or nccl)
    if torch_hook and option in (None, "allreduce"):
        return _torch_hook(kind, params, process_group, torch_kwargs, s.ef)
    if torch_kwargs:
        raise ValueError(f"{spec}: torch's PowerSGDState arguments apply on NCCL only")
    from gcbench import strategies
    from gcbench.cluster.fused import Fused, HookFused
    from gcbench.compress import create, create_memory
    from gcbench.sim.options import PRESETS

    compressor = create(kind, **params)
    # the error feedback the kind's own strategy keeps (ACP-SGD none beside its own
    # residual: a second one diverged in training), else the collective's
    name = "allreduce" if compressor.additive else "allgather"
    if kind in strategies.own_kinds():
        name = kind
    ef: dict[str, Any] = {}
    if compressor.family == "covap" and s.ef:  # COVAP §III-D: the residual scaled
        ef["coefficient"] = compressor.ef_coefficient  # type: ignore[attr-defined]
    memory = create_memory(strategies.get(name).memory_kind(s), **ef)
    if compressor.family == "lowrank":  # factors of each parameter's matrix (shapes per bucket)
        # PowerSGD in the order torch's hook runs it (three allreduces a bucket)
        compressor = (HookFused if kind == "powersgd" else Fused)(compressor, {})
    option_ = PRESETS[option or ("allreduce" if compressor.additive else "allgather")]
    return HookState(spec, compressor, memory, option_, process_group), _gcbench_hook


def _check_option(spec: str, kind: str, option: str | None) -> None:
    """`hook`'s `option`: how payloads travel. None (the compressor's way) always;
    `allgather` for any compressor; `allreduce` for the additive ones only (it sums
    payloads: a non-additive one's sum is not its gradients' compressed sum, wrong without
    a word). The kinds with a scheme of their own (PowerSGD, ACP-SGD, COVAP) take none."""
    from gcbench import strategies
    from gcbench.compress.specs import ADDITIVE

    if option is None:
        return
    if kind in strategies.own_kinds():
        raise ValueError(f"{spec}: option {option!r}: this hook sends its payloads its own "
                         "way; give no option")  # fmt: skip
    allowed = ["allgather", "allreduce"] if kind in ADDITIVE else ["allgather"]
    if option not in allowed:
        raise ValueError(
            f"{spec}: option {option!r}: takes {' or '.join(allowed)}"
            + ("; allreduce sums payloads, which only additive compressors' are"
               if option == "allreduce" else "")
        )  # fmt: skip


def _torch_hook(kind: str, params: dict[str, Any], group: Any,
                torch_kwargs: dict[str, Any], ef: bool = True) -> tuple[Any, Any]:  # fmt: skip
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if kind == "powersgd":
        kw = {"matrix_approximation_rank": params["rank"], "start_powerSGD_iter": 2,
              "use_error_feedback": ef, "warm_start": True, **torch_kwargs}  # fmt: skip
        return powerSGD_hook.PowerSGDState(process_group=group, **kw), powerSGD_hook.powerSGD_hook
    fn = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
          "bf16": default_hooks.bf16_compress_hook}[kind]  # fmt: skip
    return group, fn


def _groups(group: Any) -> Any:
    """The executor's view of one flat process group (every rank one machine of one GPU:
    the options `hook` uses have flat phases only)."""
    from gcbench.cluster.execute import Groups

    size, rank = dist.get_world_size(group), dist.get_rank(group)
    return Groups(flat=group, intra=None, inter=group, sizes={"flat": size, "intra": 1,
                  "inter": size}, ranks={"flat": rank, "intra": 0, "inter": rank})  # fmt: skip


def _gcbench_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Compress, exchange and average one DDP bucket (`GradBucket`)."""
    from gcbench.cluster.execute import run_option

    x = bucket.buffer()
    # per bucket and size (DDP rebuilds its buckets once); COVAP reads its shard index
    # after the `#`
    key = f"bucket{x.numel()}#{bucket.index()}"
    if hasattr(state.compressor, "shapes"):  # low-rank: each parameter's matrix
        state.compressor.shapes[key] = [tuple(g.shape) for g in bucket.gradients()]
    groups = _groups(state.process_group)
    out = run_option(state.option, x.detach().float().reshape(-1), state.compressor,
                     state.memory, key, state.step, groups, bucket=bucket.index())  # fmt: skip
    state.sent_bytes += sum(out.phase_bytes)
    if bucket.is_last():
        state.step += 1
    mean = out.aggregate.div_(groups.sizes["flat"]).to(x.dtype).reshape(x.shape)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(mean)
    return fut
