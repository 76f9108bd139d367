"""The strategies the papers compare (`gcbench.strategies`):
PS and BytePS against their formulas, low-rank allreduce, COVAP, HiPress, and which
(strategy, compressor, cluster) pairs a grid keeps."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from gcbench import strategies
from gcbench.backends.simulate import cell_profile, costs_for, simulate_cell
from gcbench.cli import CLUSTER_FLAGS, NETWORK_FLAGS, NETWORK_UNFLAGGED, app
from gcbench.compress.costs import qr_s
from gcbench.compress.lowrank import lowrank_view
from gcbench.compress.specs import ADDITIVE, KINDS, SPLITTABLE
from gcbench.config import Cell, Cluster, Network, expand, load_suite
from gcbench.config.grid import expand_counted
from gcbench.errors import ConfigError
from gcbench.sim.iteration import Plan, fuse, simulate
from gcbench.sim.kernel import Kernel
from gcbench.sim.options import PRESETS
from gcbench.strategies.baselines import hipress_partitions
from gcbench.strategies.lowrank import ALLREDUCE_PAYLOADS, round_bytes

from conftest import ROOT, write


def cell(**kw) -> Cell:
    data = {
        "model": "resnet50",
        "compressor": "none",
        "network": {"inter_gbps": 25},
        "cluster": {"machines": 4, "gpus_per_machine": 8},
        "strategy": "fp32",
    }
    data.update(kw)
    return Cell.model_validate(data)


def inter_jobs(c: Cell) -> list[float]:
    return [s.dur_s for s in simulate_cell(c).spans if s.stream == "inter_tx"]


def test_every_strategy_has_a_builder_and_every_kind_its_properties():
    from gcbench.compress.registry import REGISTRY, names

    assert set(strategies.names()) == set(strategies.registry())
    names()
    for kind in KINDS:
        assert (kind in ADDITIVE) == REGISTRY[kind].additive, kind
        assert (kind in SPLITTABLE) == REGISTRY[kind].splittable, kind


# --- PS and BytePS ------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["tiny-mlp", "resnet50", "bert-base"])
@pytest.mark.parametrize("machines", [2, 5])
def test_byteps_without_servers_on_one_gpu_machines_is_fp32(model, machines):
    cluster = {"machines": machines, "gpus_per_machine": 1}
    fp32 = simulate_cell(cell(model=model, cluster=cluster)).metrics
    byteps = simulate_cell(cell(model=model, cluster=cluster, strategy="byteps")).metrics
    assert byteps["iteration_s"] == pytest.approx(fp32["iteration_s"], rel=1e-9)
    assert byteps["wire_bytes"] == pytest.approx(fp32["wire_bytes"], rel=1e-9)


def test_byteps_without_servers_allreduces_across_machines():
    """With G > 1 and k = 0, BytePS's inter phase is a ring allreduce over the machines:
    the inter phase of the hierarchical allreduce."""
    from gcbench.comm import ring_allreduce_s

    c = cell(strategy="byteps")
    got = inter_jobs(c)
    assert got == pytest.approx(inter_jobs(cell(strategy="fp32-2level")), rel=1e-12)
    profile, costs = cell_profile(c), costs_for(c)
    for dur, bucket in zip(got, fuse(profile, "ddp"), strict=True):
        nbytes = 4 * sum(profile.tensors[i].numel for i in bucket)
        assert dur == pytest.approx(ring_allreduce_s(nbytes, 4, costs.inter), rel=1e-12)


def _ps_and_byteps(machines: int, servers: int, **costs_kw):
    c = cell(model="tiny-mlp", strategy="ps", cluster={"machines": machines,
             "gpus_per_machine": 1, "cpu_servers": servers})  # fmt: skip
    profile = cell_profile(c)
    buckets = fuse(profile, "ddp")
    assert len(buckets) == 1
    costs = replace(costs_for(c), **costs_kw)
    out = {}
    for name in ("ps", "byteps"):
        out[name] = simulate(profile, costs, Plan.uniform(buckets, PRESETS[name])).iteration_s
    return out, profile, costs


def test_byteps_with_a_server_per_machine_is_ps():
    """k = n: BytePS sends everything through the servers. With the pipeline fill off and
    one partition per server it equals PS to 1e-9; with both on (4,096,000-byte
    partitions, fill counted) PS pays the pipeline's fill, which BytePS's formula omits."""
    nbytes = 26122 * 4  # tiny-mlp in one bucket
    t, _, _ = _ps_and_byteps(4, 4, partition_bytes=nbytes / 4, pipeline_fill=False)
    assert t["byteps"] == pytest.approx(t["ps"], rel=1e-9)
    # Both on: the bucket (104,488 bytes) is one 4,096,000-byte partition, so one server
    # receives all n copies (push n*S/B) and the pull waits for the push (fill): 8 S/B
    # against BytePS's S/B, + 2 alpha each.
    t, profile, costs = _ps_and_byteps(4, 4)
    compute = profile.compute_s + costs.bucket_copy_s(26122)  # and DDP's copy back
    alpha, eta_b = 25e-6, 25e9 / 8 * 0.7
    assert t["ps"] - compute == pytest.approx(8 * nbytes / eta_b + 2 * alpha, rel=1e-9)
    assert t["byteps"] - compute == pytest.approx(nbytes / eta_b + 2 * alpha, rel=1e-9)


def test_one_buckets_byteps_time_is_the_slides_formula():
    """t = 2n(n-1) S / ((n^2 + kn - 2k) eta B), no latency (BytePS slides)."""
    n, k = 4, 2
    c = cell(
        model="tiny-mlp",
        strategy="byteps",
        network={"inter_gbps": 10, "inter_latency_us": 0},
        cluster={"machines": n, "gpus_per_machine": 1, "cpu_servers": k},
    )
    S, eta_B = 26122 * 4, 10e9 / 8 * 0.7
    t = 2 * n * (n - 1) * S / ((n * n + k * n - 2 * k) * eta_B)
    assert inter_jobs(c) == pytest.approx([t], rel=1e-12)


def test_more_cpu_servers_never_slow_byteps_down():
    times = [
        simulate_cell(
            cell(strategy="byteps", cluster={"machines": 4, "gpus_per_machine": 8,
                                               "cpu_servers": k})  # fmt: skip
        ).metrics["iteration_s"]
        for k in range(0, 6)
    ]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:], strict=False))


def test_byteps_compress_pays_for_the_servers_compression():
    c = cell(
        strategy="byteps-compress",
        compressor="efsignsgd",
        cluster={"machines": 4, "gpus_per_machine": 8, "cpu_servers": 4},
    )
    profile, costs = cell_profile(c), costs_for(c)
    plan = Plan.uniform(fuse(profile, "ddp"), PRESETS["byteps-compress"])
    base = simulate(profile, costs, plan).iteration_s
    slow = replace(costs, cpu_decompress_s=lambda e: 10 * costs.cpu_decompress_s(e))
    assert simulate(profile, slow, plan).iteration_s > base
    # a machine's GPUs compress on the GPU; only the servers use CPUs
    assert not any(s.stream.startswith("cpu:") for s in simulate_cell(c).spans)


# --- low rank, COVAP, HiPress -------------------------------------------------------------


def test_powersgd_runs_each_bucket_as_torchs_hook_does():
    """Power-SGD* is torch's powerSGD_hook: per bucket an allreduce of the uncompressed
    tensors, then of the Ps, then of the Qs; two QRs per compressed matrix; and backward
    waits for the bucket's last work (the hook synchronises)."""
    c = cell(strategy="powersgd", compressor="powersgd-r4")
    r = simulate_cell(c)
    n = 32
    profile = cell_profile(c)
    p_bytes, q_bytes = round_bytes(c, profile)
    sent = 2 * (n - 1) / n * (sum(p_bytes) + sum(q_bytes))
    assert r.metrics["wire_bytes"] == pytest.approx(sent, abs=len(profile.tensors))
    comm = {s.name: s for s in r.spans if s.kind == "comm"}
    buckets = fuse(profile, "ddp")
    assert len(comm) == 3 * len(buckets)
    raw_bytes = [q if p == 0 else 0.0 for p, q in zip(p_bytes, q_bytes, strict=True)]
    backward = {s.name: s for s in r.spans if s.kind == "backward"}
    for b, bucket in enumerate(buckets):
        raw, p, q = (comm[f"bucket {b} flat:ar*{t}"] for t in ("", " round 1", " round 2"))
        assert raw.bytes == pytest.approx(2 * (n - 1) / n * sum(raw_bytes[i] for i in bucket))
        assert p.bytes == pytest.approx(2 * (n - 1) / n * sum(p_bytes[i] for i in bucket))
        mine = [s for s in r.spans if s.name.startswith(f"bucket {b} ")]
        assert [s.kind for s in mine[-2:]] == ["decompress", "copy"]  # DDP's copy back last
        if bucket[-1] + 1 < len(profile.tensors):  # backward resumes after the bucket
            assert backward[profile.tensors[bucket[-1] + 1].name].start_s >= mine[-1].end_s
    m = r.metrics  # nothing overlaps: every second of communication is exposed, and so
    # are DDP's bucket copies (counted with it)
    copies = sum(s.dur_s for s in r.spans if s.kind == "copy")
    assert copies > 0
    assert m["comm_exposed_s"] == pytest.approx(m["comm_total_s"] + copies, rel=1e-9)
    # two QRs per matrix under the hook, one with the compressor's own option, none
    # without the per-tensor costs
    matrices = sum(lowrank_view(t.shape, 4) is not None for t in profile.tensors)
    plan = Plan.uniform(buckets, ALLREDUCE_PAYLOADS)
    own = costs_for(c)
    totals = [
        simulate(profile, k, plan).metrics["compress_total_s"]
        for k in (replace(own, tensor_compress_s=None), own)
    ]
    assert totals[1] - totals[0] == pytest.approx(matrices * qr_s(4), rel=1e-9)
    assert m["compress_total_s"] - totals[1] == pytest.approx(matrices * qr_s(4), rel=1e-9)
    # without CUDA the hook does not synchronise (gloo runs its callbacks as each ends)
    cpu = cell(strategy="powersgd", compressor="powersgd-r4", device="cpu")
    step = strategies.get("powersgd").build(cpu, cell_profile(cpu), costs_for(cpu))[0]
    assert not step.costs.synchronous and len(step.costs.tensor_round_bytes or ()) == 3


