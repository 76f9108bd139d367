"""One cell from flags: `simulate` (its iteration, simulated or emulated on Ray) and
`plan` (the ByteComp planner's plan for it; `simulate`'s flags, less a few)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli.common import JSON_HELP, app, dumps, errors, opt, writable
from gcbench.errors import ConfigError

# `gcbench simulate` flags for every field of a cell's network and cluster (a test checks
# that none is missing); None means "the suite's default".
NETWORK_FLAGS = {
    "intra": "--intra",
    "intra_gbs": "--intra-gbs",
    "intra_latency_us": "--intra-latency-us",
    "intra_efficiency": "--intra-efficiency",
    "inter_gbps": "--inter-gbps",
    "inter_latency_us": "--inter-latency-us",
    "inter_efficiency": "--inter-efficiency",
    "nics_per_machine": "--nics-per-machine",
    "server_gbps": "--server-gbps",
    "profile": "--network",
    "compute_scale": "--compute-scale",
    "iteration_overhead_us": "--iteration-overhead-us",
    "bucket_overhead_us": "--bucket-overhead-us",
    "compute_jitter": "--compute-jitter",
    "compute_contention": "--compute-contention",
    "collectives": "--collectives",
}
# Network fields no flag sets: the profile's digest (filled in from it), its
# per-collective overrides and NCCL's per-protocol corrections (a profile file holds them,
# as `gcbench calibrate` writes them).
NETWORK_UNFLAGGED = ("profile_sha256", "overrides", "nccl_ll_bandwidth", "nccl_ll128_bandwidth")
CLUSTER_FLAGS = {
    "machines": "--machines",
    "gpus_per_machine": "--gpus-per-machine",
    "cpu_servers": "--cpu-servers",
    "cpu_cores": "--cpu-cores",
    "cpu_gbs": "--cpu-gbs",
    "summation_gbs": "--summation-gbs",
}
MODEL_FLAGS = {
    "name": "--model", "batch_size": "--batch", "seq_len": "--seq-len", "precision": "--precision"
}  # fmt: skip
PRECISION_HELP = (
    "fp32 (default: torch's defaults, TF32 convolutions on GPUs with TF32, fp32 matmuls), "
    "tf32 (matmuls too), amp-fp16 or amp-bf16 (autocast; fp32 gradients on the wire)."
)
# Every built-in strategy and its aliases (`gcbench.strategies`; a test checks; spelt out
# so that the CLI starts without importing the registry).
STRATEGY_HELP = (
    "fp32 (default), fp32-2level, fp16, allgather, allgather-2level (alias hitopkcomm), "
    "allreduce, ps, byteps, byteps-compress, hipress, powersgd, acpsgd, covap; the "
    "planner's: bytecomp, bytecomp-greedy, brute-force, upper-bound."
)


@app.command()
def simulate(
    model: Annotated[str, typer.Option("--model", help="A zoo model (gcbench models).")],
    inter_gbps: Annotated[
        float | None,
        opt(
            "--inter-gbps",
            "Gbit/s per machine between machines (required with --machines above 1 unless "
            "--network gives it).",
        ),
    ] = None,
    network: Annotated[
        str | None,
        opt(
            "--network",
            "A network profile: a preset's name (gcbench networks) or a YAML "
            "file; the other network flags override its values.",
        ),
    ] = None,
    compute_scale: Annotated[
        float | None, opt("--compute-scale", "Multiply the device's compute times (1).")
    ] = None,
    iteration_overhead_us: Annotated[
        float | None,
        opt("--iteration-overhead-us", "A fixed cost each iteration pays beyond its layers (0)."),
    ] = None,
    bucket_overhead_us: Annotated[
        float | None, opt("--bucket-overhead-us", "A fixed cost of each bucket's comm (0).")
    ] = None,
    compute_jitter: Annotated[
        float | None,
        opt("--compute-jitter", "The workers' compute times' coefficient of variation (0)."),
    ] = None,
    compute_contention: Annotated[
        float | None,
        opt("--compute-contention", "How much slower backward runs beside a GPU "
            "communication kernel (0)."),
    ] = None,
    collectives: Annotated[
        str | None,
        opt("--collectives", "How collectives are costed: ring (every size a ring) or nccl "
            "(NCCL's algorithm and protocol for the size) (ring)."),
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            help=STRATEGY_HELP,
            show_default=False,
        ),
    ] = None,
    option: Annotated[
        str | None,
        typer.Option(
            "--option",
            help="Run every bucket with this option instead of the strategy's, in the form "
            "`gcbench options` lists, e.g. 'intra:rs gc inter:ag* gd intra:ag'.",
        ),
    ] = None,
    plan_file: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="Time this plan instead of a strategy's: a gcbench plan record (`gcbench "
            "plan --json` output or a stored plans/<cell-id>.json.gz) or the ByteComp "
            "authors' planner output (codes 0-10).",
        ),
    ] = None,
    fusion: Annotated[str, typer.Option("--fusion", help="ddp, tensor, or fixed:<bytes>.")] = "ddp",
    compressor: Annotated[
        str | None,
        opt(
            "--compressor",
            "Preset or kind:param=value (default: none, or the strategy's own compressor "
            "for powersgd, acpsgd and covap).",
        ),
    ] = None,
    machines: Annotated[int, typer.Option("--machines", help="Machines.")] = 1,
    gpus_per_machine: Annotated[
        int, typer.Option("--gpus-per-machine", help="GPUs per machine.")
    ] = 8,
    cpu_servers: Annotated[
        int | None, opt("--cpu-servers", "CPU summation servers (ps, byteps; default 0).")
    ] = None,
    cpu_cores: Annotated[
        int | None, opt("--cpu-cores", "CPU-compression cores per machine (default 16).")
    ] = None,
    cpu_gbs: Annotated[
        float | None,
        opt("--cpu-gbs", "GB/s of memory bandwidth of a machine's CPUs (default: as the "
            "measured 2-core host per core, 9.4 GB/s a core)."),
    ] = None,
    summation_gbs: Annotated[
        float | None, opt("--summation-gbs", "GB/s a CPU server sums (default: ample).")
    ] = None,
    intra: Annotated[str | None, opt("--intra", "nvlink (default) or pcie.")] = None,
    intra_gbs: Annotated[
        float | None, opt("--intra-gbs", "GB/s per GPU inside a machine (default by --intra).")
    ] = None,
    intra_latency_us: Annotated[
        float | None, opt("--intra-latency-us", "Per-step latency inside a machine (5).")
    ] = None,
    intra_efficiency: Annotated[
        float | None, opt("--intra-efficiency", "Achieved / line rate inside a machine (0.8).")
    ] = None,
    inter_latency_us: Annotated[
        float | None, opt("--inter-latency-us", "Per-step latency between machines (25).")
    ] = None,
    inter_efficiency: Annotated[
        float | None,
        opt("--inter-efficiency", "Achieved / line rate between machines (0.7)."),
    ] = None,
    nics_per_machine: Annotated[
        int | None, opt("--nics-per-machine", "NICs sharing inter_gbps (1).")
    ] = None,
    server_gbps: Annotated[
        float | None, opt("--server-gbps", "Gbit/s of a CPU server's NICs (inter_gbps).")
    ] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Per-GPU batch.")] = None,
    seq_len: Annotated[
        int | None, opt("--seq-len", "Sequence length (sequence models; default the zoo's).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="Device-table entry.")] = "v100",
    precision: Annotated[str | None, opt("--precision", PRECISION_HELP)] = None,
    compressor_costs: Annotated[
        Path | None,
        opt(
            "--compressor-costs",
            "A GPU compressor cost table (gcbench bench compressors --torch-device cuda "
            "--out FILE) for --device, instead of its roofline.",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Write a Chrome trace (Trace Event Format) to this file (its folder is "
            "created if missing).",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="simulate (the timeline model); emulate: run the cell on local Ray "
            "actors, one per GPU, with real gradients, compressors and gloo collectives "
            "on loopback, timed on the virtual clock (prints the aggregation error too); "
            "measure: train the zoo model with DDP on local Ray actors, the compressor a "
            "DDP hook, and time it (prints the simulator's prediction beside it).",
        ),
    ] = "simulate",
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Simulate one training iteration of a single cell and print its metrics: iteration
    time, throughput, scaling factor and the compute / compression / communication
    breakdown. Every network and cluster field of a suite cell has a flag, validated as
    in suites. --trace writes the timeline for chrome://tracing or Perfetto. --mode
    emulate and --mode measure run the cell on Ray actors instead (see --mode)."""
    with errors():
        given = [f for f, v in (("--strategy", strategy), ("--option", option),
                                ("--plan", plan_file)) if v is not None]  # fmt: skip
        if len(given) > 1:
            raise ConfigError([f"{' and '.join(given)}: give one of --strategy, --option, --plan"])
        # an option or a plan runs with any compressor, as under the allgather strategy
        # (byteps-compress where the cluster has CPU servers: it takes them)
        replaced = option is not None or plan_file is not None
        if strategy is None:
            strategy = ("byteps-compress" if cpu_servers else "allgather") if replaced else "fp32"
        cell = _flags_cell({**locals(), "strategy": strategy})
        if cell.emulated or cell.measured_ddp:
            used = [f for f, v in (("--option", option), ("--plan", plan_file),
                                   ("--trace", trace)) if v is not None]  # fmt: skip
            if used:
                how = "measure" if cell.measured_ddp else "emulate"
                raise ConfigError([f"{', '.join(used)}: not with --mode {how} yet"])
        from gcbench.backends.simulate import simulate_cell
        from gcbench.sim.chrome import shown_note

        chosen = None
        if option is not None:
            from gcbench.sim.options import Option

            chosen = Option.parse(option)
        planned = None
        if plan_file is not None:
            from gcbench.backends.simulate import cell_profile
            from gcbench.compress.specs import ADDITIVE
            from gcbench.plan.io import read_plan_file

            planned = read_plan_file(
                plan_file,
                cell_profile(cell),
                additive=cell.compressor.kind in ADDITIVE,
                compressor=cell.compressor.label(),
                fusion=cell.fusion,
            )
        if compressor is not None and planned is None:
            _compressor_used(compressor, cell, chosen)
        if trace is not None:
            writable(trace, "--trace")
        if cell.emulated or cell.measured_ddp:
            result = _emulate(cell)
        else:
            result = simulate_cell(cell, chosen, planned)
        if trace is not None:
            _write_trace(trace, cell, result.spans)
    m = result.metrics
    if json_out:
        flat = cell.flat()
        if chosen is not None or planned is not None:
            flat["strategy"] = None  # replaced by the option or the plan
        out = {
            "cell": flat,
            "option": chosen.name if chosen else None,
            "plan": str(plan_file) if plan_file else None,
            "metrics": m,
        }
        typer.echo(dumps(out, indent=1, default=str))
        return
    unit = m["sample_unit"]
    how = (
        f"option {chosen.name}"
        if chosen is not None
        else (f"plan {plan_file}" if plan_file is not None else cell.strategy)
    )
    n, cl = cell.network, cell.cluster  # as the cell has them (a --network fills flags left out)
    typer.echo(
        f"{model} · {how} · {cell.compressor.label()} · {cl.machines}x{cl.gpus_per_machine} "
        f"{n.intra} · {_between(cell)}{cell.device}"
        + (f" · network {n.profile}" if n.profile else "")
        + (" · NCCL's collectives" if n.collectives == "nccl" else "")
    )
    if cell.measured_ddp:
        _print_measured(m, unit)
        return
    typer.echo(
        f"iteration {m['iteration_s'] * 1e3:.2f} ms · {m['throughput']:,.0f} {unit}/s · "
        f"scaling factor {m['scaling_factor']:.3f}"
    )
    typer.echo(_against_baselines(cell, m["iteration_s"]))
    typer.echo(
        f"compute {m['compute_s'] * 1e3:.2f} ms · exposed compression "
        f"{m['compress_exposed_s'] * 1e3:.2f} ms · exposed communication "
        f"{m['comm_exposed_s'] * 1e3:.2f} ms"
    )
    typer.echo(
        f"communication total {m['comm_total_s'] * 1e3:.2f} ms · compression total "
        f"{m['compress_total_s'] * 1e3:.2f} ms · {m['wire_bytes'] / 2**20:,.1f} MiB sent per "
        f"GPU · {m['buckets']} buckets"
    )
    if "agg_error" in m:
        typer.echo(
            f"emulated on {cell.cluster.gpus} Ray actors: aggregation error "
            f"{m['agg_error']:.3g} (one iteration), {m['agg_error_steps']:.3g} (summed over "
            "the emulated iterations, with error feedback): ||aggregate - exact sum|| / "
            "||exact sum||, L2 over every gradient element, 0 for lossless"
        )
    if trace is not None:
        note = shown_note(cell.cluster.machines, cell.cluster.gpus_per_machine)
        typer.echo(f"trace: {trace}" + (f" ({note})" if note else ""))


