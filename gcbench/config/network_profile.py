"""Network profiles: a testbed's links as one YAML file, named by a suite or a command.

    name: bytecomp-nvlink-100g
    source: where the numbers come from (a paper's table, a measurement, `gcbench calibrate`)
    description: optional words for people
    network:                      # any Network field: intra, intra_gbs, intra_latency_us,
      intra: nvlink               # intra_efficiency, inter_gbps, inter_latency_us,
      inter_gbps: 100             # inter_efficiency, nics_per_machine, server_gbps
      inter_efficiency: 0.7
    compute_scale: 1.0            # optional: multiplies the device's compute times
    overrides:                    # optional: per collective, on the inter-machine link
      allgather: {inter_efficiency: 0.5, inter_latency_us: 40}
    fit: {...}                    # optional: what `gcbench calibrate` fitted, and how well

A suite names one in a network entry, `network: {profile: NAME-or-PATH, inter_gbps: 25}`
(a path is relative to the suite file), and `gcbench simulate --network NAME-or-PATH`;
fields given beside it override the profile's. Shipped presets live in
`gcbench/data/networks/` (`gcbench networks` lists them). The profile's content is part
of the cell id (its sha256), so results follow the file.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gcbench.comm.collectives import COLLECTIVES
from gcbench.comm.nccl import Protocols
from gcbench.compress.specs import NOT_BOOL, Number
from gcbench.config.fields import MAX_NICS, Efficiency, Frozen, Latency, Rate, Whole, suite_path
from gcbench.config.loader import format_error, parse_yaml
from gcbench.errors import ConfigError
from gcbench.files import read_limited

MAX_BYTES = 256 * 1024  # a profile with its fit report is a few kB
# The Network fields a profile's `network:` may not set: the profile's own (it names
# itself, its compute scale and overrides are top-level keys).
PROFILE_OWN = ("profile", "profile_sha256", "compute_scale", "overrides")


def network_fields() -> list[str]:
    """The link and machine fields a profile's `network:` sets: every `Network` field but
    the profile's own."""
    return [f for f in Network.model_fields if f not in PROFILE_OWN]


