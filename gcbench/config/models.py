"""Pydantic models of a suite and of one cell of its grid.

Every model is frozen and forbids unknown keys, so a typo is an error with a line number
rather than a silently ignored setting. Defaults that depend on other fields (a model's
batch size, a link's bandwidth) are filled in before validation, so a cell states every
value it runs with.

Every number has a range (the `MAX_*` and `MIN_*` constants below): floats are finite
(JSON has no infinity, so an infinite value would not survive the trip to a Ray worker)
and within what the simulator computes without overflow; integers fit in 64 bits (the
results' columns) and within what the simulator runs in reasonable time. A cell that
validates runs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gcbench import strategies
from gcbench.compress.specs import ADDITIVE, CompressorSpec, NoneSpec
from gcbench.config.fields import (
    INT64_MAX,
    INT64_MIN,
    MAX_CORES,
    MAX_GPUS,
    MAX_GPUS_PER_MACHINE,
    WHOLE,
    DeviceName,
    Frozen,
    Rate,
    Whole,
    suite_path,
)
from gcbench.config.filters import FUSION_PATTERN, Filter, strategy_name
from gcbench.config.network_profile import Network
from gcbench.config.train import Train
from gcbench.errors import PlanError
from gcbench.zoo.catalog import MODELS
from gcbench.zoo.devices import DEVICES, PRECISIONS
from gcbench.zoo.profile_io import MAX_BATCH, MAX_SEQ_LEN


def _as_list(value: Any) -> Any:
    """Grid axes accept a single value where a list of one is meant."""
    return value if isinstance(value, list) else [value]


# A model's math: torch's defaults, TF32 matmuls too, or automatic mixed precision. Under
# AMP (torch.amp docs, "Automatic Mixed Precision"): autocast runs eligible ops in fp16 or
# bf16 while the parameters, and so their gradients, stay fp32; DDP therefore reduces
# fp32 buckets, and the gradients' bytes on the wire do not change with the precision
# (compute does: `zoo.devices.Device.math`). `cluster.measure` runs AMP so.
Precision = Literal["fp32", "tf32", "amp-fp16", "amp-bf16"]
assert get_args(Precision) == PRECISIONS


class ModelSpec(Frozen):
    """A zoo model and its per-GPU batch size (default: the zoo's pinned one), or a model
    whose profile comes from a file (`gcbench profile` output, a CSV of ready times, or
    `collection.json#name`)."""

    name: str
    # bounds inside the Optional, where the JSON schema states them as minimum/maximum
    batch_size: Annotated[int, Field(gt=0, le=MAX_BATCH), WHOLE] | None = None
    seq_len: Annotated[int, Field(gt=0, le=MAX_SEQ_LEN), WHOLE] | None = None
    profile: str | None = Field(
        None,
        description="a profile file used instead of the zoo's FLOP-based profile "
        "(relative to the suite file)",
    )
    profile_sha256: str | None = Field(
        None, description="filled in from the profile file so results follow its content"
    )
    precision: Precision = Field(
        "fp32",
        description="fp32: torch's defaults (fp32 parameters, TF32 convolutions through "
        "cuDNN on GPUs that have TF32, fp32 matmuls); tf32: matmuls in TF32 too; amp-fp16, "
        "amp-bf16: automatic mixed precision (autocast, fp32 parameters and gradients)",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, str):
            data = {"name": data}
        if not (isinstance(data, dict) and isinstance(data.get("name"), str)):
            return data
        if isinstance(data.get("profile"), str) and data.get("precision", "fp32") != "fp32":
            raise ValueError(f"precision {data['precision']}: the times come from the "
                             "profile file, measured at the precision it was run at")  # fmt: skip
        if isinstance(data.get("profile"), str):
            return _fill_from_profile(data, (info.context or {}).get("base_dir"))
        model = MODELS.get(data["name"])
        if model is None:
            close = difflib.get_close_matches(data["name"], list(MODELS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown model {data['name']!r}{hint}; valid: {', '.join(sorted(MODELS))}"
            )
        if model.seq_len is None and data.get("seq_len") is not None:
            raise ValueError(f"seq_len: {data['name']} is not a sequence model")
        return {"batch_size": model.batch_size, "seq_len": model.seq_len, **data}


def _check_precision(model: ModelSpec, device: str, measured_compute: bool) -> None:
    """BF16 needs the tensor cores of Ampere and later GPUs; the actors' measured compute
    runs in fp32."""
    precision = model.precision
    if precision == "amp-bf16" and not DEVICES[device].bf16():
        raise ValueError(f"{model.name}: precision amp-bf16: {device} has no BF16 tensor "
                         "cores (Ampere and later have)")  # fmt: skip
    if precision != "fp32" and measured_compute:
        raise ValueError(f"{model.name}: precision {precision}: compute_time: measured runs "
                         "the model in fp32 on the actors")  # fmt: skip


def _fill_from_profile(data: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """Resolve the profile path, read the file once to check it, and take the batch size
    and sequence length it was measured at (a CSV states neither: the zoo's or the suite's)."""
    from gcbench.errors import ConfigError
    from gcbench.zoo.profile_io import read_profile_digest

    spec = data["profile"]
    path_part, sep, selector = spec.partition("#")
    path = suite_path(path_part, base_dir)
    try:  # one bounded read: the profile and the sha256 of the very bytes it came from
        prof, digest = read_profile_digest(f"{path}{sep}{selector}")
    except ConfigError as e:
        raise ValueError(e.messages[0]) from None
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


MAX_COSTS_BYTES = 4 * 1024 * 1024  # a table of every kind at 9 sizes is ~40 kB


def _check_costs_device(costs: CompressorCosts | None, device: str) -> None:
    """A measured cost table must be of the device it is used for."""
    if costs is not None and costs.device_key != device:
        raise ValueError(
            f"the compressor cost table {costs.file} was measured on {costs.device_key}, "
            f"and the device is {device}"
        )


class CompressorCosts(Frozen):
    """A compressor cost table measured on a GPU (`gcbench bench compressors
    --torch-device cuda --out FILE`), used instead of the device's roofline table for the
    compression and decompression a cell runs on its GPUs. The path is relative to the
    suite file; its sha256 is filled in so that results follow the file's content, and
    the GPU it was measured on (`device_key`) must be the cell's device."""

    file: str = Field(description="the table's path (relative to the suite file)")
    sha256: str | None = Field(None, description="filled in from the file")
    device_key: str | None = Field(None, description="filled in: the GPU measured")

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, str):
            data = {"file": data}
        if not (isinstance(data, dict) and isinstance(data.get("file"), str)):
            return data
        path = suite_path(data["file"], (info.context or {}).get("base_dir"))
        table, sha256 = read_costs(path)
        if table.device_key is None:
            raise ValueError(
                f"{path}: measured on {table.device}, which is not in the device table; "
                "it names no device a cell can use"
            )
        return {"file": str(path), "sha256": sha256, "device_key": table.device_key}