def _print_measured(m: dict[str, Any], unit: str) -> None:
    """A measured cell (`--mode measure`): what it ran on, its iteration against the
    simulator's prediction, and the split its hook's timestamps give (gcbench's hooks)."""
    it, pred = m["iteration_s"], m["predicted_iteration_s"]
    typer.echo(f"measured on {m['hardware']}: iteration {it * 1e3:.2f} ms (the timed ones "
               f"spread over {m['iteration_spread']:.0%} of it) · {m['throughput']:,.0f} "
               f"{unit}/s")  # fmt: skip
    typer.echo(f"predicted by simulate {pred * 1e3:.2f} ms: measured / predicted "
               f"{it / pred:.2f}x (fit a profile to measured runs: calibrate --from)")  # fmt: skip
    if m.get("comm_exposed_s") is None:
        typer.echo("torch's own hook runs asynchronously: compute and communication not split")
    else:
        typer.echo(f"compute {m['compute_s'] * 1e3:.2f} ms · exposed communication and "
                   f"compression (inside the hook) {m['comm_exposed_s'] * 1e3:.2f} ms · "
                   f"{m['wire_bytes'] / 2**20:,.3f} MiB sent per GPU")  # fmt: skip


def _baselines(cell: Any) -> list[tuple[str, float]]:
    """The cell's scenario without gradient compression, simulated: fp32, fp32-2level,
    and where the cell has CPU servers PS and BytePS (`report.headline.BASELINES`)."""
    from pydantic import ValidationError

    from gcbench.backends.simulate import simulate_cell
    from gcbench.config.models import Cell
    from gcbench.report.choices import BASELINES, choice_label

    data = cell.model_dump(mode="json", exclude={"constraints"})
    data.update(compressor="none", mode="simulate", clock="virtual", compute_time="profile")
    out = []
    for strategy in BASELINES:
        servers = cell.cluster.cpu_servers if strategy in ("ps", "byteps") else 0
        if strategy in ("ps", "byteps") and not servers:
            continue
        cluster = {**data["cluster"], "cpu_servers": servers}
        try:
            base = Cell.model_validate({**data, "strategy": strategy, "cluster": cluster})
        except ValidationError:
            continue
        label = choice_label({"strategy": strategy, "compressor": "none",
                              "cpu_servers": servers})  # fmt: skip
        out.append((label, simulate_cell(base).metrics["iteration_s"]))
    return out