def test_low_rank_compression_charges_one_qr_per_compressed_matrix():
    """A GPU QR is bound by launches, so a bucket of many small matrices costs more than
    its bytes say: ACP-SGD's compression in a period is its per-byte cost plus one QR per
    compressed matrix and step, vectors none, whichever factor the step sends; and the
    planner's kernel refuses a synchronous hook."""
    assert qr_s(1) == qr_s(4) < qr_s(32) < qr_s(64)  # held below 4 columns
    c = cell(strategy="acpsgd", compressor="acpsgd:rank=32", model="bert-base")
    profile = cell_profile(c)
    matrices = sum(lowrank_view(t.shape, 32) is not None for t in profile.tensors)
    assert 0 < matrices < len(profile.tensors)
    for step in strategies.get("acpsgd").build(c, profile, costs_for(c)):
        bare = replace(step.costs, tensor_compress_s=None)
        extra = (
            simulate(profile, step.costs, step.plan).metrics["compress_total_s"]
            - simulate(profile, bare, step.plan).metrics["compress_total_s"]
        )
        assert extra == pytest.approx(matrices * qr_s(32), rel=1e-9)
    with pytest.raises(ValueError, match="synchronous"):
        c = cell(strategy="powersgd", compressor="powersgd-r4")
        step = strategies.get("powersgd").build(c, cell_profile(c), costs_for(c))[0]
        Kernel(cell_profile(c), step.costs)


