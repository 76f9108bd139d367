"""Pydantic models of a suite and of one cell of its grid.

Every model is frozen and forbids unknown keys, so a typo is an error with a line number
rather than a silently ignored setting. Defaults that depend on other fields (a model's
batch size, a link's bandwidth) are filled in before validation, so a cell states every
value it runs with.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gcbench.compress.specs import CompressorSpec, NoneSpec
from gcbench.config.strategies import STRATEGIES, canonical, check_cell, pair_compressor
from gcbench.zoo.catalog import MODELS
from gcbench.zoo.devices import DEVICES


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _as_list(value: Any) -> Any:
    """Grid axes accept a single value where a list of one is meant."""
    return value if isinstance(value, list) else [value]


class ModelSpec(_Frozen):
    """A zoo model and its per-GPU batch size (default: the zoo's pinned one), or a model
    whose profile comes from a file (`gcbench profile` output, a CSV of ready times, or
    `collection.json#name`)."""

    name: str
    batch_size: int | None = Field(None, gt=0)
    seq_len: int | None = Field(None, gt=0)
    profile: str | None = Field(
        None,
        description="a profile file used instead of the zoo's FLOP-based profile "
        "(relative to the suite file)",
    )
    profile_sha256: str | None = Field(
        None, description="filled in from the profile file so results follow its content"
    )

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, str):
            data = {"name": data}
        if not (isinstance(data, dict) and isinstance(data.get("name"), str)):
            return data
        if isinstance(data.get("profile"), str):
            return _fill_from_profile(data, (info.context or {}).get("base_dir"))
        model = MODELS.get(data["name"])
        if model is None:
            close = difflib.get_close_matches(data["name"], list(MODELS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown model {data['name']!r}{hint}; valid: {', '.join(sorted(MODELS))}"
            )
        return {"batch_size": model.batch_size, "seq_len": model.seq_len, **data}


def _fill_from_profile(data: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """Resolve the profile path, read the file once to check it, and take the batch size
    and sequence length it was measured at (a CSV states neither: the zoo's or the suite's)."""
    from gcbench.errors import ConfigError
    from gcbench.zoo.profile_io import read_profile

    spec = data["profile"]
    path_part, sep, selector = spec.partition("#")
    path = Path(path_part).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    path = path.resolve()
    try:
        prof = read_profile(f"{path}{sep}{selector}")
    except ConfigError as e:
        raise ValueError(e.messages[0]) from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    info = MODELS.get(data["name"])
    from_file = prof.name != "imported"  # CSV files name no model and no batch
    defaults = {
        "batch_size": prof.batch_size if from_file else (info.batch_size if info else 1),
        "seq_len": prof.seq_len if from_file else (info.seq_len if info else None),
    }
    for key in ("batch_size", "seq_len"):
        given = data.get(key)
        if from_file and given is not None and given != defaults[key]:
            raise ValueError(
                f"{key} {given} differs from the {defaults[key]} the profile was measured at"
            )
    return {**defaults, **data, "profile": f"{path}{sep}{selector}", "profile_sha256": digest}


# Line rates (GB/s per GPU, one direction) used when a suite gives none: NVLink 2.0 on a
# V100 has 6 links x 25 GB/s; a PCIe 3.0 x16 slot 15.75 GB/s.
INTRA_DEFAULT_GBS = {"nvlink": 150.0, "pcie": 15.75}


class Network(_Frozen):
    """Links of one machine and between machines (DESIGN §5 Network and cluster).

    Efficiency is achieved bus bandwidth / line rate; latency is per collective step.
    """

    intra: Literal["nvlink", "pcie"] = "nvlink"
    intra_gbs: float | None = Field(None, gt=0, description="GB/s per GPU inside a machine")
    intra_latency_us: float = Field(5.0, ge=0)
    intra_efficiency: float = Field(0.8, gt=0, le=1)
    inter_gbps: float = Field(gt=0, description="Gbit/s per machine between machines")
    inter_latency_us: float = Field(25.0, ge=0)
    inter_efficiency: float = Field(0.7, gt=0, le=1)
    nics_per_machine: int = Field(1, ge=1)
    server_gbps: float | None = Field(
        None, gt=0, description="Gbit/s of each CPU server's NICs (default: inter_gbps)"
    )

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("intra_gbs") is None:
            kind = data.get("intra", "nvlink")
            if kind in INTRA_DEFAULT_GBS:
                data = {**data, "intra_gbs": INTRA_DEFAULT_GBS[kind]}
        return data


class Cluster(_Frozen):
    """`machines` x `gpus_per_machine` GPU workers plus `cpu_servers` CPU machines."""

    machines: int = Field(ge=1)
    gpus_per_machine: int = Field(8, ge=1)
    cpu_servers: int = Field(0, ge=0)
    cpu_cores: int = Field(16, ge=1, description="CPU-compression pool per machine")
    summation_gbs: float | None = Field(
        None,
        gt=0,
        description="GB/s each CPU server sums (input bytes); default: never the bottleneck",
    )

    @property
    def gpus(self) -> int:
        return self.machines * self.gpus_per_machine


# Named strategies (`gcbench.config.strategies`: what each takes); an alias is stored
# under its canonical name, so its cells share their ids.
def _canonical_strategy(value: Any) -> Any:
    return canonical(value) if isinstance(value, str) else value


StrategyName = Literal[
    "fp32",
    "fp32-2level",
    "fp16",
    "allgather",
    "allgather-2level",
    "allreduce",
    "ps",
    "byteps",
    "byteps-compress",
    "hipress",
    "powersgd",
    "acpsgd",
    "covap",
]
assert set(StrategyName.__args__) == set(STRATEGIES)  # type: ignore[attr-defined]
Strategy = Annotated[StrategyName, BeforeValidator(_canonical_strategy)]
# How gradients are fused into buckets: PyTorch DDP's (1 MiB, then 25 MiB), one bucket
# per tensor, or buckets of at most a fixed number of bytes.
Fusion = Annotated[
    str,
    Field(
        pattern=r"^(ddp|tensor|fixed:[1-9][0-9]*)$",
        description="ddp (1 MiB then 25 MiB buckets), tensor, or fixed:<bytes>",
    ),
]
# Strategies that use no compressor run once, with compressor `none` (DESIGN §4).

DeviceName = Literal["v100", "a100", "h100", "rtx2080ti", "t4", "cpu"]
assert set(DeviceName.__args__) == set(DEVICES)  # type: ignore[attr-defined]


def _axis(item: Any) -> Any:
    return Annotated[list[item], Field(min_length=1), BeforeValidator(_as_list)]


class Grid(_Frozen):
    """The axes whose cross product is the suite's cells."""

    model: _axis(ModelSpec)  # type: ignore[valid-type]
    compressor: _axis(CompressorSpec) = Field(default_factory=lambda: [NoneSpec(kind="none")])  # type: ignore[valid-type]
    network: _axis(Network)  # type: ignore[valid-type]
    cluster: _axis(Cluster)  # type: ignore[valid-type]
    strategy: _axis(Strategy) = Field(default_factory=lambda: ["fp32"])  # type: ignore[valid-type]
    fusion: _axis(Fusion) = Field(default_factory=lambda: ["ddp"])  # type: ignore[valid-type]


# Keys a filter (`include`, `exclude`, `--only`) may test: the flat config columns of a cell.
FILTER_KEYS = (
    "model",
    "batch_size",
    "seq_len",
    "compressor",
    "compressor_kind",
    "strategy",
    "fusion",
    "machines",
    "gpus_per_machine",
    "gpus",
    "cpu_servers",
    "cpu_cores",
    "summation_gbs",
    "intra",
    "intra_gbs",
    "inter_gbps",
    "nics_per_machine",
    "server_gbps",
    "device",
    "seed",
    "mode",
)
Scalar = str | int | float | bool


def _check_filter(value: dict[str, Any]) -> dict[str, Any]:
    bad = [k for k in value if k not in FILTER_KEYS]
    if bad:
        raise ValueError(f"unknown filter key {bad[0]!r}; valid: {', '.join(FILTER_KEYS)}")
    return value


Filter = Annotated[
    dict[str, Scalar | list[Scalar]], Field(min_length=1), AfterValidator(_check_filter)
]


class Suite(_Frozen):
    """A suite file: a grid of cells and how to run them."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    description: str = ""
    mode: Literal["simulate", "emulate"] = "simulate"
    seed: int = 0
    repetitions: int = Field(1, ge=1, le=1000)
    device: DeviceName = "v100"
    grid: Grid
    include: list[Filter] = Field(default_factory=list)
    exclude: list[Filter] = Field(default_factory=list)

    @field_validator("mode")
    @classmethod
    def _mode_available(cls, mode: str) -> str:
        if mode == "emulate":
            raise ValueError(
                "mode 'emulate' (Ray actors with real tensors) is reserved for a later "
                "release; use 'simulate'"
            )
        return mode

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


class Cell(_Frozen):
    """One point of a suite's grid: the unit of scheduling, storage and resume."""

    model: ModelSpec
    compressor: CompressorSpec
    network: Network
    cluster: Cluster
    strategy: Strategy
    fusion: Fusion = "ddp"
    device: DeviceName = "v100"
    mode: Literal["simulate"] = "simulate"
    seed: int = 0

    @model_validator(mode="after")
    def _valid_pairs(self) -> Cell:
        """The strategy takes this compressor and this cluster (`config.strategies`): a
        strategy without a compressor runs with `none` and one with its own compressor
        with that kind, as in a grid; a pair a grid would drop is an error."""
        problems = check_cell(self.strategy, self.compressor, self.cluster.cpu_servers)
        if problems:
            raise ValueError("; ".join(problems))
        spec, _ = pair_compressor(self.strategy, self.compressor)
        if spec != self.compressor:
            return self.model_copy(update={"compressor": spec})
        return self

    def canonical_json(self) -> str:
        """JSON with default values left out, so adding a field with a default later does
        not change the id of existing cells (DESIGN §5 On disk)."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @property
    def id(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def flat(self) -> dict[str, Any]:
        """The cell's config columns, as Records and filters see them."""
        n, c = self.network, self.cluster
        return {
            "model": self.model.name,
            "batch_size": self.model.batch_size,
            "seq_len": self.model.seq_len,
            "profile": self.model.profile,
            "compressor": self.compressor.label(),
            "compressor_kind": self.compressor.kind,
            "compressor_params": json.dumps(self.compressor.params(), sort_keys=True),
            "strategy": self.strategy,
            "fusion": self.fusion,
            "machines": c.machines,
            "gpus_per_machine": c.gpus_per_machine,
            "gpus": c.gpus,
            "cpu_servers": c.cpu_servers,
            "cpu_cores": c.cpu_cores,
            "summation_gbs": c.summation_gbs,
            "intra": n.intra,
            "intra_gbs": n.intra_gbs,
            "intra_latency_us": n.intra_latency_us,
            "intra_efficiency": n.intra_efficiency,
            "inter_gbps": n.inter_gbps,
            "inter_latency_us": n.inter_latency_us,
            "inter_efficiency": n.inter_efficiency,
            "nics_per_machine": n.nics_per_machine,
            "server_gbps": n.server_gbps,
            "device": self.device,
            "mode": self.mode,
            "seed": self.seed,
        }