def _against_baselines(cell: Any, seconds: float) -> str:
    """`without compression: fp32 483.82 ms · fp32-2level 385.33 ms → 2.40× faster than
    the best (fp32-2level), 3.01× than fp32`: the baselines simulated, and the speed-ups."""
    found = _baselines(cell)
    if not found:
        return "without compression: no baseline fits this cell"
    parts = " · ".join(f"{label} {s * 1e3:.2f} ms" for label, s in found)
    best = min(found, key=lambda x: x[1])
    line = f"without compression: {parts} → {_times(best[1] / seconds)} the best ({best[0]})"
    fp32 = dict(found).get("fp32")
    if fp32 is not None and best[0] != "fp32":
        y = fp32 / seconds  # the word again only where it differs
        same = (y >= 1) == (best[1] >= seconds)
        line += f", {y:.2f}× than fp32" if same else f", {_times(y)} fp32"
    return line


def _times(x: float) -> str:
    """`2.40× faster than` for a ratio of 2.4, `1.25× slower than` for 0.8."""
    return f"{x:.2f}× faster than" if x >= 1 else f"{1 / x:.2f}× slower than"


def _emulate(cell: Any) -> Any:
    """`cell`'s iteration run on local Ray actors (--mode emulate), as a SimResult; a Ray
    started here is shut down after."""
    from gcbench.backends.simulate import SimResult
    from gcbench.runner.backends import backend_for
    from gcbench.runner.local import connect

    backend = backend_for(cell)
    backend.check(cell)  # before Ray starts
    started = connect()
    try:
        import ray

        # as `gcbench run` does before its first cell: a cell the cluster cannot place
        # is a mistake in the flags (exit 2), not a cluster that changed mid-run
        backend.refuse_placement([cell], [n for n in ray.nodes() if n.get("Alive")])
        rows, _, record = backend.run(cell, 1)  # (no --trace with --mode emulate)
        metrics = {k: v for k, v in rows[0].items() if k != "repetition"}
        return SimResult(metrics, [], record)
    finally:
        if started:
            import ray

            ray.shutdown()