def test_acpsgd_alternates_p_and_q_and_reports_the_mean():
    c = cell(strategy="acpsgd", compressor="acpsgd-r4")
    profile = cell_profile(c)
    n = 32
    p_step, q_step = (sum(round_bytes(c, profile, step)[0]) for step in (0, 1))
    m = simulate_cell(c).metrics
    assert m["wire_bytes"] == pytest.approx(2 * (n - 1) / n * (p_step + q_step) / 2, abs=40)
    steps = strategies.get("acpsgd").build(c, profile, costs_for(c))
    times = [simulate(profile, s.costs, s.plan).iteration_s for s in steps]
    assert m["iteration_s"] == pytest.approx(sum(times) / 2, rel=1e-12)


def test_covap_sends_each_shard_once_per_period():
    for interval in (2, 4):
        c = cell(strategy="covap", compressor=f"covap:interval={interval}", model="bert-base")
        m = simulate_cell(c).metrics
        fp32 = simulate_cell(cell(model="bert-base")).metrics
        assert m["wire_bytes"] == pytest.approx(fp32["wire_bytes"] / interval, rel=1e-6)
        assert m["iteration_s"] < fp32["iteration_s"]
        total = m["compute_s"] + m["compress_exposed_s"] + m["comm_exposed_s"]
        assert total == pytest.approx(m["iteration_s"], rel=1e-9)


