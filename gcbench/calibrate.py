"""`gcbench calibrate POINTS --out NET.yaml`: fit a network profile to measurements.

POINTS is a YAML file (or an nccl-tests output, read as is):

    name: our-cluster                 # the profile's name (default: the file's stem)
    source: nccl-tests on 4 x 8 A100, 2026-11-20      # said in the profile
    network: {profile: default, inter_gbps: 100}      # the testbed's line rates (any
                                                      # network field, or a profile)
    points:
      - {collective: allreduce, ranks: 16, bytes: 1048576, seconds: 0.00042, level: inter}
      - {nccl_tests: all_reduce_perf.log}             # its ranks, hosts and sizes read
      - {model: resnet50, batch: 32, device: v100, machines: 8, gpus_per_machine: 8,
         intra: nvlink, inter_gbps: 100, strategy: fp32, compressor: none,
         iteration_s: 0.131}          # or scaling_factor: ..., or throughput: ...

A collective timing is modelled as gcbench times a collective over `ranks` ranks on one
link (`gcbench.comm.collectives`: steps x latency + factor x bytes / (efficiency x line
rate)); `level: inter` is the machines' NICs (one rank per machine, or a flat ring over
every GPU of machines whose NICs are the bottleneck, as nccl-tests across nodes), `intra`
a machine's GPU link. An end-to-end point is a cell, simulated.

The fit minimises the sum of squared relative errors (a 30 us point counts as much as a
300 ms one; `weighting="absolute"`: of squared errors in seconds, for points that are
parts of one total, as `reproduce`'s per-bucket figure) over the parameters named by
`--fit` (default: `inter_efficiency`) within their bounds: exactly (weighted least
squares, `comm.calibrate.fit_affine`) when every point is a collective timing of one
level and only that level's efficiency and latency are fitted, else by coordinate
descent with golden-section searches, simulating every point at each step. A fit that
cannot be made says so in one line: no points, a parameter that moves no point's
prediction, a point gcbench cannot simulate. A parameter that ends on a bound is fitted
but flagged (`bound_hits`), and so is one the points barely identify (`weak`: a 10%
change of it moves no prediction by 1%; latency from large messages alone). On points
made by gcbench's own model, the exact fit gives back the points and the parameters to
1e-6; the descent (it stops once a round gains under 1e-10 of the loss) the points to
1e-3 and the parameters it identifies to 1e-2: a parameter's valley with another of its
level can be long and flat. Tests check both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

from gcbench.comm.collectives import COLLECTIVES, Link, collective_s, cost_shape
from gcbench.comm.nccl import Protocols as NcclProtocols
from gcbench.comm.nccl import nccl_collective_s
from gcbench.comm.nccl_tests import MIN_MEASURED, is_nccl_output, parse_nccl_tests
from gcbench.config.network_profile import INTRA_DEFAULT_GBS, NCCL_PROTOCOL_FIELDS, NetworkProfile
from gcbench.errors import ConfigError, first_error

FITTABLE = ("inter_efficiency", "inter_latency_us", "intra_efficiency", "intra_latency_us",
            "compute_scale", "iteration_overhead_us", "bucket_overhead_us",
            "compute_jitter", "compute_contention", *NCCL_PROTOCOL_FIELDS)  # fmt: skip
BOUNDS: dict[str, tuple[float, float]] = {
    "inter_efficiency": (0.01, 1.0),
    "intra_efficiency": (0.01, 1.0),
    "inter_latency_us": (0.0, 10_000.0),
    "intra_latency_us": (0.0, 10_000.0),
    "compute_scale": (0.05, 20.0),
    "iteration_overhead_us": (0.0, 1e6),
    "bucket_overhead_us": (0.0, 1e5),
    "compute_jitter": (0.0, 1.0),
    "compute_contention": (0.0, 2.0),
    **dict.fromkeys(NCCL_PROTOCOL_FIELDS, (0.05, 20.0)),
}
METRICS = ("iteration_s", "scaling_factor", "throughput")
MAX_POINTS_BYTES = 16 * 2**20  # a points file or an nccl-tests output
NEED_INTER_GBPS = (
    "network: inter_gbps: give the line rate the inter-machine timings were measured at "
    "(POINTS' network: {inter_gbps: ...}, or --inter-gbps)"
)


class _Point(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class CollectivePoint(_Point):
    collective: str
    ranks: int = Field(ge=2, le=1_000_000)
    bytes: float = Field(gt=0, le=1e15)
    seconds: float = Field(ge=MIN_MEASURED, le=1e6)
    level: Literal["inter", "intra"] = "inter"
    # the machines the ranks span, for `collectives: nccl` (default: across machines one
    # rank a machine); must divide the ranks
    machines: int | None = Field(None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _known(self) -> CollectivePoint:
        name = self.collective.replace("-", "_").lower()
        if name not in COLLECTIVES:
            raise ValueError(
                f"unknown collective {self.collective!r}; valid: {', '.join(COLLECTIVES)}"
            )
        self.collective = name
        if self.machines is not None and (self.ranks % self.machines or (
                self.level == "intra" and self.machines != 1)):  # fmt: skip
            raise ValueError(
                f"machines: {self.machines} must divide ranks {self.ranks} (1 for level intra)"
            )
        return self


class NcclPoint(_Point):
    nccl_tests: str = Field(description="an nccl-tests output file (relative to POINTS)")
    collective: str | None = None  # default: from the file's header, else allreduce
    ranks: int | None = Field(None, ge=2)  # default: the file's "# Rank" lines
    level: Literal["inter", "intra"] | None = None  # default: inter when 2+ hosts


class CellPoint(_Point):
    model: str
    batch: int | None = Field(None, gt=0)
    seq_len: int | None = Field(None, gt=0)
    device: str = "v100"
    machines: int = Field(ge=1)
    gpus_per_machine: int = Field(8, ge=1)
    intra: Literal["nvlink", "pcie"] | None = None
    inter_gbps: float | None = Field(None, gt=0)
    strategy: str = "fp32"
    compressor: str = "none"
    iteration_s: float | None = Field(None, ge=MIN_MEASURED)
    scaling_factor: float | None = Field(None, ge=MIN_MEASURED)
    throughput: float | None = Field(None, ge=MIN_MEASURED)

    @model_validator(mode="after")
    def _one_metric(self) -> CellPoint:
        given = [m for m in METRICS if getattr(self, m) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(METRICS)} (got {len(given)})")
        return self

    @property
    def metric(self) -> str:
        return next(m for m in METRICS if getattr(self, m) is not None)

    @property
    def measured(self) -> float:
        return float(getattr(self, self.metric))


def _kind(value: Any) -> str:
    """Which kind of point a mapping is (the tags name no key, so an error's location in
    the file skips them)."""
    if isinstance(value, NcclPoint):
        return "nccl-tests-point"
    if isinstance(value, CellPoint):
        return "cell-point"
    if isinstance(value, dict):
        if "nccl_tests" in value:
            return "nccl-tests-point"
        if "model" in value:
            return "cell-point"
    return "collective-point"


AnyPoint = Annotated[
    Annotated[CollectivePoint, Tag("collective-point")]
    | Annotated[NcclPoint, Tag("nccl-tests-point")]
    | Annotated[CellPoint, Tag("cell-point")],
    Discriminator(_kind),
]


class PointsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str | None = Field(None, min_length=1, max_length=100)
    source: str | None = None
    network: dict[str, Any] = Field(default_factory=dict)
    points: list[AnyPoint] = Field(min_length=1)


# --------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class Measurement:
    """One point ready to predict: a collective timing or a cell's metric."""

    label: str
    measured: float
    # (name, ranks, bytes, level, machines the ranks span: None, one rank a machine
    # across machines, all on one inside)
    collective: tuple[str, int, float, str, int | None] | None = None
    cell: CellPoint | None = None
    # any other prediction of network values (`gcbench reproduce`'s figures)
    custom: Callable[[dict[str, Any], dict[str, float]], float] | None = None