class InterOverride(BaseModel):
    """One collective's own inter-machine efficiency and latency (the others keep the
    link's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    inter_efficiency: Annotated[float, Field(gt=0, le=1), NOT_BOOL] | None = None
    inter_latency_us: Annotated[float, Field(ge=0, le=1e6), NOT_BOOL] | None = None


# Line rates (GB/s per GPU, one direction) used when a suite gives none: a PCIe 3.0 x16
# slot 15.75 GB/s; NVLink the cell's device's (`zoo.devices.Device.nvlink_gbs`: a V100's 6
# links x 25 GB/s, an A100's 300, an H100's 450), 150 where the device has none
# (`intra_rate`).
INTRA_DEFAULT_GBS = {"nvlink": 150.0, "pcie": 15.75}
# The simulator's collectives (`gcbench.comm.collectives`): what a network profile's
# per-collective overrides name.
LinkCollective = Literal[
    "allreduce", "reduce_scatter", "allgather", "allgather_payload", "alltoall", "broadcast",
    "reduce", "gather",
]  # fmt: skip
assert set(LinkCollective.__args__) == set(COLLECTIVES)  # type: ignore[attr-defined]


# The Network fields of `gcbench.comm.nccl.Protocols`, in its order, and their type: a
# multiple of what NCCL's tuning model gives
NCCL_PROTOCOL_FIELDS = ("nccl_ll_bandwidth", "nccl_ll128_bandwidth")
ProtocolFactor = Annotated[float, Field(gt=0, le=100), NOT_BOOL]


class Network(Frozen):
    """Links of one machine and between machines (DESIGN §5 Network and cluster).

    Efficiency is achieved bus bandwidth / line rate; latency is per collective step.
    """

    intra: Literal["nvlink", "pcie"] = "nvlink"
    intra_gbs: Rate | None = Field(None, description="GB/s per GPU inside a machine")
    intra_latency_us: Latency = 5.0
    intra_efficiency: Efficiency = 0.8
    inter_gbps: Rate = Field(description="Gbit/s per machine between machines")
    inter_latency_us: Latency = 25.0
    inter_efficiency: Efficiency = 0.7
    nics_per_machine: Whole = Field(1, ge=1, le=MAX_NICS)
    server_gbps: Rate | None = Field(
        None, description="Gbit/s of each CPU server's NICs (default: inter_gbps)"
    )
    profile: str | None = Field(
        None,
        description="a network profile: a shipped preset's name (`gcbench networks`) or a "
        "YAML file (relative to the suite file); fields given beside it override it",
    )
    profile_sha256: str | None = Field(
        None, description="filled in from the profile so results follow its content"
    )
    compute_scale: Number = Field(
        1.0,
        gt=0,
        le=1000,
        description="multiplies the device's compute times (a calibrated testbed whose GPUs "
        "the device table misjudges)",
    )
    overrides: dict[LinkCollective, InterOverride] | None = Field(
        None, description="per collective: its own inter-machine efficiency and latency"
    )
    collectives: Literal["ring", "nccl"] = Field(
        "ring",
        description="how a collective is costed: ring (every size a ring of the link's latency "
        "steps and bandwidth) or nccl (the fastest of NCCL's ring and tree algorithms and its "
        "LL, LL128 and Simple protocols for the size, scaled to the link's numbers; "
        "`gcbench.comm.nccl`)",
    )
    nccl_ll_bandwidth: ProtocolFactor = Field(
        1.0,
        description="multiplies the bus bandwidth NCCL's tuning model gives its LL protocol "
        "(half of Simple's on a ring; `collectives: nccl` only); default 1, fitted by "
        "`gcbench calibrate` from an nccl-tests sweep across sizes",
    )  # fmt: skip
    nccl_ll128_bandwidth: ProtocolFactor = Field(
        1.0,
        description="multiplies the bus bandwidth of NCCL's LL128 protocol (0.92 of Simple's "
        "on a ring; NVLink machines; `collectives: nccl` only); default 1, fitted by "
        "`gcbench calibrate`",
    )  # fmt: skip
    iteration_overhead_us: Number = Field(
        0.0,
        ge=0,
        le=1e7,
        description="a fixed cost every iteration pays beyond the profile's layers (the "
        "framework's own work: DDP's bookkeeping, launches, Python); default none, fitted by "
        "`gcbench calibrate --from` on a measured run",
    )
    bucket_overhead_us: Number = Field(
        0.0,
        ge=0,
        le=1e7,
        description="a fixed cost of each bucket's communication (its launch and the hook's "
        "bookkeeping); default none, fitted by `gcbench calibrate --from`",
    )
    compute_jitter: Number = Field(
        0.0,
        ge=0,
        le=1,
        description="the workers' compute times' coefficient of variation: a synchronous step "
        "waits for the slowest of n, E[max] = mean x (1 + jitter x e_n), e_n the expected "
        "maximum of n standard normals; default none",
    )
    compute_contention: Number = Field(
        0.0,
        ge=0,
        le=2,
        description="how much slower backward computes while a GPU communication kernel "
        "(NCCL's) runs beside it: work goes at 1 / (1 + contention) of its speed during the "
        "overlap; default none, fitted by `gcbench calibrate --from` (a multi-GPU cell whose "
        "communication overlaps backward, beside a one-GPU cell)",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and isinstance(data.get("profile"), str):
            data = apply_profile(data, (info.context or {}).get("base_dir"))
        if isinstance(data, dict) and data.get("intra_gbs") is None:
            if data.get("intra", "nvlink") == "pcie":  # NVLink's: the cell's device's
                data = {**data, "intra_gbs": INTRA_DEFAULT_GBS["pcie"]}
        return data

    @field_validator(*NCCL_PROTOCOL_FIELDS)
    @classmethod
    def _protocols_need_nccl(cls, value: float, info: ValidationInfo) -> float:
        if value != 1.0 and info.data.get("collectives", "ring") != "nccl":
            raise ValueError("corrects NCCL's protocols: it needs collectives: nccl")
        return value

    def protocols(self) -> Protocols:
        """The per-protocol corrections to NCCL's model (`gcbench.comm.nccl.Protocols`)."""
        return Protocols(*(getattr(self, name) for name in NCCL_PROTOCOL_FIELDS))

    def intra_rate(self, device: str | None = None) -> float:
        """GB/s per GPU inside a machine: as given, else the default of its kind (for
        NVLink, `device`'s rate where it has NVLink)."""
        if self.intra_gbs is not None:
            return self.intra_gbs
        if self.intra == "nvlink" and device is not None:
            from gcbench.zoo.devices import DEVICES

            rate = DEVICES[device].nvlink_gbs if device in DEVICES else None
            if rate is not None:
                return rate
        return INTRA_DEFAULT_GBS[self.intra]



class NetworkProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = Field(min_length=1, max_length=100)
    source: str = Field(min_length=1, description="where the numbers come from")
    description: str | None = None
    network: dict[str, Any] = Field(default_factory=dict)
    compute_scale: Number = Field(1.0, gt=0, le=1000)
    overrides: dict[str, InterOverride] = Field(default_factory=dict)
    fit: dict[str, Any] | None = None

    def model_post_init(self, _context: Any) -> None:
        fields = network_fields()
        unknown = sorted(set(self.network) - set(fields))
        if unknown:
            raise ValueError(
                f"network: unknown field(s) {', '.join(unknown)}; valid: {', '.join(fields)}"
            )
        problem = network_problem(self.network)
        if problem is not None:
            raise ValueError(f"network: {problem}")
        bad = sorted(set(self.overrides) - set(COLLECTIVES))
        if bad:
            raise ValueError(
                f"overrides: unknown collective(s) {', '.join(bad)}; "
                f"valid: {', '.join(COLLECTIVES)}"
            )