def test_hipress_partitions_and_compresses_only_where_it_pays():
    profile = cell_profile(cell(model="bert-base"))
    buckets, elements = hipress_partitions(profile)
    assert all(4 * e <= 4_096_000 for e in elements)
    assert sum(elements) == pytest.approx(sum(t.numel for t in profile.tensors))
    compressed = {}
    for gbps in (1, 10_000):
        c = cell(model="bert-base", strategy="hipress", compressor="dgc-1pct",
                 network={"inter_gbps": gbps})  # fmt: skip
        plan = strategies.get("hipress").build(c, profile, costs_for(c))[0].plan
        compressed[gbps] = sum(o is not None and o.compressed for o in plan.options)
    assert compressed[1] > len(buckets) / 2 and compressed[10_000] < compressed[1]
    spans = simulate_cell(cell(model="bert-base", strategy="hipress", compressor="dgc-1pct",
                               network={"inter_gbps": 1})).spans  # fmt: skip
    assert len({s.stream for s in spans if s.stream.startswith("root:flat:")}) == 31


def test_acpsgd_table_iii_ordering_for_bert_base():
    """ACP-SGD Table III (8 x 4 RTX 2080 Ti, PCIe, 10 Gbps; BERT-base, batch 32, sequence
    64, rank 32): ACP-SGD 193 < Power-SGD* 292 < S-SGD 805 ms."""
    t = {}
    for strategy, compressor in (("fp32", "none"), ("powersgd", "powersgd-r32"),
                                 ("acpsgd", "acpsgd-r32")):  # fmt: skip
        c = cell(
            model={"name": "bert-base", "batch_size": 32, "seq_len": 64},
            strategy=strategy,
            compressor=compressor,
            device="rtx2080ti",
            network={"intra": "pcie", "inter_gbps": 10},
            cluster={"machines": 8, "gpus_per_machine": 4},
        )
        t[strategy] = simulate_cell(c).metrics["iteration_s"]
    assert t["acpsgd"] < t["powersgd"] < t["fp32"]


# --- strategy x compressor x cluster in grids ----------------------------------------------

CROSS = """\
name: cross
grid:
  model: [tiny-mlp]
  compressor: [none, fp16, dgc-1pct, efsignsgd, randomk-1pct, powersgd-r4, covap-i4]
  strategy: [fp32, allreduce, ps, byteps, powersgd, covap, allgather]
  network: [{inter_gbps: 10}]
  cluster: [{machines: 2, gpus_per_machine: 2}, {machines: 2, gpus_per_machine: 2, cpu_servers: 1}]
"""