def measurements(points: PointsFile, base_dir: Path) -> list[Measurement]:
    out = []
    for i, p in enumerate(points.points):
        if isinstance(p, CollectivePoint):
            label = f"points[{i}] {p.collective} {p.ranks} ranks {p.bytes:g} B"
            point = (p.collective, p.ranks, p.bytes, p.level, p.machines)
            out.append(Measurement(label, p.seconds, point))
        elif isinstance(p, NcclPoint):
            from gcbench.files import read_limited

            path = base_dir / Path(p.nccl_tests).expanduser()
            try:
                raw = read_limited(path, MAX_POINTS_BYTES, "nccl-tests output")
            except ConfigError as e:  # at the point that names the file (`_located`)
                raise ConfigError(f"points[{i}] nccl_tests: {e.messages[0]}") from None
            text = raw.decode(errors="replace")
            run = parse_nccl_tests(text, str(path))
            name = (p.collective or run.collective or "allreduce").replace("-", "_").lower()
            ranks = p.ranks or run.ranks
            if ranks is None:
                raise ConfigError(f"{path}: no '#  Rank' lines: give `ranks:` beside `nccl_tests:`")
            if ranks < 2:  # one rank sends nothing: its times are no collective's
                raise ConfigError(
                    f"{path}: a run of {ranks} rank: it measures no collective (run nccl-tests "
                    "on 2 GPUs or more)"
                )
            level = p.level or ("inter" if run.hosts > 1 else "intra")
            for size, seconds in run.points:
                out.append(Measurement(f"{path.name} {name} {ranks} ranks {size:g} B", seconds,
                                       (name, ranks, size, level, run.hosts)))  # fmt: skip
        else:
            out.append(Measurement(f"points[{i}] {p.model} {p.machines}x{p.gpus_per_machine} "
                                   f"{p.strategy} {p.metric}", p.measured, cell=p))  # fmt: skip
    return out