def network_error(fields: dict[str, Any], context: Any = None) -> Any:
    """The first mistake (pydantic's error: `loc`, `msg`, ...) in `fields` taken as a suite's
    network entry takes them (the line rate a stand-in where they give none), or None.
    `context`: the validation context (`base_dir` for a profile's relative path)."""
    try:
        Network.model_validate({"inter_gbps": 1.0, **fields}, context=context)
    except ValidationError as e:
        return e.errors()[0]
    return None


def network_problem(fields: dict[str, Any], context: Any = None) -> str | None:
    """`network_error` as words: `inter_efficiency: must be ≤ 1, got 2`."""
    from gcbench.config.loader import message

    err = network_error(fields, context)
    if err is None:
        return None
    at, said = ".".join(str(x) for x in err["loc"]), message(err, Network)
    return f"{at}: {said}" if at else said


def _is_name(spec: str) -> bool:
    """A preset's name rather than a file path."""
    return "/" not in spec and not spec.endswith((".yaml", ".yml"))


@lru_cache(maxsize=1)
def preset_names() -> list[str]:
    folder = resources.files("gcbench.data").joinpath("networks")
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


@lru_cache(maxsize=64)
def _preset_bytes(name: str) -> bytes | None:
    if name not in preset_names():
        return None
    return resources.files("gcbench.data").joinpath("networks", f"{name}.yaml").read_bytes()


def parse_network_profile(raw: bytes, where: str) -> NetworkProfile:
    """A profile from the bytes of its file; a mistake is a ValueError of one line that
    starts with `where`."""
    try:  # the suites' checks: safe tags, no alias bombs, no key given twice
        data, node = parse_yaml(raw, where)
    except ConfigError as e:
        raise ValueError(e.messages[0]) from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a network profile is a mapping (name, source, network, ...)")
    network = data.get("network")
    if isinstance(network, dict) and not set(network) & set(PROFILE_OWN):
        err = network_error(network)  # at its line (the profile's own check has none)
        if err is not None:
            raise ValueError(
                format_error(where, node, {**err, "loc": ("network", *err["loc"])}, Network)
            )
    try:
        return NetworkProfile.model_validate(data)
    except ValidationError as e:
        raise ValueError(format_error(where, node, e.errors()[0], NetworkProfile)) from None


@lru_cache(maxsize=64)
def _parsed(raw: bytes, named: str) -> tuple[NetworkProfile, str]:
    """The profile and sha256 of these bytes: every cell of a grid names the same file,
    so it is parsed once (keyed by its content, so an edited file is read anew)."""
    return parse_network_profile(raw, named), hashlib.sha256(raw).hexdigest()


def read_network_profile(
    spec: str, base_dir: Path | None = None
) -> tuple[NetworkProfile, str, str]:
    """(profile, how cells name it, sha256 of its bytes) for a preset's name or a file
    path (relative to `base_dir`, a suite file's folder). ValueError of one line on any
    mistake. The profile is shared between callers: read it, do not change it."""
    raw = _preset_bytes(spec) if _is_name(spec) else None
    named = spec
    if raw is None:
        path = suite_path(spec, base_dir)
        if _is_name(spec) and not os.path.lexists(path):
            raise ValueError(
                f"network profile {spec!r}: no preset of that name (presets: "
                f"{', '.join(preset_names())}) and no file {path}"
            )
        try:  # a regular file, bounded (a named pipe or /dev/zero: refused)
            raw = read_limited(path, MAX_BYTES, "network profile")
        except ConfigError as e:
            raise ValueError(e.messages[0]) from None
        named = str(path)
    profile, digest = _parsed(raw, named)
    return profile, named, digest


def apply_profile(data: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """A network entry that names a profile, with the profile's values under the ones the
    entry gives, its canonical name, sha256, compute scale and overrides."""
    profile, named, digest = read_network_profile(str(data["profile"]), base_dir)
    base = dict(profile.network)
    if "intra" in data and data["intra"] != base.get("intra", "nvlink"):
        base.pop("intra_gbs", None)  # another kind of machine: its own default rate
    if data.get("collectives", base.get("collectives", "ring")) != "nccl":
        for name in NCCL_PROTOCOL_FIELDS:  # corrections to a model the entry does not use
            base.pop(name, None)
    merged: dict[str, Any] = {**base, **data, "profile": named, "profile_sha256": digest}
    merged.setdefault("compute_scale", profile.compute_scale)
    if profile.overrides and "overrides" not in data:
        merged["overrides"] = {
            k: v.model_dump(exclude_none=True) for k, v in profile.overrides.items()
        }
    return merged


def dump_network_profile(profile: NetworkProfile) -> str:
    """The YAML text of a profile (what `gcbench calibrate --out` writes)."""
    data = profile.model_dump(exclude_none=True)
    if not data.get("overrides"):
        data.pop("overrides", None)
    if data.get("compute_scale") == 1.0:
        data.pop("compute_scale")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
