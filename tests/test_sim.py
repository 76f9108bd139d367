"""The simulator: the fixed-order engine, the iteration model against hand-computed
values, every option of the space executed, property tests over random plans (DESIGN
§5/§7), the defects fixed by timeline v2, Chrome traces and `gcbench simulate`."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import Case, cases
from typer.testing import CliRunner

from gcbench.backends.simulate import cell_profile, costs_for, plan_for, simulate_cell
from gcbench.cli import app
from gcbench.comm import (
    Link,
    intra_allgather_s,
    intra_reduce_scatter_s,
    nvlink_machine,
    pcie_machine,
    ring_allreduce_s,
)
from gcbench.config import Cell, expand, load_suite
from gcbench.errors import ConfigError
from gcbench.sim.chrome import chrome_trace, symmetric_spans
from gcbench.sim.iteration import Costs, Plan, fuse, simulate
from gcbench.sim.options import PRESETS, Option, declared_wire_bytes, enumerate_options
from gcbench.sim.trace import gpu_idle_while_backward_ready
from gcbench.zoo.profile import ModelProfile, TensorProfile, model_profile

from conftest import ROOT

STRATEGIES = ["fp32", "fp32-2level", "fp16", "allgather", "allgather-2level"]  # no servers


def cell(**kw) -> Cell:
    data = {
        "model": "tiny-mlp",
        "compressor": "none",
        "network": {"inter_gbps": 10},
        "cluster": {"machines": 2, "gpus_per_machine": 4},
        "strategy": "fp32",
    }
    data.update(kw)
    return Cell.model_validate(data)


def rn50(**kw) -> Cell:
    base = {
        "model": "resnet50",
        "compressor": "efsignsgd",
        "network": {"inter_gbps": 25},
        "cluster": {"machines": 4, "gpus_per_machine": 8},
        "strategy": "allgather",  # keeps the compressor (fp32 would run with none)
    }
    return cell(**{**base, **kw})


def run_option(c: Cell, option: Option, costs: Costs | None = None, fusion: str = "ddp"):
    profile = cell_profile(c)
    plan = Plan.uniform(fuse(profile, fusion), option)
    return simulate(profile, costs or costs_for(c, option), plan), profile


# --- the engine -------------------------------------------------------------------------


def test_engine_serves_each_stream_in_fixed_order_not_arrival_order():
    from reference_timeline import Timeline

    tl = Timeline()
    slow = tl.add("compute", "a", "backward", 5.0)
    fast = tl.add("compute", "b", "backward", 1.0, (slow,))
    first = tl.add("link", "x", "comm", 1.0, (slow,))  # ready at 5
    second = tl.add("link", "y", "comm", 1.0, (fast,))  # ready at 6: waits for x anyway
    third = tl.add("link", "z", "comm", 1.0)  # ready at 0, but added last: served last
    assert tl.end_s == 8.0
    assert (first.start_s, second.start_s, third.start_s) == (5.0, 6.0, 7.0)


def test_jobs_are_timed_as_they_are_added_and_an_empty_model_is_fine():
    from reference_timeline import Timeline

    tl = Timeline()
    a = tl.add("s", "a", "comm", 1.0)
    assert (a.start_s, a.end_s) == (0.0, 1.0)
    tl.add("t", "b", "comm", 2.0, (a,))
    assert tl.end_s == 3.0
    empty = ModelProfile("empty", 1, None, "samples", "v100", 0.0, 0.0, ())
    r = simulate(empty, costs_for(cell()), Plan([], []))
    assert r.iteration_s == 0.0 and r.metrics["scaling_factor"] == 1.0


@settings(
    max_examples=3 * settings.default.max_examples,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=cases(), data=st.data())
def test_the_one_recurrence_is_the_reference_event_engine(case: Case, data):
    """`simulate` runs the one recurrence (`sim.timeline`) the planner's kernel runs too;
    the reference event engine (`tests/reference_timeline.py`: linked jobs, each dependency
    an object) must give the same jobs, to the bit: names, streams, starts, durations and
    bytes, on random models, clusters, costs and plans — with a synchronous compressor
    (backward held while each chain runs), with measured payloads, and with an emulated
    worker's `sync` moving every collective (here: a peer later by a drawn delay, a
    slowest peer longer by a drawn factor)."""
    from reference_timeline import reference_iteration

    costs = case.costs
    if data.draw(st.booleans()):
        costs = replace(costs, synchronous=True)
    payloads = None
    if data.draw(st.booleans()):
        payloads = [[data.draw(st.floats(1, 1e6)) for _ in range(3)] for _ in case.plan.buckets]
    sync = None
    if data.draw(st.booleans()):
        delay = data.draw(st.floats(0, 1e-3))
        stretch = data.draw(st.floats(1, 3))

        def sync(level, start, dur):
            begin = start + (delay if level == "inter" else delay / 2)
            return begin, begin + dur * stretch

    want_s, want = reference_iteration(case.profile, costs, case.plan, payloads, sync)
    got = simulate(case.profile, costs, case.plan, payloads=payloads, sync=sync)
    assert got.iteration_s == want_s
    assert [(j.stream, j.name, j.kind, j.start_s, j.dur_s, j.end_s, j.bytes) for j in got.jobs] == [
        (j.stream, j.name, j.kind, j.start_s, j.dur_s, j.end_s, j.bytes) for j in want
    ]


# --- by hand ----------------------------------------------------------------------------


def test_ring_allreduce_cost_by_hand():
    link = Link(bandwidth_Bps=1e9, latency_s=1e-5, efficiency=0.5)
    # 2(n-1) alpha + 2(n-1)/n * S / (eta B) with n=4, S=8 MB: 6e-5 + 1.5 * 8e6 / 5e8
    assert ring_allreduce_s(8e6, 4, link) == pytest.approx(6e-5 + 0.024)
    assert ring_allreduce_s(8e6, 1, link) == 0.0


def smoke_cell(model: str, strategy: str, machines: int, gbps: float) -> Cell:
    suite = load_suite(ROOT / "suites/smoke.yaml")
    return next(
        c
        for c in expand(suite)
        if c.model.name == model
        and c.strategy == strategy
        and c.cluster.machines == machines
        and c.network.inter_gbps == gbps
    )


def _ddp_copy_s(nbytes: float) -> float:
    """DDP's copy of `nbytes` of fp32 gradients into its bucket's flat buffer or back out,
    on a V100: read and write each byte at its memory bandwidth, one launch."""
    from gcbench.zoo.devices import DEVICES

    v100 = DEVICES["v100"]
    return 2 * nbytes / (v100.mem_bandwidth_gbs * 1e9) + v100.kernel_overhead_us * 1e-6


def test_smoke_cell_iteration_time_by_hand():
    """tiny-mlp, fp32, 2 machines x 4 GPUs, 10 Gbps. Its 26,122 parameters (104,488 bytes)
    fit DDP's first 1 MiB bucket: each gradient copied into it as it is ready, then one
    ring allreduce over the 10 Gbps link (the bottleneck), the copy back to the gradients
    and the update."""
    c = smoke_cell("tiny-mlp", "fp32", 2, 10)
    p = model_profile("tiny-mlp", 16, "v100")
    assert [t.numel for t in p.tensors] == [10, 1280, 128, 16384, 128, 8192]
    n, nbytes = 8, 26122 * 4
    bandwidth = 10e9 / 8 * 0.7  # line rate x inter-machine efficiency, bytes/s
    alpha = 25e-6  # inter-machine latency per ring step
    allreduce = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth
    backward = sum(t.backward_s + _ddp_copy_s(4 * t.numel) for t in p.tensors)
    expected = p.forward_s + backward + allreduce + _ddp_copy_s(nbytes) + p.update_s
    m = simulate_cell(c).metrics
    assert m["iteration_s"] == pytest.approx(expected, rel=1e-12)
    assert m["comm_exposed_s"] == pytest.approx(allreduce + _ddp_copy_s(nbytes), rel=1e-9)
    assert m["wire_bytes"] == round(2 * 7 / 8 * nbytes)


def test_resnet50_buckets_by_hand():
    """resnet50, fp32, 4 machines x 4 GPUs, 100 Gbps: DDP buckets (close a bucket once it
    holds >= 1 MiB, then >= 25 MiB; each gradient copied into its bucket as it is ready),
    each allreduced in order once its last gradient is in and the link is free; after
    backward each bucket's copy back, in order, once its allreduce is done."""
    c = smoke_cell("resnet50", "fp32", 4, 100)
    p = model_profile("resnet50", 32, "v100")
    n, bandwidth, alpha = 16, 100e9 / 8 * 0.7, 25e-6
    ready, link_free, filled, cap = p.forward_s, 0.0, 0, 2**20
    buckets, done = 0, []
    for i, t in enumerate(p.tensors):
        ready += t.backward_s + _ddp_copy_s(t.numel * 4)  # and its copy into the bucket
        filled += t.numel * 4
        if filled >= cap or i == len(p.tensors) - 1:
            start = max(ready, link_free)
            link_free = start + 2 * (n - 1) * alpha + 2 * (n - 1) / n * filled / bandwidth
            done.append((link_free, filled))
            filled, cap, buckets = 0, 25 * 2**20, buckets + 1
    gpu = ready
    for end, nbytes in done:
        gpu = max(gpu, end) + _ddp_copy_s(nbytes)
    expected = gpu + p.update_s
    m = simulate_cell(c).metrics
    assert buckets == m["buckets"] == 5
    assert m["iteration_s"] == pytest.approx(expected, rel=1e-12)


