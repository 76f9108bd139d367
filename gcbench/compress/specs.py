"""Compressor specs as they appear in suites: a preset name, `kind:param=value`, or a
mapping with `kind` and that kind's parameters (a pydantic discriminated union).

Torch-free (pydantic and the standard library only): these specs only name and check a
compressor. They live beside the compressors, which `gcbench.compress.registry` builds
from them; `gcbench.config` uses them to validate suites without importing torch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

# Kinds whose error feedback is not a choice: the casts keep none, ACP-SGD keeps its
# residual inside its algorithm (ACP-SGD Algorithm 2)
NO_EF_CHOICE = ("none", "fp16", "bf16", "acpsgd")


class _Spec(BaseModel):
    # No inf/nan: a spec travels to Ray workers as JSON, which cannot carry them.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # Error feedback (the residual, DGC's momentum correction, COVAP's scaled residual)
    # on, as the strategies keep it, or off (`ef=false`): the compressor alone
    ef: bool = True

    @model_validator(mode="after")
    def _ef_a_choice(self) -> _Spec:
        kind = self.kind  # type: ignore[attr-defined]
        if not self.ef and kind in NO_EF_CHOICE:
            raise ValueError(f"ef: {kind} keeps no error feedback to turn off")
        return self

    def params(self) -> dict[str, Any]:
        """This spec's compressor parameters, without `kind` and `ef`."""
        return self.model_dump(exclude={"kind", "ef"})

    def label(self) -> str:
        """A short, stable name that parses back: the preset it equals (with `:ef=false`
        where only its error feedback is off), else `kind:param=value,...[,ef=false]`."""
        on = self if self.ef else self.model_copy(update={"ef": True})
        for name, spec in PRESETS.items():
            if spec == on:
                return name if self.ef else f"{name}:ef=false"
        items = [*(f"{k}={v}" for k, v in self.params().items()), *(["ef=false"] * (not self.ef))]
        kind = self.kind  # type: ignore[attr-defined]
        return f"{kind}:{','.join(items)}" if items else kind