def test_pairs_are_dropped_per_axis_value_with_their_reasons(tmp_path):
    suite = load_suite(write(tmp_path, "s.yaml", CROSS))
    cells, dropped = expand_counted(suite)
    by = {(c.strategy, c.compressor.kind, c.cluster.cpu_servers) for c in cells}
    # none and own strategies run once, with none or their own compressor
    assert {k for s, k, _ in by if s == "fp32"} == {"none"}
    assert {k for s, k, _ in by if s == "powersgd"} == {"powersgd"}
    assert {k for s, k, _ in by if s == "covap"} == {"covap"}
    # allreduce keeps only additive compressors
    assert {k for s, k, _ in by if s == "allreduce"} == {"none", "fp16", "randomk"}
    # compressors that are strategies of their own run under those only
    assert {s for s, k, _ in by if k == "powersgd"} == {"powersgd"}
    reasons = dict(dropped)
    non_additive = [r for r in reasons if "not additive" in r]
    assert {r.split("and ")[1].split("'")[0] for r in non_additive} == {"dgc", "efsignsgd"}
    assert all(reasons[r] == 2 for r in non_additive)  # x 2 clusters
    # servers: ps needs them, fp32 and friends have none, byteps takes either
    assert {(s, k) for s, _, k in by if s == "ps"} == {("ps", 1)}
    assert {k for s, _, k in by if s == "byteps"} == {0, 1}
    assert not any(k for s, _, k in by if s in ("fp32", "allreduce", "powersgd", "allgather"))
    assert reasons["ps needs CPU servers (cpu_servers >= 1)"] == 7  # 7 compressors
    assert reasons["fp32 uses no CPU servers, and the cluster has cpu_servers: 1"] == 7


def test_validate_prints_what_it_dropped_and_a_grid_with_no_cell_is_an_error(tmp_path):
    path = write(tmp_path, "s.yaml", CROSS)
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and "that do not pair" in lines[1] and "--verbose" in lines[1]
    r = CliRunner().invoke(app, ["validate", "--verbose", str(path)])
    assert "dropped 2 grid points: allreduce allreduces payloads, and dgc's" in r.stdout
    assert "dropped 7 grid points: ps needs CPU servers" in r.stdout
    total = sum(int(x.split()[1]) for x in r.stdout.splitlines() if "  dropped" in x)
    assert f"dropped {total} grid points that do not pair" in lines[1]
    empty = write(tmp_path, "e.yaml", CROSS.replace(
        "strategy: [fp32, allreduce, ps, byteps, powersgd, covap, allgather]", "strategy: [ps]"
    ).replace(", {machines: 2, gpus_per_machine: 2, cpu_servers: 1}", ""))  # fmt: skip
    with pytest.raises(ConfigError, match="every cell of the grid was dropped"):
        expand(load_suite(empty))
    r = CliRunner().invoke(app, ["validate", str(empty)])
    assert r.exit_code == 2 and "every cell" in r.stderr


def test_one_cell_with_an_invalid_pair_names_the_property():
    for kw, message in (
        ({"strategy": "allreduce", "compressor": "dgc-1pct"}, "not additive"),
        ({"strategy": "ps"}, "needs CPU servers"),
        ({"strategy": "fp32", "cluster": {"machines": 2, "cpu_servers": 1}}, "no CPU servers"),
        ({"strategy": "allgather", "compressor": "powersgd-r4"}, "a strategy of its own"),
    ):
        with pytest.raises(ValueError, match=message):
            cell(**kw)
    # as in a grid, a strategy without a compressor or with its own takes that one
    assert cell(strategy="fp16", compressor="dgc-1pct").compressor.kind == "none"
    assert cell(strategy="powersgd", compressor="dgc-1pct").compressor.kind == "powersgd"
    assert cell(strategy="fp16", compressor="dgc-1pct").id == cell(strategy="fp16").id
    r = CliRunner().invoke(
        app,
        ["simulate", "--model", "resnet50", "--inter-gbps", "10", "--strategy", "allreduce",
         "--compressor", "topk-1pct"],
    )  # fmt: skip
    assert r.exit_code == 2 and "--strategy:" in r.stderr and "not additive" in r.stderr