def read_costs(path: Path) -> tuple[Any, str]:
    """A compressor cost table file (one bounded read) and the sha256 of its bytes;
    ValueError, one line, when it cannot be read or is not a table."""
    from gcbench.compress.costs import table_from_json
    from gcbench.errors import ConfigError
    from gcbench.files import read_limited

    try:
        raw = read_limited(path, MAX_COSTS_BYTES, "compressor cost table")
    except ConfigError as e:
        raise ValueError(e.messages[0]) from None
    try:
        table = table_from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a gcbench compressor cost table ({e})") from None
    return table, hashlib.sha256(raw).hexdigest()


class Cluster(Frozen):
    """`machines` x `gpus_per_machine` GPU workers plus `cpu_servers` CPU machines."""

    machines: Whole = Field(ge=1, le=MAX_GPUS)
    gpus_per_machine: Whole = Field(8, ge=1, le=MAX_GPUS_PER_MACHINE)
    cpu_servers: Whole = Field(0, ge=0, le=MAX_GPUS)
    cpu_cores: Whole = Field(16, ge=1, le=MAX_CORES, description="CPU-compression pool per machine")
    cpu_gbs: Rate | None = Field(
        None,
        description="GB/s of memory bandwidth of one machine's CPUs (all sockets), shared "
        "by its cpu_cores; CPU compression slows where a core gets less than the measured "
        "host's 9.4 (default: as that host)",
    )
    summation_gbs: Rate | None = Field(
        None,
        description="GB/s each CPU server sums (input bytes); default: never the bottleneck",
    )

    @model_validator(mode="after")
    def _not_too_many_gpus(self) -> Cluster:
        if self.gpus > MAX_GPUS:
            raise ValueError(
                f"{self.machines:,} machines × {self.gpus_per_machine} GPUs = {self.gpus:,} "
                f"GPUs; at most {MAX_GPUS:,} (2^20) are simulated"
            )
        return self

    @property
    def gpus(self) -> int:
        return self.machines * self.gpus_per_machine