def _write_trace(path: Path, cell: Any, spans: Any) -> None:
    """`--trace`: the Chrome trace of `cell`'s iteration (its `spans`) written to `path`."""
    from gcbench.files import atomic_write
    from gcbench.sim.chrome import chrome_trace, symmetric_spans

    cl = cell.cluster
    data = chrome_trace(
        symmetric_spans(spans, cl.machines, cl.gpus_per_machine),
        cl.gpus_per_machine,
        machines=cl.machines,
    )
    atomic_write(path, dumps(data).encode())


# `--inter-gbps` of a one-machine cell given none: a stand-in no cost reads (one machine
# has no link between machines), so that `gcbench simulate --model resnet50` just runs
ONE_MACHINE_GBPS = 100.0


def _between(cell: Any) -> str:
    """The header's link between machines ("" for one machine: there is none)."""
    if cell.cluster.machines == 1:
        return ""
    return f"{cell.network.inter_gbps:g} Gbps · "


def _flags_cell(given: dict[str, Any]) -> Any:
    """The Cell that `simulate`'s (and `plan`'s) flags describe; ConfigError naming the
    flag of each mistake."""
    from pydantic import ValidationError

    from gcbench import strategies
    from gcbench.compress.specs import NoneSpec
    from gcbench.config.models import Cell

    def pick(flags: dict[str, str]) -> dict[str, Any]:
        return {
            field: given[flag[2:].replace("-", "_")]
            for field, flag in flags.items()
            if flag != "--model" and given[flag[2:].replace("-", "_")] is not None
        }

    strategy, compressor = given["strategy"], given["compressor"]
    spec: dict[str, Any] = {"name": given["model"], **pick(MODEL_FLAGS)}
    if given["batch"] is not None:
        spec["batch_size"] = given["batch"]
    chosen_compressor: Any = compressor
    found = strategies.find(strategy) if strategy else None
    if compressor is None and found is not None:
        chosen_compressor = strategies.pair_compressor(found.name, NoneSpec(kind="none"))[0]
    net = pick(NETWORK_FLAGS)
    if given["machines"] == 1 and "inter_gbps" not in net and "profile" not in net:
        net["inter_gbps"] = ONE_MACHINE_GBPS  # no link between machines to cost
    try:
        return Cell.model_validate(
            {
                "model": spec,
                "compressor": chosen_compressor or "none",
                "strategy": strategy,
                "fusion": given["fusion"],
                "device": given["device"],
                "network": net,
                "cluster": pick(CLUSTER_FLAGS),
                "compressor_costs": (
                    None if given["compressor_costs"] is None else str(given["compressor_costs"])
                ),
                "constraints": _constraints(given.get("constraints")),
                "mode": given.get("mode") or "simulate",
            }
        )
    except ValidationError as e:
        from gcbench.config.loader import message

        lines = []
        for err in e.errors():
            flag = _cell_flag(err["loc"], err["msg"])
            text = "required" if err["type"] == "missing" else message(err, Cell)
            if flag == "--inter-gbps" and err["type"] == "missing":
                text = "required across machines (or --network with a profile that gives it)"
            lines.append(f"{flag}: {text.removeprefix(flag[2:].replace('-', '_') + ': ')}")
        raise ConfigError(lines) from None