def test_simulate_has_a_flag_for_every_network_and_cluster_field():
    assert set(NETWORK_FLAGS) | set(NETWORK_UNFLAGGED) == set(Network.model_fields)
    assert set(CLUSTER_FLAGS) == set(Cluster.model_fields)
    r = CliRunner().invoke(
        app,
        ["simulate", "--model", "bert-base", "--inter-gbps", "10", "--machines", "4",
         "--strategy", "byteps", "--cpu-servers", "2", "--cpu-cores", "8", "--server-gbps",
         "40", "--summation-gbs", "5", "--nics-per-machine", "2", "--fusion", "tensor",
         "--seq-len", "64", "--inter-efficiency", "0.5", "--inter-latency-us", "10",
         "--intra-gbs", "100", "--intra-latency-us", "2", "--intra-efficiency", "0.9",
         "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    flat = json.loads(r.stdout)["cell"]
    assert (flat["cpu_servers"], flat["server_gbps"], flat["summation_gbs"]) == (2, 40, 5)
    assert (flat["seq_len"], flat["fusion"], flat["inter_efficiency"]) == (64, "tensor", 0.5)
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--inter-gbps", "10",
                                 "--inter-efficiency", "2"])  # fmt: skip
    assert r.exit_code == 2 and "--inter-efficiency:" in r.stderr


def test_the_strategies_suite_has_every_strategy_and_compressor():
    suite = load_suite(ROOT / "suites/strategies.yaml")
    cells, dropped = expand_counted(suite)
    assert {c.strategy for c in cells} == set(strategies.names()) - strategies.planner_names()
    assert {c.compressor.kind for c in cells} == set(KINDS)
    assert dropped  # the crossing drops what does not pair


def valid(strategy: str) -> dict:
    """A compressor and cluster the strategy takes."""
    info = strategies.get(strategy)
    compressor = {"none": "none", "own": info.own, "additive": "randomk-1pct", "any": "dgc-1pct"}
    servers = 2 if info.servers == "required" else 0
    return {"compressor": compressor[info.compressor], "strategy": strategy,
            "cluster": {"machines": 4, "gpus_per_machine": 8, "cpu_servers": servers}}  # fmt: skip


@pytest.mark.parametrize("strategy", sorted(strategies.names()))
@pytest.mark.parametrize("model", ["resnet50", "bert-base"])
def test_every_strategy_adds_up_and_is_deterministic(strategy, model):
    if strategy == "brute-force":  # models of at most 10 tensors
        model = {"resnet50": "tiny-mlp", "bert-base": "tiny-cnn"}[model]
    c = cell(model=model, **valid(strategy))
    r = simulate_cell(c)
    m = r.metrics
    assert 0 < m["scaling_factor"] <= 1 + 1e-12
    total = m["compute_s"] + m["compress_exposed_s"] + m["comm_exposed_s"]
    assert total == pytest.approx(m["iteration_s"], rel=1e-9)
    assert simulate_cell(c).spans == r.spans
    one = cell(model=model, **{**valid(strategy), "cluster": {"machines": 1, "gpus_per_machine": 1,
               "cpu_servers": valid(strategy)["cluster"]["cpu_servers"]}})  # fmt: skip
    single = simulate_cell(one).metrics
    assert single["iteration_s"] == pytest.approx(cell_profile(one).compute_s, rel=1e-12)
    assert single["wire_bytes"] == 0


@pytest.mark.parametrize("name", ["ps", "byteps", "byteps-compress"])
@pytest.mark.parametrize("servers", [1, 3])
def test_server_schemes_stream_their_declared_bytes(name, servers):
    from gcbench.sim.options import declared_wire_bytes

    c = cell(model="tiny-cnn", strategy=name, compressor="dgc-1pct",
             cluster={"machines": 3, "gpus_per_machine": 4, "cpu_servers": servers})  # fmt: skip
    profile, costs = cell_profile(c), costs_for(c)
    buckets = fuse(profile, "fixed:20000")
    r = simulate(profile, costs, Plan.uniform(buckets, PRESETS[name]))
    streamed = sum(j.bytes for j in r.jobs if j.kind == "comm")
    declared = sum(
        declared_wire_bytes(PRESETS[name], sum(profile.tensors[i].numel for i in b), 3, 4,
                            costs.payload_bytes, costs.splittable, servers)
        for b in buckets
    )  # fmt: skip
    assert streamed == pytest.approx(declared, rel=1e-9)