def test_two_level_allgather_by_hand():
    """One bucket, 2 machines x 4 NVLink GPUs: DDP's copy into the bucket, intra
    reduce-scatter, the compression of 1/4 after backward (it waits on communication), an
    inter allgather of that payload on 4 rings sharing the NIC, one decompression, the
    intra allgather, the copy back out, the update."""
    c = rn50(
        model="tiny-mlp",
        compressor="efsignsgd",
        strategy="allgather-2level",
        cluster={"machines": 2, "gpus_per_machine": 4},
    )
    p = cell_profile(c)
    costs = costs_for(c)
    e = sum(t.numel for t in p.tensors)
    intra, inter = costs.machine.intra, costs.inter
    rs = 3 * intra.latency_s + 3 / 4 * 4 * e / intra.effective_Bps
    ring = Link(inter.bandwidth_Bps / 4, inter.latency_s, inter.efficiency)
    ag = inter.latency_s + costs.payload_bytes(e / 4) / ring.effective_Bps
    backward_end = p.forward_s + sum(t.backward_s for t in p.tensors)  # copies in included
    t = backward_end + rs  # rs starts when the bucket is ready
    t = max(t, backward_end) + costs.compress_s(e / 4)
    t += ag + costs.decompress_s(e / 4) + rs  # intra allgather costs what rs does
    t += _ddp_copy_s(4 * e)  # the copy back out of the bucket
    m = simulate_cell(c).metrics
    assert m["iteration_s"] == pytest.approx(t + p.update_s, rel=1e-12)