def _constraints(text: str | None) -> Any:
    """`--constraints 'key=value ...'` as a Constraints (ConfigError on a bad one)."""
    if text is None:
        return None
    from pydantic import ValidationError

    from gcbench.config.models import Constraints

    try:
        return Constraints.parse(text)
    except ValidationError as e:
        from gcbench.config.loader import message

        raise ConfigError(
            [
                f"--constraints: {'.'.join(map(str, err['loc']))}: {message(err, Constraints)}"
                for err in e.errors()
            ]
        ) from None
    except ValueError as e:  # a key given twice
        raise ConfigError(f"--constraints: {e}") from None


def plan(**given: Any) -> None:
    """Plan one cell with the ByteComp planner (--strategy bytecomp, the default;
    bytecomp-greedy, brute-force or upper-bound) and print the option each tensor takes,
    grouped, with the predicted iteration time and the planner's own time (planner_s).
    Takes the cell flags of `gcbench simulate`; --json prints the whole plan (each
    tensor's option and the buckets), as `gcbench run` stores it in
    results/<suite>/<run-id>/plans/<cell-id>.json.gz."""
    with errors():
        from gcbench import strategies

        given["strategy"] = given["strategy"] or "bytecomp"
        found = strategies.find(given["strategy"])
        if found is None or not found.planner:
            raise ConfigError(
                [
                    f"--strategy: {given['strategy']!r} is not a planner; plan takes "
                    f"{', '.join(sorted(strategies.planner_names()))}"
                ]
            )
        cell = _flags_cell(given)
        if given["compressor"] is not None:
            _compressor_used(given["compressor"], cell, None)
        from gcbench.backends.simulate import simulate_cell

        result = simulate_cell(cell)
    record = result.plan
    assert record is not None
    m = result.metrics
    if given["json_out"]:
        typer.echo(dumps({"cell": cell.flat(), "plan": record, "metrics": m}, indent=1))
        return
    cl = cell.cluster
    typer.echo(
        f"{cell.model.name} · {cell.strategy} · {cell.compressor.label()} · "
        f"{cl.machines}x{cl.gpus_per_machine} {cell.network.intra} · "
        f"{_between(cell)}{cell.device}"
        + (" · NCCL's collectives" if cell.network.collectives == "nccl" else "")
    )
    constraints = cell.constraints.label() if cell.constraints is not None else ""
    typer.echo(f"options: {constraints or 'the whole space (no constraints)'}")
    typer.echo(
        f"predicted iteration {m['iteration_s'] * 1e3:.2f} ms · planner "
        f"{m['planner_s'] * 1e3:.1f} ms · {m['buckets']} buckets"
    )
    typer.echo(_against_baselines(cell, m["iteration_s"]))
    groups: dict[str, list[int]] = {}
    for t in record["tensors"]:
        groups.setdefault(t["option"], []).append(t["numel"])
    width = max(len(o) for o in groups)
    typer.echo(f"{'option':<{width}}  tensors        MiB")
    for option, numels in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        typer.echo(f"{option:<{width}}  {len(numels):>7}  {sum(numels) * 4 / 2**20:>9.1f}")