# The schema lists the strategies registered when it is written (the built-ins, for the
# committed schema/suite.schema.json)
Strategy = Annotated[
    str,
    PlainValidator(strategy_name),
    WithJsonSchema({"type": "string", "enum": strategies.names(plugins=False)}),
]
Fusion = Annotated[
    str,
    Field(
        pattern=FUSION_PATTERN,
        description="ddp (1 MiB then 25 MiB buckets), tensor, or fixed:<bytes>",
    ),
]
# Strategies that use no compressor run once, with compressor `none` (DESIGN §4).

CollectiveName = Literal[
    "allreduce",
    "reduce_scatter",
    "allgather",
    "alltoall",
    "reduce",
    "broadcast",
    "gather",
    "pushpull",
    "byteps",
]


def _some_collective(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if value is not None and not value:
        raise ValueError("give at least one collective")
    return value


class Constraints(Frozen):
    """What the planner strategies (bytecomp, bytecomp-greedy, upper-bound, brute-force)
    may choose (`gcbench.plan.space`; ByteComp §4.2: users "add constraints to prune the
    decision tree"). Part of the cell id; other strategies take none."""

    space: Literal["named", "all"] = Field(
        "all",
        description="all: every GPU path of ByteComp's decision tree (174 for a "
        "non-additive compressor) and fp16; named: fp32, fp32-2level, fp16, allgather, "
        "allgather-2level (faster to plan)",
    )
    max_compressions: Annotated[int, Field(ge=0, le=8), WHOLE] | None = Field(
        None, description="compression operations per tensor at most (0: none)"
    )
    # non-empty checked after the items (a min_length would repeat a bad item's error)
    collectives: Annotated[tuple[CollectiveName, ...] | None, AfterValidator(_some_collective)] = (
        Field(None, description="the collectives an option may use")
    )
    levels: Literal["any", "flat", "hierarchical"] = "any"
    gpu_only: bool = Field(False, description="no CPU offload (Algorithm 2 skipped)")

    def label(self) -> str:
        """The constraints set, as `gcbench plan --constraints` takes them ('' if none)."""
        parts = []
        for k, v in self.model_dump(exclude_defaults=True).items():
            if isinstance(v, (list, tuple)):
                v = ",".join(v)
            elif isinstance(v, bool):
                v = str(v).lower()
            parts.append(f"{k}={v}")
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> Constraints:
        """`key=value` pairs separated by spaces (lists comma-separated; a bare key is
        `key=true`), e.g. 'space=all max_compressions=1 collectives=allreduce,allgather
        gpu_only'. A key given twice is a ValueError (the last would win silently)."""
        data: dict[str, Any] = {}
        for part in text.split():
            key, sep, value = part.partition("=")
            if not sep:
                value = "true"
            if key in data:
                raise ValueError(f"{key}: given twice; a key may appear once")
            if key == "collectives":
                data[key] = value.split(",")
            elif key == "max_compressions" and value.lstrip("-").isdigit():
                data[key] = int(value)  # a count: models refuse text there
            else:
                data[key] = value
        return cls.model_validate(data)


Mode = Literal["simulate", "emulate", "measure", "train"]
_NO_CONTENTION = (
    "compute_contention: mode emulate does not apply it (its actors time their own "
    "timelines; the fixed point runs over a whole cell's); use mode: simulate"
)


def _check_train(mode: str, train: Train | None) -> None:
    """`mode: train` needs its `train:` section, and only it takes one."""
    if mode == "train" and train is None:
        raise ValueError("mode: train needs a `train:` section (dataset, steps, ...): a "
                         "suite's, run by gcbench run (suites/convergence.yaml)")
    if mode != "train" and train is not None:
        raise ValueError("a `train:` section applies to mode: train")


def _axis(item: Any) -> Any:
    return Annotated[list[item], Field(min_length=1), BeforeValidator(_as_list)]


class Grid(Frozen):
    """The axes whose cross product is the suite's cells."""

    model: _axis(ModelSpec)  # type: ignore[valid-type]
    compressor: _axis(CompressorSpec) = Field(default_factory=lambda: [NoneSpec(kind="none")])  # type: ignore[valid-type]
    network: _axis(Network)  # type: ignore[valid-type]
    cluster: _axis(Cluster)  # type: ignore[valid-type]
    strategy: _axis(Strategy) = Field(default_factory=lambda: ["fp32"])  # type: ignore[valid-type]
    fusion: _axis(Fusion) = Field(default_factory=lambda: ["ddp"])  # type: ignore[valid-type]




class Suite(Frozen):
    """A suite file: a grid of cells and how to run them."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    description: str = ""
    mode: Mode = Field(
        "simulate",
        description="simulate (the timeline model), emulate (Ray actors, one per GPU, "
        "with real gradients, compressors and collectives), measure (the zoo model "
        "trained with DDP on one Ray actor per GPU, the compressor as a DDP hook, timed) "
        "or train (measure's workers training on the `train:` section's dataset, its "
        "loss and accuracy logged)",
    )
    clock: Literal["virtual", "wall"] = Field(
        "virtual",
        description="emulate: the clock iterations are timed on: virtual (each actor's "
        "simulated timeline with the payloads it sent and the cell's link model) or wall "
        "(the real iteration on this Ray cluster, compute waited out from the profile)",
    )
    compute_time: Literal["profile", "measured"] = Field(
        "profile",
        description="emulate: where compute times and gradients come from: profile (the "
        "profile's times, synthetic heavy-tailed gradients) or measured (a real forward and "
        "backward of the zoo model on each actor: its times and its gradients)",
    )
    seed: Whole = Field(0, ge=INT64_MIN, le=INT64_MAX)
    repetitions: Whole = Field(1, ge=1, le=1000)
    device: DeviceName = "v100"
    compressor_costs: CompressorCosts | None = Field(
        None,
        description="a GPU compressor cost table (gcbench bench compressors --torch-device "
        "cuda --out FILE) for the suite's device, instead of its roofline",
    )
    grid: Grid
    # after `grid`: its validator reads the grid's strategies and compressors
    constraints: Constraints | None = Field(
        None,
        description="what the planner strategies may choose (space, max_compressions, "
        "collectives, levels, gpu_only); other strategies' cells take none",
    )
    train: Train | None = Field(None, description="mode: train: what and how the cells train")
    include: list[Filter] = Field(default_factory=list)
    exclude: list[Filter] = Field(default_factory=list)

    @model_validator(mode="after")
    def _costs_for_this_device(self) -> Suite:
        _check_costs_device(self.compressor_costs, self.device)
        return self

    @model_validator(mode="after")
    def _train_section(self) -> Suite:
        _check_train(self.mode, self.train)
        return self

    @field_validator("grid")
    @classmethod
    def _precision_here(cls, grid: Grid, info: ValidationInfo) -> Grid:
        """Each model's precision on the suite's device (`_check_precision`)."""
        device = info.data.get("device")
        measured = info.data.get("mode") == "emulate" and (
            info.data.get("compute_time") == "measured"
        )
        if isinstance(device, str):  # (a bad device is its own error)
            for model in grid.model:
                _check_precision(model, device, measured)
        if info.data.get("mode") == "emulate":
            for i, network in enumerate(grid.network):
                if network.compute_contention > 0:
                    raise ValueError(f"network {i}: {_NO_CONTENTION}")
        return grid

    @field_validator("constraints")
    @classmethod
    def _constraints_for_planners(
        cls, constraints: Constraints | None, info: ValidationInfo
    ) -> Constraints | None:
        """The grid has a planner to constrain, and the constraints leave each planner of
        the grid an option with each of its compressors."""
        grid = info.data.get("grid")
        if constraints is None or grid is None:
            return constraints
        planners = [s for s in grid.strategy if s in strategies.planner_names()]
        if not planners:
            known = ", ".join(sorted(strategies.planner_names()))
            raise ValueError(f"the grid has no planner strategy to constrain ({known})")
        from gcbench.plan.space import check_constraints

        for strategy in planners:
            for additive in sorted({c.kind in ADDITIVE for c in grid.compressor}):
                try:
                    check_constraints(constraints, strategy, additive)
                except PlanError as e:
                    raise ValueError(f"{strategy}: {e}") from None
        return constraints

    @field_validator("clock", "compute_time")
    @classmethod
    def _emulation_only(cls, value: str, info: ValidationInfo) -> str:
        """The emulation settings apply to emulation, refused elsewhere with the line."""
        if info.data.get("mode") != "emulate" and value not in ("virtual", "profile"):
            raise ValueError(f"{info.field_name} applies to mode: emulate")
        return value

    @property
    def emulated(self) -> bool:
        """The suite's cells run on Ray actors (`Cell.emulated`)."""
        return self.mode == "emulate"

    @property
    def measured_ddp(self) -> bool:
        """The suite's cells train for real with DDP (`Cell.measured_ddp`)."""
        return self.mode == "measure"

    @property
    def trained(self) -> bool:
        """The suite's cells train on a dataset (`Cell.trained`)."""
        return self.mode == "train"

    def how(self) -> dict[str, Any]:
        """How the suite's cells run, as their fields: mode, clock, compute time and, for
        `mode: train`, the train section."""
        how = {"mode": self.mode, "clock": self.clock, "compute_time": self.compute_time}
        return {**how, "train": self.train} if self.train is not None else how

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


class Cell(Frozen):
    """One point of a suite's grid: the unit of scheduling, storage and resume."""

    model: ModelSpec
    compressor: CompressorSpec
    network: Network
    cluster: Cluster
    strategy: Strategy
    fusion: Fusion = "ddp"
    device: DeviceName = "v100"
    mode: Mode = "simulate"
    # emulate only (issue #14): the clock the iteration is timed on, and where compute
    # and (de)compression times come from
    clock: Literal["virtual", "wall"] = "virtual"
    compute_time: Literal["profile", "measured"] = "profile"
    seed: Whole = Field(0, ge=INT64_MIN, le=INT64_MAX)
    compressor_costs: CompressorCosts | None = None
    constraints: Constraints | None = None
    train: Train | None = None  # mode: train only

    @model_validator(mode="before")
    @classmethod
    def _device_links(cls, data: Any, info: ValidationInfo) -> Any:
        """An NVLink machine without a rate moves at its device's NVLink rate (`Network.
        intra_rate`), stated in the cell so that its id follows it."""
        if not isinstance(data, dict) or not isinstance(data.get("device", "v100"), str):
            return data
        net = data.get("network")
        if isinstance(net, dict) and net.get("intra_gbs") is None:
            try:
                net = Network.model_validate(net, context=info.context)
            except ValidationError:
                return data  # its own errors, where the field validates
        if isinstance(net, Network) and net.intra_gbs is None:
            rate = net.intra_rate(data.get("device", "v100"))
            return {**data, "network": net.model_copy(update={"intra_gbs": rate})}
        return data

    @model_validator(mode="before")
    @classmethod
    def _planner_defaults(cls, data: Any) -> Any:
        """A planner cell always holds constraints (the defaults where none are given), so
        that its id says what its planner searched."""
        if isinstance(data, dict) and data.get("constraints") is None:
            strategy = data.get("strategy")
            found = strategies.find(strategy) if isinstance(strategy, str) else None
            if found is not None and found.planner:
                return {**data, "constraints": {}}
        return data

    @model_validator(mode="after")
    def _constraints_leave_options(self) -> Cell:
        """Only a planner takes constraints, and they must leave it an option."""
        if self.constraints is None:
            return self
        if not strategies.get(self.strategy).planner:
            raise ValueError(
                f"constraints apply to the planner strategies "
                f"({', '.join(sorted(strategies.planner_names()))}),"
                f" not {self.strategy}"
            )
        from gcbench.plan.space import check_constraints

        try:
            check_constraints(self.constraints, self.strategy, self.compressor.kind in ADDITIVE)
        except PlanError as e:
            raise ValueError(str(e)) from None
        return self

    @model_validator(mode="after")
    def _emulation(self) -> Cell:
        """`clock` and `compute_time` belong to emulation; GPU contention does not (its fixed
        point runs over a whole cell's timeline, `backends.simulate.contended`)."""
        if self.mode != "emulate":
            if self.clock != "virtual" or self.compute_time != "profile":
                raise ValueError("clock and compute_time apply to mode: emulate")
        elif self.network.compute_contention > 0:
            raise ValueError(f"network: {_NO_CONTENTION}")
        return self

    @model_validator(mode="after")
    def _train_section(self) -> Cell:
        _check_train(self.mode, self.train)
        return self

    @model_validator(mode="after")
    def _costs_for_this_device(self) -> Cell:
        _check_costs_device(self.compressor_costs, self.device)
        return self

    @model_validator(mode="after")
    def _precision_here(self) -> Cell:
        _check_precision(self.model, self.device, self.measured_compute)
        return self

    @model_validator(mode="after")
    def _valid_pairs(self) -> Cell:
        """The strategy takes this compressor and this cluster (`gcbench.strategies`): a
        strategy without a compressor runs with `none` and one with its own compressor
        with that kind, as in a grid; a pair a grid would drop is an error."""
        problems = strategies.check_cell(self.strategy, self.compressor, self.cluster.cpu_servers)
        if problems:
            raise ValueError("; ".join(problems))
        spec, _ = strategies.pair_compressor(self.strategy, self.compressor)
        if spec != self.compressor:
            return self.model_copy(update={"compressor": spec})
        return self

    # How the cell runs. `mode`, `clock` and `compute_time` are compared with their values
    # here and nowhere else: the backend is chosen by `emulated` (`runner.backends`), the
    # emulator times by `wall_clock` and computes gradients by `measured_compute`.
    @property
    def emulated(self) -> bool:
        """On Ray actors with real tensors (`mode: emulate`), else simulated."""
        return self.mode == "emulate"

    @property
    def measured_ddp(self) -> bool:
        """Trained for real with DDP on Ray actors, the compressor a DDP hook, and timed
        (`mode: measure`)."""
        return self.mode == "measure"

    @property
    def trained(self) -> bool:
        """Trained on the `train` section's dataset by measure's DDP workers, the loss
        and accuracy logged (`mode: train`)."""
        return self.mode == "train"

    @property
    def wall_clock(self) -> bool:
        """Emulated and timed as it ran (`clock: wall`), else on the virtual clock."""
        return self.mode == "emulate" and self.clock == "wall"

    @property
    def measured_compute(self) -> bool:
        """Emulated with a real forward and backward on each actor and real gradients
        (`compute_time: measured`), else the profile's times and synthetic gradients."""
        return self.mode == "emulate" and self.compute_time == "measured"

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
        costs = None if self.compressor_costs is None else self.compressor_costs.file
        return {
            "model": self.model.name,
            "batch_size": self.model.batch_size,
            "seq_len": self.model.seq_len,
            "precision": self.model.precision,
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
            "cpu_gbs": c.cpu_gbs,
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
            "network_profile": n.profile,
            "compute_scale": n.compute_scale,
            "iteration_overhead_us": n.iteration_overhead_us,
            "bucket_overhead_us": n.bucket_overhead_us,
            "compute_jitter": n.compute_jitter,
            "compute_contention": n.compute_contention,
            "collectives": n.collectives,
            "nccl_ll_bandwidth": n.nccl_ll_bandwidth,
            "nccl_ll128_bandwidth": n.nccl_ll128_bandwidth,
            "inter_overrides": None if not n.overrides else json.dumps(
                {k: v.model_dump(exclude_none=True) for k, v in n.overrides.items()},
                sort_keys=True,
            ),
            "device": self.device,
            "mode": self.mode,
            "clock": self.clock if self.mode == "emulate" else None,
            "compute_time": self.compute_time if self.mode == "emulate" else None,
            "seed": self.seed,
            "compressor_costs": costs,
            "constraints": None if self.constraints is None else self.constraints.label(),
            **(Train.no_columns() if self.train is None else self.train.flat()),
        }