def resolved_network(base: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """The points file's network resolved to plain fields (a profile expanded)."""
    from gcbench.config.network_profile import apply_profile

    net = dict(base)
    if isinstance(net.get("profile"), str):
        try:
            net = apply_profile(net, base_dir)
        except ValueError as e:  # at the `profile:` line (`_located`)
            raise ConfigError(f"network: profile: {e}") from None
    for key in ("profile", "profile_sha256"):
        net.pop(key, None)
    return net


def _overridden(network: Any, name: str) -> tuple[float | None, float | None]:
    """The inter-machine (efficiency, latency in us) a profile's override gives collective
    `name`, each None where the link's own holds (as cells read it)."""
    own = {str(k): v for k, v in (network.overrides or {}).items()}.get(name)
    if own is None:
        return None, None
    eff = own.inter_efficiency if own.inter_efficiency else None
    return eff, own.inter_latency_us


def predictor(m: Measurement, net: dict[str, Any]) -> Callable[[dict[str, float]], float]:
    """How to predict `m` for given parameter values (the rest from `net`)."""
    from gcbench.config import Cell
    from gcbench.config.models import Network

    defaults = Network.model_validate({"inter_gbps": 1, **net})
    if m.custom is not None:
        custom = m.custom
        return lambda values: custom(net, values)
    if m.collective is not None:
        name, ranks, size, level, hosts = m.collective
        machines = (hosts or ranks) if level == "inter" else 1
        dumped = defaults.model_dump()

        def collective(values: dict[str, float]) -> float:
            get = {**dumped, **values}.__getitem__
            rate = get("intra_gbs") or defaults.intra_rate()
            intra = Link(rate * 1e9, get("intra_latency_us") * 1e-6, get("intra_efficiency"))
            link = intra
            if level == "inter":
                if "inter_gbps" not in net:
                    raise ConfigError(NEED_INTER_GBPS)
                eff, lat = _overridden(defaults, name)
                link = Link(net["inter_gbps"] * 1e9 / 8,
                            (get("inter_latency_us") if lat is None else lat) * 1e-6,
                            get("inter_efficiency") if eff is None else eff)  # fmt: skip
            if defaults.collectives == "nccl":  # NCCL's algorithm and protocol for the size
                bus = link if level == "inter" and machines == ranks else None
                protocols = NcclProtocols(*map(get, NCCL_PROTOCOL_FIELDS))
                return nccl_collective_s(name, size, ranks, machines, intra,
                                         link if level == "inter" else None, bus,
                                         nvlink=defaults.intra == "nvlink",
                                         protocols=protocols)  # fmt: skip
            return collective_s(name, size, ranks, link)

        return collective
    p = m.cell
    assert p is not None
    model: dict[str, Any] = {"name": p.model}
    if p.batch is not None:
        model["batch_size"] = p.batch
    if p.seq_len is not None:
        model["seq_len"] = p.seq_len
    fixed = dict(net)
    if p.intra is not None and p.intra != net.get("intra", "nvlink"):
        fixed.pop("intra_gbs", None)  # another kind of machine: its default rate
        fixed["intra"] = p.intra
    if p.inter_gbps is not None:
        fixed["inter_gbps"] = p.inter_gbps
    from gcbench.backends.simulate import simulate_cell

    def cell(values: dict[str, float]) -> float:
        try:
            c = Cell.model_validate({
                "model": model, "device": p.device, "strategy": p.strategy,
                "compressor": p.compressor,
                "cluster": {"machines": p.machines, "gpus_per_machine": p.gpus_per_machine},
                "network": {**fixed, **values},
            })  # fmt: skip
        except ValidationError as e:
            why = first_error(e)
            if why.startswith("network.inter_gbps:"):
                why = (
                    "network.inter_gbps: give the machines' line rate: inter_gbps in the "
                    "point or POINTS' network"
                )
            raise ConfigError(f"{m.label}: not a cell gcbench can simulate: {why}") from None
        return float(simulate_cell(c).metrics[p.metric])

    return cell


@dataclass
class FitResult:
    values: dict[str, float]
    predicted: list[float]
    r2: float | None
    bound_hits: list[str]
    method: str
    weak: list[str] = field(default_factory=list)  # barely identified (`WEAK`)


# A fitted parameter whose 10% change moves no point's prediction by this much (it is
# under a tenth of every point's time) is not identified by the points: its value is
# where the search stopped along a flat valley; said, not trusted
WEAK = 1e-2


Weighting = Literal["relative", "absolute"]


def _weight(t: float, weighting: Weighting) -> float:
    """A point's weight in the squared-error sums: relative errors weigh 1/t^2."""
    return 1 / t**2 if weighting == "relative" else 1.0


def _loss(pred: list[float], meas: list[float], weighting: Weighting = "relative") -> float:
    return sum(_weight(t, weighting) * (p - t) ** 2 for p, t in zip(pred, meas, strict=True))


def _r2(pred: list[float], meas: list[float]) -> float | None:
    """R² with relative weights; None (undefined) when the measurements do not vary."""
    w = [1 / t**2 for t in meas]
    mean = sum(wi * t for wi, t in zip(w, meas, strict=True)) / sum(w)
    tot = sum(wi * (t - mean) ** 2 for wi, t in zip(w, meas, strict=True))
    res = sum(wi * (p - t) ** 2 for wi, p, t in zip(w, pred, meas, strict=True))
    return 1 - res / tot if tot > 1e-12 * len(meas) else None


def fit(ms: list[Measurement], net: dict[str, Any], params: list[str],
        weighting: Weighting = "relative") -> FitResult:  # fmt: skip
    """Fit `params` to `ms` (see the module docstring)."""
    from gcbench.config.models import Network

    if not ms:
        raise ConfigError("points: no points to fit")
    unknown = [p for p in params if p not in FITTABLE]
    if unknown or not params:
        raise ConfigError(
            f"--fit: {', '.join(unknown) or 'nothing'}: fit one or more of {', '.join(FITTABLE)}"
        )
    try:
        start_net = Network.model_validate({"inter_gbps": 1, **net}).model_dump()
    except ValidationError as e:
        raise ConfigError(f"network: {first_error(e)}") from None
    start = {p: float(start_net[p]) for p in params}
    predictors = [predictor(m, net) for m in ms]
    meas = [m.measured for m in ms]

    def predict(values: dict[str, float]) -> list[float]:
        return [f(values) for f in predictors]

    protocols = [p for p in params if p in NCCL_PROTOCOL_FIELDS]
    if protocols and start_net["collectives"] != "nccl":
        raise ConfigError(f"--fit: {protocols[0]} corrects NCCL's protocols: it needs "
                          "collectives: nccl (--collectives nccl)")  # fmt: skip
    # A parameter that moves no prediction cannot be fitted: say so, naming it.
    for p in params:
        lo, hi = BOUNDS[p]
        if p in NCCL_PROTOCOL_FIELDS:  # a multiple of NCCL's own value
            a, b = predict({**start, p: 0.5}), predict({**start, p: 2.0})
        else:
            a = predict({**start, p: lo + 0.25 * (hi - lo)})
            b = predict({**start, p: lo + 0.75 * (hi - lo)})
        if all(
            abs(x - y) <= 1e-12 * max(abs(x), abs(y), 1e-300) for x, y in zip(a, b, strict=True)
        ):
            why = {"inter": "no point crosses machines", "intra": "no point uses a GPU link",
                   "compute": "no point computes", "bucket": "no point is a whole iteration",
                   "iteration": "no point is a whole iteration",
                   "nccl": "NCCL runs another protocol at every point's size",
                   }[p.split("_")[0]]  # fmt: skip
            if p == "compute_contention":
                why = "no point's communication overlaps its backward"
            if p.startswith("nccl_ll128") and start_net["intra"] != "nvlink":
                why = "LL128 runs on NVLink machines only"
            raise ConfigError(
                f"--fit: {p} moves no point's prediction ({why}); leave it out of --fit"
            )
    levels = {m.collective[3] for m in ms if m.collective is not None}
    # the closed forms read rings; NCCL's fastest-of-several is searched for
    rings = start_net["collectives"] == "ring"
    exact = rings and all(m.collective is not None for m in ms) and all(
        p.split("_")[0] in levels for p in params if p != "compute_scale"
    ) and not {"compute_scale", "iteration_overhead_us", "bucket_overhead_us",
               "compute_jitter", "compute_contention"} & set(params)  # fmt: skip
    closed: dict[str, float] | None = None
    if exact:  # each level's points read that level's link alone: one closed form a level
        closed = {}
        for level in sorted(levels):
            mine = [p for p in params if p.startswith(level + "_")]
            if not mine:
                continue
            got = _exact([m for m in ms if m.collective[3] == level], net, start_net,  # type: ignore[index]
                         mine, level, weighting)  # fmt: skip
            if got is None:
                closed = None
                break
            closed.update(got)
    if closed is not None:
        values = closed
        method = "weighted least squares (exact)"
        outside = {p: v for p, v in values.items() if not BOUNDS[p][0] <= v <= BOUNDS[p][1]}
        if outside:  # the unconstrained optimum leaves gcbench's ranges: search inside them
            clamped = {p: min(max(v, BOUNDS[p][0]), BOUNDS[p][1]) for p, v in values.items()}
            values = _descent(predict, meas, clamped, params, weighting)
            method = "coordinate descent within the bounds (the least-squares optimum is outside)"
    else:
        values = _descent(predict, meas, start, params, weighting)
        method = "coordinate descent, golden-section searches"
    predicted = predict(values)
    hits = [p for p in params
            if any(abs(values[p] - b) <= 1e-6 * max(1.0, abs(b)) for b in BOUNDS[p])]  # fmt: skip
    weak = []
    for p in params:  # what a 10% change (at 0: a millionth of its range) moves
        lo, hi = BOUNDS[p]
        step = 0.1 * abs(values[p]) if values[p] else 1e-6 * (hi - lo)
        moved = predict({**values, p: values[p] + step if values[p] + step <= hi
                         else values[p] - step})  # fmt: skip
        change = max(abs(a / b - 1) for a, b in zip(moved, predicted, strict=True) if b)
        if change < WEAK:
            weak.append(p)
    return FitResult(values, predicted, _r2(predicted, meas), hits, method, weak)


def _exact(ms: list[Measurement], net: dict[str, Any], start: dict[str, Any], params: list[str],
           level: str, weighting: Weighting = "relative") -> dict[str, float] | None:  # fmt: skip
    """Weighted least squares over the collective timings of one level, in closed form,
    with each point's link as its prediction reads it: where a profile's override fixes
    a collective's efficiency or latency, its points take the override's value (and a
    point whose prediction the fitted parameter does not move adds a constant to the
    loss: left out; with both parameters fitted, `_exact_overridden`). None where there
    is no closed form (`fit` searches then)."""
    from gcbench.comm.calibrate import fit_affine
    from gcbench.config.models import Network

    eff_name, lat_name = f"{level}_efficiency", f"{level}_latency_us"
    # per point, the efficiency and latency its prediction reads: (value, overridden)
    effs: list[tuple[float, bool]] = [(start[eff_name], False)] * len(ms)
    lats: list[tuple[float, bool]] = [(start[lat_name], False)] * len(ms)
    if level == "inter":
        network = Network.model_validate({"inter_gbps": 1, **net})
        for i, m in enumerate(ms):
            eff, lat = _overridden(network, m.collective[0])  # type: ignore[index]
            effs[i] = effs[i] if eff is None else (eff, True)
            lats[i] = lats[i] if lat is None else (lat, True)
    moved = [  # the points whose prediction a fitted parameter moves
        i for i in range(len(ms))
        if (eff_name in params and not effs[i][1]) or (lat_name in params and not lats[i][1])
    ]
    if len(params) == 2 and any(effs[i][1] or lats[i][1] for i in moved):
        return _exact_overridden(ms, moved, effs, lats, net, start, level, weighting)
    ms = [ms[i] for i in moved]
    fixed_eff = [effs[i][0] for i in moved]
    fixed_lat = [lats[i][0] for i in moved]
    B = _line_rate(level, net, start)
    shapes = [cost_shape(m.collective[0], m.collective[1]) for m in ms]  # type: ignore[index]
    sizes = [m.collective[2] for m in ms]  # type: ignore[index]
    points = [(float(i), m.measured) for i, m in enumerate(ms)]
    line = lambda i: shapes[int(i)][1] * sizes[int(i)] / B  # noqa: E731
    if lat_name in params and eff_name in params:
        if len(points) < 2:
            raise ConfigError(f"--fit: {lat_name} and {eff_name} together need 2 points or more")
        f = fit_affine(points, B, lambda i: shapes[int(i)][0], line, weighting=weighting)
        return {lat_name: f.link.latency_s * 1e6, eff_name: f.link.efficiency}
    if eff_name in params:  # latency fixed: an offset; u = 1/efficiency >= 1 in closed form
        w = [_weight(m.measured, weighting) for m in ms]
        c = [line(i) for i in range(len(ms))]
        r = [m.measured - shapes[i][0] * fixed_lat[i] * 1e-6 for i, m in enumerate(ms)]
        scc = sum(wi * ci * ci for wi, ci in zip(w, c, strict=True))
        scr = sum(wi * ci * ri for wi, ci, ri in zip(w, c, r, strict=True))
        u = max(1.0, scr / scc) if scc > 0 else 1.0
        return {eff_name: 1 / u}
    # efficiency fixed: alpha = argmin, clamped to >= 0
    w = [_weight(m.measured, weighting) for m in ms]
    a = [s[0] for s in shapes]
    r = [m.measured - line(i) / fixed_eff[i] for i, m in enumerate(ms)]
    den = sum(wi * ai * ai for wi, ai in zip(w, a, strict=True))
    alpha = max(0.0, sum(wi * ai * ri for wi, ai, ri in zip(w, a, r, strict=True)) / den)
    return {lat_name: min(alpha * 1e6, BOUNDS[lat_name][1])}


def _line_rate(level: str, net: dict[str, Any], start: dict[str, Any]) -> float:
    """Bytes per second of a level's link as the closed forms read it: the machines'
    NICs (`inter_gbps`, required) or a GPU's link inside one (its default by kind)."""
    if level == "inter":
        if "inter_gbps" not in net:
            raise ConfigError(NEED_INTER_GBPS)
        return float(net["inter_gbps"]) * 1e9 / 8
    return float(start["intra_gbs"] or INTRA_DEFAULT_GBS[start.get("intra", "nvlink")]) * 1e9


def _exact_overridden(
    ms: list[Measurement],
    moved: list[int],
    effs: list[tuple[float, bool]],
    lats: list[tuple[float, bool]],
    net: dict[str, Any],
    start: dict[str, Any],
    level: str,
    weighting: Weighting = "relative",
) -> dict[str, float] | None:
    """`_exact` for a level's latency and efficiency together where overrides fix one of
    them for some points: weighted least squares in (alpha, u = 1/efficiency), each
    point's row holding only what moves it (`steps` for alpha unless its latency is
    fixed, `factor x bytes / B` for u unless its efficiency is); the fixed part of its
    time taken off its measured time. None where the points leave the pair singular."""
    B = _line_rate(level, net, start)
    saa = sau = suu = sar = sur = 0.0
    for i in moved:
        m = ms[i]
        steps, factor = cost_shape(m.collective[0], m.collective[1])  # type: ignore[index]
        c = factor * m.collective[2] / B  # type: ignore[index]
        a = 0.0 if lats[i][1] else steps
        u = 0.0 if effs[i][1] else c
        r = m.measured - (steps * lats[i][0] * 1e-6 if lats[i][1] else 0.0) - (
            c / effs[i][0] if effs[i][1] else 0.0
        )
        w = _weight(m.measured, weighting)
        saa, sau, suu = saa + w * a * a, sau + w * a * u, suu + w * u * u
        sar, sur = sar + w * a * r, sur + w * u * r
    det = saa * suu - sau * sau
    if det <= 1e-12 * max(saa * suu, 1e-300):
        return None
    alpha = (sar * suu - sur * sau) / det
    inv = (saa * sur - sau * sar) / det
    if inv <= 0:
        return None
    return {f"{level}_latency_us": alpha * 1e6, f"{level}_efficiency": 1 / inv}


GOLDEN = (math.sqrt(5) - 1) / 2


def _descent(predict: Callable[[dict[str, float]], list[float]], meas: list[float],
             start: dict[str, float], params: list[str],
             weighting: Weighting = "relative") -> dict[str, float]:  # fmt: skip
    """Coordinate descent: a golden-section search of each parameter over its bounds in
    turn, until a round improves the loss by less than 1e-10 (at most 12 rounds)."""
    values = dict(start)
    best = _loss(predict(values), meas, weighting)
    for _ in range(12):
        before = best
        for p in params:
            lo, hi = BOUNDS[p]

            def f(x: float, p: str = p, now: dict[str, float] = values) -> float:
                return _loss(predict({**now, p: x}), meas, weighting)

            a, b = lo, hi
            c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
            fc, fd = f(c), f(d)
            for _ in range(60):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - GOLDEN * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + GOLDEN * (b - a)
                    fd = f(d)
                if b - a <= 1e-9 * max(1.0, abs(b)):
                    break
            for x in (lo, hi, (a + b) / 2):  # a bound can be the optimum
                fx = f(x)
                if fx < best:
                    best, values = fx, {**values, p: x}
        if before - best <= 1e-10 * max(before, 1e-300):
            break
    return values


# --------------------------------------------------------------------------- the command


def read_points(path: Path, network: str | None) -> tuple[PointsFile, Path]:
    """The points of `path` (a POINTS YAML file or an nccl-tests output) and the folder
    its relative paths start from; `network` (a profile) under the file's own network."""
    from gcbench.config.loader import load_model
    from gcbench.files import read_limited

    raw = read_limited(path, MAX_POINTS_BYTES, "points")
    text = raw.decode("utf-8", errors="replace")
    if is_nccl_output(text):
        points = PointsFile(points=[NcclPoint(nccl_tests=path.name)])
    else:
        points = load_model(path, PointsFile, "points", MAX_POINTS_BYTES)
    if network is not None:
        points = points.model_copy(update={"network": {"profile": network, **points.network}})
    return points, path.parent


def _located(path: Path, message: str) -> str:
    """A fit's error with the points file in front, and the line of the point it names
    (`points[i] ...`); one that names a file already (an nccl-tests log) as it is."""
    from gcbench.config import where

    if message.startswith(str(path)) or re.match(r"^\S+:\d+: ", message):
        return message
    loc: tuple[str | int, ...] = ()
    if m := re.match(r"^points\[(\d+)\] ", message):
        loc = ("points", int(m.group(1)))
    elif m := re.match(r"^network: (\w+): ", message):
        loc = ("network", m.group(1))
    at = where(path, loc).split(": ")[0] if loc else str(path)  # file:line
    return f"{at}: {message}"


def calibrate(
    path: Path,
    params: list[str],
    network: str | None = None,
    inter_gbps: float | None = None,
    collectives: str | None = None,
) -> NetworkProfile:
    """Fit `params` to the points of `path`; returns the network profile, with its `fit`
    report, that `gcbench calibrate --out` writes. `network` (a profile) lies under the
    points file's network, `inter_gbps` and `collectives` over it."""
    points, base_dir = read_points(path, network)
    try:
        net = resolved_network(points.network, base_dir)
    except ConfigError as e:  # the profile --network names, else the points file's own
        given = network is not None and points.network.get("profile") == network
        raise ConfigError([f"--network: {e.messages[0].removeprefix('network: profile: ')}"
                           if given else _located(path, e.messages[0])]) from None  # fmt: skip
    if inter_gbps is not None:
        if not (inter_gbps > 0 and math.isfinite(inter_gbps)):
            raise ConfigError(f"--inter-gbps: must be a positive number, got {inter_gbps}")
        net["inter_gbps"] = inter_gbps
    if collectives is not None:
        if collectives not in ("ring", "nccl"):
            raise ConfigError(f"--collectives: ring or nccl, got {collectives!r}")
        net["collectives"] = collectives
    try:
        ms = measurements(points, base_dir)
        result = fit(ms, net, params)
    except ConfigError as e:
        raise ConfigError([_located(path, m) for m in e.messages]) from None
    fitted = {k: float(f"{v:.6g}") for k, v in result.values.items()}
    # the collective model the values were fitted under, written whatever the default
    from gcbench.config.models import Network

    model = Network.model_validate({"inter_gbps": 1, **net}).collectives
    network_fields = {**{k: v for k, v in net.items() if k not in ("compute_scale", "overrides")},
                      "collectives": model,
                      **{k: v for k, v in fitted.items() if k != "compute_scale"}}  # fmt: skip
    errors = [(p - m.measured) / m.measured for m, p in zip(ms, result.predicted, strict=True)]
    rows = [
        {"point": m.label, "measured": m.measured, "predicted": p, "relative_error": e}
        for m, p, e in zip(ms, result.predicted, errors, strict=True)
    ]
    source = f"gcbench calibrate {path.name}: {', '.join(params)} fitted to {len(ms)} points"
    if points.source:
        source += f" ({points.source})"
    profile = NetworkProfile(
        name=points.name or path.stem[:100] or "calibrated",  # a profile name is <= 100
        source=source,
        network=network_fields,
        compute_scale=fitted.get("compute_scale", float(net.get("compute_scale", 1.0))),
        overrides=net.get("overrides") or {},
        fit={
            "parameters": fitted,
            "method": result.method,
            "weighting": "relative (squared relative errors)",
            "r2": result.r2,
            "bound_hits": result.bound_hits,
            "weakly_identified": result.weak,
            "median_abs_relative_error": sorted(abs(e) for e in errors)[len(errors) // 2],
            "points": rows,
        },
    )
    return profile