def _plan_signature() -> None:
    """`plan` takes `simulate`'s flags, less --option, --trace, --plan and --mode (a plan
    is made by the simulator's planner), with --strategy's default bytecomp: typer reads
    the signature and annotations set here."""
    import inspect

    sig = inspect.signature(simulate, eval_str=True)  # typer reads evaluated annotations
    dropped = ("option", "trace", "plan_file", "mode")
    params = [p for name, p in sig.parameters.items() if name not in dropped]
    help_ = "bytecomp (default), bytecomp-greedy, brute-force (at most 10 tensors), upper-bound."
    strategy = Annotated[str | None, typer.Option("--strategy", help=help_, show_default=False)]
    params = [p.replace(annotation=strategy) if p.name == "strategy" else p for p in params]
    constraints = Annotated[
        str | None,
        typer.Option(
            "--constraints",
            help="What the planner may choose, as key=value pairs: space=all|named (all, "
            "the default: every GPU path of ByteComp's decision tree; named: the five "
            "named options, faster to plan), max_compressions=N, "
            "collectives=allreduce,allgather,..., levels=flat|hierarchical, gpu_only=true. "
            "E.g. 'space=named max_compressions=1'.",
            show_default=False,
        ),
    ]
    at = next(i for i, p in enumerate(params) if p.name == "json_out")
    params.insert(
        at,
        inspect.Parameter("constraints", params[at].kind, default=None, annotation=constraints),
    )
    plan.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    plan.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    app.command("plan")(plan)