def not_bool(value: Any) -> Any:
    """pydantic would read YAML's `true` as 1.0 and `false` as 0.0 (`ratio: true` as 100%,
    a rate as 1): a number is a number."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, got {value!r}")
    return value


# A float that refuses booleans; suites' other numbers (`config.fields`) take it from here.
# In a type with bounds NOT_BOOL goes last (`Ratio`): bounds inside it would reach the
# JSON Schema as pydantic's own `gt`/`le` keys, not `exclusiveMinimum`/`maximum`.
NOT_BOOL = BeforeValidator(not_bool)
Number = Annotated[float, NOT_BOOL]
Ratio = Annotated[float, Field(gt=0, le=1), NOT_BOOL]


class NoneSpec(_Spec):
    kind: Literal["none"]


class Fp16Spec(_Spec):
    kind: Literal["fp16"]


class Bf16Spec(_Spec):
    kind: Literal["bf16"]


class Int8Spec(_Spec):
    kind: Literal["int8"]


class TopkSpec(_Spec):
    kind: Literal["topk"]
    ratio: Ratio = 0.01


class RandomkSpec(_Spec):
    kind: Literal["randomk"]
    ratio: Ratio = 0.01


class DgcSpec(_Spec):
    kind: Literal["dgc"]
    ratio: Ratio = 0.01
    sample_ratio: Ratio = 0.01  # DGC estimates the threshold on a 1% sample


class ThresholdSpec(_Spec):
    kind: Literal["threshold"]
    threshold: Number = Field(gt=0)


class SignsgdSpec(_Spec):
    kind: Literal["signsgd"]


class EfsignsgdSpec(_Spec):
    kind: Literal["efsignsgd"]


class SignumSpec(_Spec):
    kind: Literal["signum"]
    momentum: Number = Field(0.9, ge=0, lt=1)


class OnebitSpec(_Spec):
    kind: Literal["onebit"]


class TerngradSpec(_Spec):
    kind: Literal["terngrad"]


class QsgdSpec(_Spec):
    kind: Literal["qsgd"]
    levels: int = Field(16, ge=1, le=2**31 - 1)


class ThreelcSpec(_Spec):
    kind: Literal["threelc"]
    sparsity: Number = Field(1.0, ge=1, lt=2)  # 3LC §3.1: multiplier s in [1, 2)


class PowersgdSpec(_Spec):
    kind: Literal["powersgd"]
    rank: int = Field(4, ge=1, le=2**31 - 1)


class AcpsgdSpec(_Spec):
    kind: Literal["acpsgd"]
    rank: int = Field(4, ge=1, le=2**31 - 1)


class CovapSpec(_Spec):
    kind: Literal["covap"]
    # COVAP §III-B: I = ceil(CCR); the simulator runs I steps, so I is kept small.
    interval: int = Field(4, ge=1, le=1024)
    ef_init: Number = Field(0.5, ge=0, le=1)  # COVAP §III-D error-feedback scheduler
    ef_ascend_steps: int = Field(1000, ge=1, le=2**63 - 1)
    ef_ascend_range: Number = Field(0.1, ge=0, le=1)


SPEC_TYPES: tuple[type[_Spec], ...] = (
    NoneSpec,
    Fp16Spec,
    Bf16Spec,
    Int8Spec,
    TopkSpec,
    RandomkSpec,
    DgcSpec,
    ThresholdSpec,
    SignsgdSpec,
    EfsignsgdSpec,
    SignumSpec,
    OnebitSpec,
    TerngradSpec,
    QsgdSpec,
    ThreelcSpec,
    PowersgdSpec,
    AcpsgdSpec,
    CovapSpec,
)
KINDS: dict[str, type[_Spec]] = {
    get_args(t.model_fields["kind"].annotation)[0]: t for t in SPEC_TYPES
}

PRESETS: dict[str, _Spec] = {
    "none": NoneSpec(kind="none"),
    "fp16": Fp16Spec(kind="fp16"),
    "bf16": Bf16Spec(kind="bf16"),
    "int8": Int8Spec(kind="int8"),
    "topk-1pct": TopkSpec(kind="topk", ratio=0.01),
    "topk-0.1pct": TopkSpec(kind="topk", ratio=0.001),
    "randomk-1pct": RandomkSpec(kind="randomk", ratio=0.01),
    "dgc-1pct": DgcSpec(kind="dgc", ratio=0.01),
    "signsgd": SignsgdSpec(kind="signsgd"),
    "efsignsgd": EfsignsgdSpec(kind="efsignsgd"),
    "signum": SignumSpec(kind="signum"),
    "onebit": OnebitSpec(kind="onebit"),
    "terngrad": TerngradSpec(kind="terngrad"),
    "qsgd-s16": QsgdSpec(kind="qsgd", levels=16),
    "threelc-s1.0": ThreelcSpec(kind="threelc", sparsity=1.0),
    "threelc-s1.75": ThreelcSpec(kind="threelc", sparsity=1.75),
    "powersgd-r4": PowersgdSpec(kind="powersgd", rank=4),
    "powersgd-r32": PowersgdSpec(kind="powersgd", rank=32),
    "acpsgd-r4": AcpsgdSpec(kind="acpsgd", rank=4),
    "acpsgd-r32": AcpsgdSpec(kind="acpsgd", rank=32),
    "covap-i4": CovapSpec(kind="covap", interval=4),
}


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_compressor(value: Any) -> Any:
    """Turn a preset name, `kind:param=value,...` or `preset:param=value,...` (the
    preset's parameters, some replaced) into a mapping; pass mappings through."""
    if not isinstance(value, str):
        return value
    if value in PRESETS:
        return PRESETS[value].model_dump()
    kind, _, rest = value.partition(":")
    base: dict[str, Any] = {}
    if kind in PRESETS:
        base = PRESETS[kind].model_dump(exclude={"kind"})
        kind = PRESETS[kind].kind  # type: ignore[attr-defined]
    if kind not in KINDS:
        import difflib

        close = difflib.get_close_matches(value, [*PRESETS, *KINDS], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown compressor {value!r}{hint}; presets: {', '.join(PRESETS)}; "
            f"kinds: {', '.join(KINDS)}"
        )
    out: dict[str, Any] = {"kind": kind}
    for item in filter(None, rest.split(",")):
        name, eq, text = item.partition("=")
        if not eq:
            raise ValueError(f"compressor parameter {item!r} must look like name=value")
        if name.strip() in out:
            raise ValueError(f"compressor {value!r}: parameter {name.strip()!r} given twice")
        out[name.strip()] = _scalar(text.strip())
    return {"kind": out.pop("kind"), **base, **out}


CompressorSpec = Annotated[
    NoneSpec
    | Fp16Spec
    | Bf16Spec
    | Int8Spec
    | TopkSpec
    | RandomkSpec
    | DgcSpec
    | ThresholdSpec
    | SignsgdSpec
    | EfsignsgdSpec
    | SignumSpec
    | OnebitSpec
    | TerngradSpec
    | QsgdSpec
    | ThreelcSpec
    | PowersgdSpec
    | AcpsgdSpec
    | CovapSpec,
    Field(discriminator="kind"),
    BeforeValidator(parse_compressor),
]


# What the simulator and the suite rules read of each kind without importing torch: whether
# payloads sum to a valid payload (`additive`: allreduce and reduce-scatter allowed) and
# whether one payload splits into per-destination chunks (`splittable`). The compressor
# classes declare the same (a test checks that they agree).
ADDITIVE = frozenset({"none", "fp16", "bf16", "randomk", "powersgd", "acpsgd", "covap"})
SPLITTABLE = frozenset({"none", "fp16", "bf16"})