def test_single_gpu_iteration_is_compute():
    for strategy in STRATEGIES:
        c = cell(cluster={"machines": 1, "gpus_per_machine": 1}, strategy=strategy)
        m = simulate_cell(c).metrics
        assert m["iteration_s"] == pytest.approx(model_profile("tiny-mlp", 16, "v100").compute_s)
        assert m["scaling_factor"] == pytest.approx(1.0) and m["wire_bytes"] == 0


def test_fp16_halves_the_wire_bytes_and_pays_for_casts():
    fp32 = simulate_cell(cell(model="resnet50")).metrics
    fp16 = simulate_cell(cell(model="resnet50", strategy="fp16")).metrics
    assert fp16["wire_bytes"] * 2 == pytest.approx(fp32["wire_bytes"], abs=2)
    assert fp16["compress_total_s"] > 0 and fp32["compress_total_s"] == 0
    assert fp16["iteration_s"] < fp32["iteration_s"]  # 10 Gbps: communication-bound


def test_allgather_scales_badly_and_allreduce_does_not():
    """From 2 to 8 machines of 8 GPUs: ring allreduce's inter-machine communication grows
    <= 1.8x, the two-level allgather's >= 5x: every machine receives M-1 payloads."""
    comm = {}
    for strategy in ("fp32", "allgather-2level"):
        for machines in (2, 8):
            c = rn50(
                strategy=strategy,
                model="bert-base",
                cluster={"machines": machines, "gpus_per_machine": 8},
            )
            comm[strategy, machines] = simulate_cell(c).metrics["inter_comm_s"]
    assert comm["fp32", 8] / comm["fp32", 2] <= 1.8
    assert comm["allgather-2level", 8] / comm["allgather-2level", 2] >= 5


def test_low_rank_payloads_follow_each_buckets_shapes():
    c = rn50(strategy="powersgd", compressor="powersgd-r4")
    costs = costs_for(c)
    assert costs.tensor_round_bytes is not None
    ratio = 25_557_032 * 4 / sum(map(sum, costs.tensor_round_bytes))
    assert ratio == pytest.approx(66.5, rel=0.01)  # ACP-SGD Table I: 67x for resnet50


# --- every option -----------------------------------------------------------------------


def _streamed_bytes_per_bucket(jobs) -> dict[int, float]:
    per: dict[int, float] = defaultdict(float)
    for j in jobs:
        if j.kind == "comm":
            per[int(j.name.split()[1])] += j.bytes
    return per