_plan_signature()


def _cell_flag(loc: tuple[Any, ...], msg: str) -> str:
    """The `simulate` flag a Cell validation error at `loc` is about."""
    parts = [str(x) for x in loc]
    if not parts:  # a rule across fields: the strategy's pairs, the cost table's device,
        # the constraints, the precision
        if "precision" in msg:
            return "--precision"
        if "constraint" in msg:
            return "--constraints"
        if "emulat" in msg or "mode: train" in msg:
            return "--mode"
        return "--compressor-costs" if "compressor cost table" in msg else "--strategy"
    tables = {"model": MODEL_FLAGS, "network": NETWORK_FLAGS, "cluster": CLUSTER_FLAGS}
    if parts[0] not in tables:
        return "--" + parts[0].replace("_", "-")  # compressor, strategy, fusion, device
    flags = tables[parts[0]]
    if len(parts) > 1 and parts[1] in flags:
        return flags[parts[1]]
    if parts[0] == "network" and ("network profile" in msg or ".yaml" in msg):
        return "--network"  # the profile's own mistake, whatever field it names
    # a rule across one section's fields: the field its message names, else the section's
    for field in sorted(flags, key=len, reverse=True):
        if field in msg and field != "name":
            return flags[field]
    return {"model": "--model", "network": "--inter-gbps", "cluster": "--machines"}[parts[0]]


def _compressor_used(given: str, cell: Any, option: Any) -> None:
    """An explicit --compressor must be one the cell compresses with: a strategy without
    a compressor runs with `none`, one with its own compressor with that kind, and an
    option without compressed phases compresses nothing, so naming another compressor
    would print its name over numbers it had no part in."""
    from pydantic import TypeAdapter

    from gcbench import strategies
    from gcbench.compress.specs import CompressorSpec

    spec = TypeAdapter(CompressorSpec).validate_python(given)  # valid: the cell took it
    if option is not None:
        if spec.kind != "none" and not option.compressed:
            raise ConfigError(
                [f"--compressor: option {option.name!r} compresses nothing; got {given}"]
            )
        return
    if spec == cell.compressor:
        return
    info = strategies.get(cell.strategy)
    if info.compressor == "none":
        why = f"{cell.strategy} uses no compressor"
    else:
        why = f"{cell.strategy} uses its own compressor ({info.own})"
    raise ConfigError([f"--compressor: {why}; got {given}"])