@pytest.mark.slow
@pytest.mark.parametrize(
    ("compressor", "machines", "gpus", "intra"),
    [("dgc-1pct", 2, 4, "pcie"), ("randomk-1pct", 3, 2, "nvlink")],
)
def test_every_option_runs_and_streams_its_declared_bytes(compressor, machines, gpus, intra):
    """All 4,341 options of dgc (8,929 of additive randomk) on a small model, several
    buckets: the breakdown adds up, and the bytes on the streams equal what the option
    declares (`declared_wire_bytes`, computed from the phases alone)."""
    c = cell(
        model="tiny-cnn",
        compressor=compressor,
        strategy="allgather",
        network={"intra": intra, "inter_gbps": 25},
        cluster={"machines": machines, "gpus_per_machine": gpus, "cpu_cores": 6},
    )
    profile = cell_profile(c)
    costs = costs_for(c, PRESETS["allgather"])
    buckets = fuse(profile, "fixed:20000")
    assert len(buckets) >= 3
    elements = [sum(profile.tensors[i].numel for i in b) for b in buckets]
    options = enumerate_options(additive=costs.additive)
    assert len(options) == (8929 if costs.additive else 4341)
    for o in options:
        r = simulate(profile, costs, Plan.uniform(buckets, o))
        m = r.metrics
        parts = m["compute_s"] + m["compress_exposed_s"] + m["comm_exposed_s"]
        assert parts == pytest.approx(m["iteration_s"], rel=1e-9), o.name
        streamed = _streamed_bytes_per_bucket(r.jobs)
        for b, e in enumerate(elements):
            declared = declared_wire_bytes(
                o, e, machines, gpus, costs.payload_bytes, costs.splittable
            )
            assert streamed[b] == pytest.approx(declared, rel=1e-9, abs=1e-9), (o.name, b)


def test_rooted_collectives_rotate_their_root():
    """Bucket b's root in a group of n is rank b mod n: worker 0 aggregates bucket 0 of a
    gather itself; the other buckets' aggregation runs on their roots' streams."""
    c = cell(
        model="tiny-cnn", compressor="dgc-1pct", cluster={"machines": 1, "gpus_per_machine": 4}
    )
    option = Option.parse("gc flat:ga* gd gc flat:bc* gd")
    r, profile = run_option(c, option, fusion="tensor")
    root_streams = {j.stream for j in r.jobs if j.stream.startswith("root:")}
    n = len(profile.tensors)
    assert root_streams == {f"root:flat:{b % 4}" for b in range(n) if b % 4}
    own = [j.kind for j in r.jobs if j.stream == "compute" and j.name.startswith("bucket 0 ")]
    # (its own root: compress, decompress the gathered payloads, compress the aggregate;
    # then DDP's copy back out of the bucket)
    assert own == ["compress", "decompress", "compress", "copy"]
    other = [j.kind for j in r.jobs if j.stream == "compute" and j.name.startswith("bucket 1 ")]
    assert other == ["compress", "decompress", "copy"]  # one payload from its root


# --- properties over random plans -------------------------------------------------------

PROPERTY_SETTINGS = settings(
    max_examples=3 * settings.default.max_examples // 5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _iteration(case: Case, costs: Costs | None = None) -> float:
    return simulate(case.profile, costs or case.costs, case.plan).iteration_s


@PROPERTY_SETTINGS
@given(cases())
def test_breakdown_adds_up_streams_never_go_back_and_the_gpu_never_idles(case):
    r = simulate(case.profile, case.costs, case.plan)
    m = r.metrics
    parts = m["compute_s"] + m["compress_exposed_s"] + m["comm_exposed_s"]
    assert parts == pytest.approx(m["iteration_s"], rel=1e-9, abs=1e-12)
    assert 0 < m["scaling_factor"] <= 1 + 1e-9
    free: dict[str, float] = {}
    for j in r.jobs:  # jobs in service order per stream: never overlapping, never earlier
        assert j.dur_s >= 0 and j.start_s >= free.get(j.stream, 0.0) - 1e-15
        free[j.stream] = j.end_s
    assert gpu_idle_while_backward_ready(r.spans()) == pytest.approx(0.0, abs=1e-12)
    assert simulate(case.profile, case.costs, case.plan).spans() == r.spans()  # deterministic


def _scaled_link(link: Link, factor: float) -> Link:
    return Link(link.bandwidth_Bps * factor, link.latency_s, link.efficiency)


@PROPERTY_SETTINGS
@given(cases(), st.floats(1.0, 100.0))
def test_more_bandwidth_never_lengthens_an_iteration(case, factor):
    c = case.costs
    m = c.machine
    faster = replace(
        c,
        inter=_scaled_link(c.inter, factor),
        pcie=_scaled_link(c.pcie, factor),
        machine=replace(
            m,
            intra=_scaled_link(m.intra, factor),
            uplink=_scaled_link(m.uplink_link, factor),
            cross=_scaled_link(m.cross_link, factor),
        ),
    )
    assert _iteration(case, faster) <= _iteration(case) * (1 + 1e-12)


@PROPERTY_SETTINGS
@given(cases(), st.floats(0.0, 1.0))
def test_cheaper_compression_never_lengthens_an_iteration(case, factor):
    c = case.costs
    cheaper = replace(
        c,
        compress_s=lambda e: factor * c.compress_s(e),
        decompress_s=lambda e: factor * c.decompress_s(e),
        cpu_compress_s=lambda e: factor * c.cpu_compress_s(e),
        cpu_decompress_s=lambda e: factor * c.cpu_decompress_s(e),
        cast_s=lambda e: factor * c.cast_s(e),
    )
    assert _iteration(case, cheaper) <= _iteration(case) * (1 + 1e-12)


@PROPERTY_SETTINGS
@given(cases(), st.integers(1, 64))
def test_more_cores_stay_between_one_core_and_unlimited_cores(case, cores):
    """The pool deals buckets round-robin over worker 0's cores (b mod k), so more cores
    can lengthen an iteration (the counterexample below); but never beyond one core per
    GPU, and never below a core per bucket: each core's queue is a subsequence of the
    one-core queue, and a superset of a one-bucket queue."""
    g = case.costs.gpus_per_machine
    one = _iteration(case, replace(case.costs, cpu_cores=g))
    unlimited = _iteration(case, replace(case.costs, cpu_cores=g * len(case.plan.buckets)))
    t = _iteration(case, replace(case.costs, cpu_cores=max(g, cores)))
    assert unlimited * (1 - 1e-12) <= t <= one * (1 + 1e-12)


def test_more_cores_can_lengthen_an_iteration_by_at_most_the_pool_gap():
    """The counterexample hypothesis found (shrunk): 7 one-element buckets on 1 machine x 2
    NVLink GPUs. With 4 cores per GPU, bucket 0's and bucket 5's CPU decompressions land on
    cores 0 and 1; with 5, both on core 0, where bucket 5's waits behind bucket 0's."""
    tensors = tuple(TensorProfile(f"t{i}", (1,), 1, f"l{i}", 0.0) for i in range(7))
    profile = ModelProfile("pool", 1, None, "samples", "v100", 0.0, 0.0, tensors)
    costs = Costs(
        1,
        2,
        nvlink_machine(2, 1.0, 0.0, 1.0),
        Link(1e8, 0.0, 1.0),
        cpu_decompress_s=lambda e: 42.847e-6,
        payload_bytes=lambda e: 16 + 2 * e,
        splittable=False,
    )
    fp32 = PRESETS["fp32"]
    options = [Option.parse("intra:rs inter:red inter:bc gc intra:ag* cd"), *[fp32] * 4]
    options += [Option.parse("cc flat:a2a* cd gc flat:ag* gd"), fp32]
    plan = Plan([[i] for i in range(7)], options)

    def t(cores: int) -> float:
        return simulate(profile, replace(costs, cpu_cores=cores), plan).iteration_s

    assert t(10) > t(8) * 1.02  # 5 cores per GPU are slower than 4
    assert t(10) - t(8) <= t(2) - t(14)  # bounded by one core vs a core per bucket


# --- defects of 81933ad (each of these fails there) ---------------------------------------


@pytest.mark.parametrize("model", ["vgg16", "bert-base"])
def test_defect1_two_level_compression_never_stalls_backward(model):
    """At 81933ad the GPU compression of a two-level bucket waited in the in-order compute
    queue for the intra reduce-scatter: vgg16 and bert-base on 2x8 PCIe with efsignsgd
    idled the GPU 38 and 24 ms mid-backward."""
    c = cell(
        model=model,
        compressor="efsignsgd",
        strategy="allgather-2level",
        network={"intra": "pcie", "inter_gbps": 25},
        cluster={"machines": 2, "gpus_per_machine": 8},
    )
    spans = simulate_cell(c).spans
    assert gpu_idle_while_backward_ready(spans) == pytest.approx(0.0, abs=1e-12)


def test_defect2_cpu_offload_copies_and_cores_run_in_parallel():
    """At 81933ad copies to and from the host shared one FIFO stream and at most one core
    was ever busy. Now: separate directions, cores/G per GPU, buckets on different cores."""
    option = Option.parse("cc flat:ag* cd")
    c = rn50(cluster={"machines": 2, "gpus_per_machine": 4, "cpu_cores": 16})
    r, _ = run_option(c, option)
    streams = {j.stream for j in r.jobs}
    assert {"pcie:d2h", "pcie:h2d", "cpu:0", "cpu:3"} <= streams and "cpu:4" not in streams
    cpu = sorted((j for j in r.jobs if j.stream.startswith("cpu:")), key=lambda j: j.start_s)
    overlapping = any(a.end_s > b.start_s + 1e-12 for a, b in zip(cpu, cpu[1:], strict=False))
    assert overlapping  # two cores busy at once
    # every copy to the host starts when its bucket is ready (or the previous copy to
    # the host is done), never waiting for a copy back
    profile = cell_profile(c)
    ready, t = [], profile.forward_s
    for bucket in fuse(profile, "ddp"):
        t += sum(profile.tensors[i].backward_s for i in bucket)
        ready.append(t)
    d2h = [j for j in r.jobs if j.stream == "pcie:d2h"]
    previous = 0.0
    for j, at in zip(d2h, ready, strict=True):
        assert j.start_s == pytest.approx(max(at, previous), rel=1e-12)
        previous = j.end_s
    # a machine's cores are shared: 4 cores for 8 GPUs run one core at half speed
    half = rn50(cluster={"machines": 2, "gpus_per_machine": 8, "cpu_cores": 4})
    full = rn50(cluster={"machines": 2, "gpus_per_machine": 8, "cpu_cores": 8})
    a = [j for j in run_option(half, option)[0].jobs if j.stream.startswith("cpu:")]
    b = [j for j in run_option(full, option)[0].jobs if j.stream.startswith("cpu:")]
    assert {j.stream for j in a} == {j.stream for j in b} == {"cpu:0"}
    assert [x.dur_s for x in a] == pytest.approx([2 * y.dur_s for y in b])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_defect3_more_nics_never_add_bandwidth(strategy):
    """`inter_gbps` is the machine's total; at 81933ad `nics_per_machine: 2` doubled it
    (resnet50 fp32 on 4x8 at 25 Gbps: 115.7 ms instead of 139.0)."""
    one = simulate_cell(rn50(strategy=strategy)).metrics
    two = simulate_cell(rn50(strategy=strategy, network={"inter_gbps": 25, "nics_per_machine": 2}))
    assert two.metrics["iteration_s"] >= one["iteration_s"] * (1 - 1e-12)


def test_defect4_pcie_machines_have_two_switches():
    """With `intra: pcie` the intra-machine phases run on the two-switch machine of
    `gcbench.comm.pcie_machine`; at 81933ad they were one NVLink-style ring."""
    c = rn50(strategy="fp32-2level", network={"intra": "pcie", "inter_gbps": 25})
    profile = cell_profile(c)
    machine = pcie_machine(8, 2, 15.75, 5e-6, 0.8)
    expected = []
    for bucket in fuse(profile, "ddp"):
        nbytes = 4 * sum(profile.tensors[i].numel for i in bucket)
        expected += [intra_reduce_scatter_s(nbytes, machine), intra_allgather_s(nbytes, machine)]
    got = [s.dur_s for s in simulate_cell(c).spans if s.stream == "intra"]
    assert sorted(got) == pytest.approx(sorted(expected), rel=1e-12)


def test_defect5_a_compressed_allreduce_is_an_allreduce_or_an_error():
    """At 81933ad `Option(compress=True, collective="allreduce")` silently ran an allgather."""
    option = Option.parse("gc flat:ar* gd")
    with pytest.raises(ConfigError, match="additive"):
        run_option(rn50(compressor="dgc-1pct"), option)
    c = rn50(compressor="randomk-1pct")
    r, profile = run_option(c, option)
    costs = costs_for(c, option)
    n = 32
    for bucket in fuse(profile, "ddp"):
        e = sum(profile.tensors[i].numel for i in bucket)
        assert declared_wire_bytes(option, e, 4, 8, costs.payload_bytes) == pytest.approx(
            2 * (n - 1) / n * costs.payload_bytes(e)
        )
    assert r.metrics["wire_bytes"] == pytest.approx(
        sum(2 * (n - 1) / n * costs.payload_bytes(sum(profile.tensors[i].numel for i in b))
            for b in fuse(profile, "ddp")),
        rel=1e-9,
    )  # fmt: skip


# --- cells, traces, the command line ----------------------------------------------------


def test_fusion_is_a_cell_field():
    ddp, per_tensor = rn50(), rn50(fusion="tensor")
    assert ddp.id != per_tensor.id and ddp.id == rn50(fusion="ddp").id
    assert simulate_cell(per_tensor).metrics["buckets"] == len(cell_profile(ddp).tensors)
    assert len(plan_for(rn50(fusion="fixed:4000000"), cell_profile(ddp)).buckets) > 5
    with pytest.raises(ValueError):
        rn50(fusion="fixed:0")


def test_hitopkcomm_is_an_alias_of_the_two_level_allgather():
    a, b = rn50(strategy="hitopkcomm"), rn50(strategy="allgather-2level")
    assert a.strategy == "allgather-2level" and a.id == b.id


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("model", ["resnet50", "bert-base", "tiny-mlp"])
def test_every_strategy_is_deterministic_and_adds_up(strategy, model):
    c = rn50(strategy=strategy, model=model)
    r = simulate_cell(c)
    m = r.metrics
    assert 0 < m["scaling_factor"] <= 1 + 1e-12
    total = m["compute_s"] + m["compress_exposed_s"] + m["comm_exposed_s"]
    assert total == pytest.approx(m["iteration_s"], rel=1e-9)
    assert simulate_cell(c).spans == r.spans


def test_chrome_trace_names_threads_and_never_overlaps():
    c = rn50(strategy="allgather-2level", cluster={"machines": 2, "gpus_per_machine": 4})
    trace = chrome_trace(symmetric_spans(simulate_cell(c).spans, 2, 4), 4)
    events = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert any("compute" in n for n in names.values())
    assert any("inter_tx" in n for n in names.values())
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {"machine 0", "machine 1"}
    assert len({n.split()[1] for n in names.values()}) == 8  # every GPU has its streams
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:], strict=False))


def test_simulate_cli(tmp_path):
    out = tmp_path / "t.json"
    r = CliRunner().invoke(
        app,
        ["simulate", "--model", "resnet50", "--inter-gbps", "25", "--machines", "2",
         "--strategy", "allgather", "--compressor", "efsignsgd", "--trace", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["cell"]["strategy"] == "allgather" and data["metrics"]["iteration_s"] > 0
    assert json.loads(out.read_text())["traceEvents"]
    r = CliRunner().invoke(
        app,
        ["simulate", "--model", "resnet50", "--inter-gbps", "25", "--machines", "2",
         "--compressor", "dgc-1pct", "--option", "intra:rs gc inter:ag* gd intra:ag"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "option intra:rs gc inter:ag* gd intra:ag" in r.stdout
    r = CliRunner().invoke(
        app,
        ["simulate", "--model", "resnet50", "--inter-gbps", "25", "--compressor", "dgc-1pct",
         "--option", "gc flat:ar* gd"],
    )  # fmt: skip
    assert r.exit_code == 2 and "additive" in r.stderr
    r = CliRunner().invoke(app, ["simulate", "--model", "gpt3", "--inter-gbps", "-1"])
    assert r.exit_code == 2
    assert "did you mean 'gpt2'" in r.stderr and "--inter-gbps" in r.stderr


# The ByteComp testbed suites plan hundreds of cells (about 35 s and 40 s here), the
# bytecomp suite 528: a slice of each runs, in which every strategy meets each of its
# models, compressors, networks and clusters at least once (not their cross product).
PLANNED_SUITES = ("nvlink100.yaml", "pcie25.yaml")
SLICED_SUITES = (*PLANNED_SUITES, "bytecomp.yaml")
SLOW_SUITES = (*PLANNED_SUITES, "dgx-h100.yaml")  # seconds each: the slow pass


def _covering(cells: list[Cell]) -> list[Cell]:
    """A few of `cells` (greedily, in expand order) such that every (strategy, model),
    (strategy, compressor), (strategy, network) and (strategy, cluster) of `cells` is in
    one of them."""
    fields = ("model", "compressor", "network", "cluster")

    def pairs(c: Cell) -> frozenset:
        d = c.model_dump(mode="json")
        return frozenset((c.strategy, f, json.dumps(d[f], sort_keys=True)) for f in fields)

    keyed = [(c, pairs(c)) for c in cells]
    want = set().union(*(k for _, k in keyed))
    out = []
    while want:
        c, k = max(keyed, key=lambda ck: len(ck[1] & want))
        out.append(c)
        want -= k
    return out


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_SUITES else p
        for p in sorted((ROOT / "suites").glob("*.yaml"))
    ],
    ids=lambda p: p.name,
)
def test_every_shipped_suite_simulates(path):
    """Examples are tests (STYLE §13): every cell of every shipped suite expands (is
    valid) and runs in-process (the emulate suite's simulated: its emulation needs Ray,
    `test_cluster.py`); of the large suites, a slice covering every strategy with each
    model, compressor, network and cluster (`_covering`)."""
    from gcbench.runner import execute_cell

    cells = expand(load_suite(path))
    if path.name in SLICED_SUITES:
        cells = _covering(cells)
    for c in cells:
        if c.mode in ("emulate", "measure", "train"):  # their Ray runs: test_cluster,
            c = c.model_copy(update={"mode": "simulate", "train": None})  # _measure, _train
        rows, spans, _ = execute_cell(c, 1)
        assert 0 < rows[0]["scaling_factor"] <= 1
        assert spans[0]["kind"] == "forward" and spans[-1]["kind"] == "update"


# --- payloads fed by the emulator, and the sums a compression sees -----------------------


def _threshold_ctx(record=None):
    """A 4 x 8 NVLink cluster with 2 servers and threshold's size model on one tensor of
    4M values; `record` collects the `summed` each compression is planned at."""
    from gcbench.comm import Link
    from gcbench.comm.hierarchy import nvlink_machine
    from gcbench.compress.sparsify import Threshold
    from gcbench.sim.iteration import Costs, SimContext

    thr, numel = Threshold(3e-3), [4_000_000]

    def bucket_bytes(bucket, summed=1):
        if record is not None:
            record.append(summed)
        return thr.expected_bytes([numel[i] for i in bucket], None, summed)

    costs = Costs(4, 8, nvlink_machine(8, 1.0, 0.0, 1.0), Link(1e9, 0.0, 1.0),
                  bucket_bytes=bucket_bytes, splittable=False, servers=2,
                  compressor="threshold")  # fmt: skip
    return SimContext(costs, numel)


def _phase_sizes(monkeypatch, option, x, fed=None):
    """The size `lower` gives each phase (what a rank holds there), in phase order."""
    from gcbench.sim import iteration

    sizes: list[float] = []
    comm, servers = iteration.SimContext.comm, iteration.SimContext.servers_comm

    def rec_comm(self, level, name, nbytes, rings):
        sizes.append(nbytes)
        return comm(self, level, name, nbytes, rings)

    def rec_servers(self, name, nbytes, rings, work=0.0):
        sizes.append(nbytes)
        return servers(self, name, nbytes, rings, work)

    monkeypatch.setattr(iteration.SimContext, "comm", rec_comm)
    monkeypatch.setattr(iteration.SimContext, "servers_comm", rec_servers)
    iteration.lower(option, [0], 0, x, None, fed)
    monkeypatch.undo()
    return sizes


def test_fed_payloads_give_every_compression_its_own_size(monkeypatch):
    """Every emulated option (ByteComp's GPU paths and the presets) on 4 x 8 GPUs: the
    sizes the size model plans, read back per compression by `execute.payloads` as the
    emulator reads what workers sent, give every compressed phase the same size again;
    twice those sizes give every compressed phase twice its size (each `c` takes its own
    measured payload: a recompression after a sum or over a shard is not charged the
    first one's)."""
    from gcbench.cluster.execute import NotEmulated, check, payloads
    from gcbench.sim.options import PRESETS, enumerate_paths

    x = _threshold_ctx()
    levels = {"flat": 32, "intra": 8, "inter": 4}
    options = [*enumerate_paths(additive=False, servers=True),
               PRESETS["allgather-2level"], PRESETS["byteps-compress"]]  # fmt: skip
    several = 0
    for o in options:
        try:
            check(o)
        except NotEmulated:
            continue
        several += sum(1 for t in o.ops if t.op == "c") > 1
        model = _phase_sizes(monkeypatch, o, x)
        assert len(model) == len(o.phases), o.name
        for scale in (1, 2):
            sent = [[[scale * s for s in model]]]
            fed = payloads([o], sent, levels)[0]
            got = _phase_sizes(monkeypatch, o, x, fed)
            for p, m, g in zip(o.phases, model, got, strict=True):
                if p.compressed:
                    assert g == pytest.approx(scale * m, rel=1e-12), (o.name, p.token)
    assert several >= 20  # options that compress more than once were checked


@pytest.mark.parametrize(
    "name, planned",
    [
        ("intra:rs gc inter:ag* gd intra:ag", [1, 8]),  # the machine's 8 GPUs summed
        ("gc flat:ag* gd", [1]),
        ("gc intra:ga* inter:ps* gd gc intra:bc* gd", [1, 32]),  # the servers' sum of all
        ("gc intra:ga* gd gc inter:ag* gd intra:bc", [1, 8]),  # the root's sum of 8
        ("gc intra:a2a* gd gc inter:a2a* gd inter:ag intra:ag", [1, 8]),
    ],
)
def test_each_compression_is_planned_at_the_workers_summed_before_it(name, planned):
    """Threshold's payload follows how many workers' gradients were summed before each
    compression (`law.sum_tail`): the count `lower` plans each `c` at."""
    from gcbench.sim.iteration import lower
    from gcbench.sim.options import Option

    got: list[int] = []
    x = _threshold_ctx(got)
    lower(Option.parse(name), [0], 0, x)
    assert got == planned


def test_a_hierarchical_pair_closed_by_a_compressed_allgather_holds_the_whole_bucket():
    """`intra:rs gc inter:ag* intra:ag* cd`: the intra allgather is the second step of the
    intra reduce-scatter's pair (an inter allgather between them), so after `cd` the rank
    holds the whole bucket, copied back to the GPU whole, as after `flat:rs gc flat:ag* cd`."""
    from gcbench.sim.iteration import lower
    from gcbench.sim.options import Option

    x = _threshold_ctx()
    copies = []
    for name in ("intra:rs gc inter:ag* intra:ag* cd", "flat:rs gc flat:ag* cd"):
        steps, _ = lower(Option.parse(name), [0], 0, x)
        assert steps[-1][0] == "pcie:h2d"
        copies.append(steps[-1][2])
    assert copies[0] == pytest.approx(copies[1], rel=1e-12)
