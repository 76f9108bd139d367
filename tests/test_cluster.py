"""Emulation on Ray actors (issue #14): real gradients, compressors and gloo collectives
on loopback, checked against sums computed here from the same seeds."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from gcbench.cluster.emulate import emulate_cell, plan_of
from gcbench.cluster.execute import NotEmulated
from gcbench.cluster.gradients import bucket_gradient, gradient
from gcbench.compress import create
from gcbench.config import Cell


def cell(
    strategy: str, compressor: str = "none", machines: int = 2, gpus: int = 2, servers: int = 0
) -> Cell:
    return Cell.model_validate(
        {
            "model": "tiny-mlp",
            "compressor": compressor,
            "network": {"inter_gbps": 10},
            "cluster": {"machines": machines, "gpus_per_machine": gpus, "cpu_servers": servers},
            "strategy": strategy,
        }
    )


def test_gradients_are_reproducible_heavy_tailed_and_differ_per_worker():
    a, b = gradient(0, 0, 0, 3, 100_000), gradient(0, 0, 0, 3, 100_000)
    assert torch.equal(a, b)
    assert not torch.equal(a, gradient(0, 1, 0, 3, 100_000))
    assert not torch.equal(a, gradient(0, 0, 1, 3, 100_000))
    z = a / a.std()
    kurtosis = float((z - z.mean()).pow(4).mean())
    assert kurtosis > 6  # Student-t(3): heavy tails (a normal's is 3)


@pytest.mark.parametrize("strategy", ["fp32", "fp32-2level"])
def test_fp32_aggregation_is_the_exact_sum_within_fp32_rounding(ray_local, strategy):
    """Flat and hierarchical allreduce over 2 x 2 workers: every element of the aggregate
    within (n - 1) · 2^-23 · Σ|g| of the exact sum; each phase moves the bytes of its
    dense vector (2-level: the whole bucket into the reduce-scatter over 2, then its
    half-shard into the inter-machine allreduce and the allgather)."""
    e = emulate_cell(cell(strategy), steps=2)
    assert e.bound_ratio <= 1.0
    assert 0 < e.error_first < 1e-6 and e.error_total < 1e-6
    profile, plan, _ = plan_of(cell(strategy))
    buckets, numels = plan.buckets, [t.numel for t in profile.tensors]
    for rank_bytes in e.phase_bytes:
        for bucket, phases in zip(buckets, rank_bytes, strict=True):
            n = sum(numels[i] for i in bucket)
            if strategy == "fp32":
                assert phases == [4 * n]
            else:  # reduce-scatter over 2, allreduce of the shard, allgather of it
                shard = 4 * -(-n // 2)
                assert phases == [4 * n, shard, shard]


def test_compressed_allgather_moves_the_real_payloads(ray_local):
    """randomk through a flat allgather of payloads: each worker sends exactly the
    compressor's declared bytes, and the aggregate is the sum of every worker's
    decompressed payload (computed here from the same gradients: the payloads crossed
    the process group intact)."""
    c = cell("allgather", "randomk")
    e = emulate_cell(c, steps=1, keep=True)
    profile, plan, _ = plan_of(c)
    buckets, numels = plan.buckets, [t.numel for t in profile.tensors]
    comp = create("randomk")
    for b, bucket in enumerate(buckets):
        n = sum(numels[i] for i in bucket)
        assert all(rank[b] == [comp.wire_bytes(n, 0)] for rank in e.phase_bytes)
        want = torch.zeros(n)
        for r in range(4):
            g = bucket_gradient(c.seed, r, 0, bucket, numels)
            ref = create("randomk")
            want += ref.decompress(ref.compress(g, f"bucket{b}", 0), f"bucket{b}", 0).reshape(-1)
        assert torch.equal(e.aggregates[b], want)
    assert 0.9 < e.error_first < 1.0  # 1% of the values per worker reach the sum


@pytest.mark.parametrize(
    ("strategy", "compressor"),
    [("fp32", "none"), ("fp32-2level", "none"), ("allgather-2level", "randomk")],
)
def test_the_virtual_clock_is_the_simulators_for_data_independent_payloads(
    ray_local, strategy, compressor
):
    """Issue #14: same cell and plan, the emulated iteration on the virtual clock (each
    worker's timeline with the payloads it sent, collectives agreed across peers) equals
    the simulator's to 1e-9 when payload sizes do not depend on the data."""
    from gcbench.backends.simulate import simulate_cell

    c = cell(strategy, compressor)
    e = emulate_cell(c, steps=1)
    want = simulate_cell(c).metrics["iteration_s"]
    assert e.iteration_s == pytest.approx(want, rel=1e-9, abs=0)
    assert e.metrics["wire_bytes"] == simulate_cell(c).metrics["wire_bytes"]


@pytest.mark.parametrize("compressor", ["threelc", "threshold:threshold=0.01"])
def test_data_dependent_payloads_time_as_the_simulator_fed_with_their_sizes(
    ray_local, compressor
):
    """3LC's and threshold's payloads depend on the values: the virtual clock (each
    collective as long as its slowest worker's) within 5% of the simulator fed with the
    mean emulated sizes, and rank 0's clock timing the bytes it sent; the sizes below
    the compressor's declared bound; and the
    expected-size model the simulator plans with (`compress.law`, derived, not fitted)
    within 10% of the sizes the workers sent, so the unfed simulator within 5% too."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.cluster.emulate import fed_simulation

    c = cell("allgather", compressor)
    e = emulate_cell(c, steps=1)
    assert e.iteration_s == pytest.approx(fed_simulation(c, e), rel=0.05)
    # rank 0's clock times its own payloads (each sent to 3 peers), not the size model's
    mine = sum(bucket[0] for bucket in e.phase_bytes[0])
    assert e.metrics["wire_bytes"] == pytest.approx(3 * mine, abs=len(e.phase_bytes[0]))
    profile, plan, _ = plan_of(c)
    comp = create(c.compressor.kind, **c.compressor.params())
    sent = expected = 0.0
    for b, bucket in enumerate(plan.buckets):
        n = sum(profile.tensors[i].numel for i in bucket)
        assert all(rank[b][0] <= comp.wire_bytes(n, 0) for rank in e.phase_bytes)
        sent += sum(rank[b][0] for rank in e.phase_bytes) / len(e.phase_bytes)
        expected += comp.expected_bytes([profile.tensors[i].numel for i in bucket])
    assert expected == pytest.approx(sent, rel=0.10)
    assert simulate_cell(c).metrics["iteration_s"] == pytest.approx(e.iteration_s, rel=0.05)


@pytest.mark.slow
def test_real_gradients_are_planned_on_held_out_passes(ray_local):
    """`compute_time: measured`, threshold at 1e-3: the workers send their real
    gradients' payloads, and the simulator plans the cell with the values past τ counted
    on a backward pass no worker runs; its wire bytes within 10% of what the workers sent,
    where the law's own scales plan over 10% more. The passes run once, in the cell's
    task: the workers are handed the counts and run no held-out pass."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.cluster import backward

    base = cell("allgather", "threshold:threshold=0.001").model_dump()
    c = Cell.model_validate({**base, "mode": "emulate", "compute_time": "measured"})
    backward._HELD.clear()
    before = backward.held_out_passes()
    e = emulate_cell(c, steps=1)
    assert backward.held_out_passes() > before  # counted here, in the cell's task
    sent = e.phase_bytes[0][0][0]  # rank 0's one bucket, as it went on the wire
    assert e.metrics["wire_bytes"] == pytest.approx(3 * sent, abs=1)  # its clock's bytes
    assert simulate_cell(c).metrics["wire_bytes"] == pytest.approx(3 * sent, rel=0.10)
    profile_cell = Cell.model_validate({**base, "mode": "emulate"})
    assert simulate_cell(profile_cell).metrics["wire_bytes"] > 1.10 * 3 * sent
    assert e.held_out_passes == 0  # and by no worker


@pytest.mark.slow
def test_a_threshold_payload_compressed_after_a_sum_is_planned_as_one(ray_local):
    """byteps-compress: each machine's 2 GPUs reduce-scatter, then compress their summed
    shard, which keeps more values past the threshold than one worker's gradient would:
    the simulator plans it as the sum of 2 (`compress.law.sum_tail`), within 5% of the
    payloads the workers pushed (as one worker's, a third fewer), and its wire bytes and
    iteration within 5% of the workers' clocks."""
    from gcbench.backends.simulate import simulate_cell

    c = cell("byteps-compress", "threshold:threshold=0.01", servers=1)
    e = emulate_cell(c, steps=1)
    profile, plan, costs = plan_of(c)
    assert str(plan.options[0]) == "intra:rs gc inter:ps* gd intra:ag"
    assert len(plan.buckets) == 1
    pushed = sum(rank[0][1] for rank in e.phase_bytes) / len(e.phase_bytes)
    bucket = tuple(plan.buckets[0])
    assert costs.bucket_bytes(bucket, 2) / 2 == pytest.approx(pushed, rel=0.05)
    assert costs.bucket_bytes(bucket, 1) / 2 < 0.8 * pushed
    sim = simulate_cell(c).metrics
    assert sim["wire_bytes"] == pytest.approx(e.metrics["wire_bytes"], rel=0.05)
    assert sim["iteration_s"] == pytest.approx(e.iteration_s, rel=0.05)


@pytest.mark.parametrize("strategy", ["powersgd", "acpsgd"])
def test_low_rank_strategies_factor_each_tensor_and_time_as_the_simulator(ray_local, strategy):
    """PowerSGD as torch's hook runs it (the uncompressed tensors, P, then Q from the
    summed P) and ACP-SGD (P on even steps, Q on odd ones) on each tensor's own matrix,
    the factors of a bucket fused into one allreduce per round: each worker sends exactly
    the simulator's bytes, the virtual
    clock equals the simulator's (ACP-SGD: the mean over its period of two steps) to
    1e-9, and the aggregate equals the per-tensor algorithm run here on the same
    gradients (plain compressors, payloads summed by `reduce`)."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.compress.lowrank import ACPSGD, PowerSGD

    # a bucket per tensor: vectors alone, matrices alone (the wall clock's order checked)
    c = Cell.model_validate({**cell(strategy, strategy).model_dump(), "fusion": "tensor"})
    e = emulate_cell(c, steps=2, keep=True)
    sim = simulate_cell(c).metrics
    assert e.iteration_s == pytest.approx(sim["iteration_s"], rel=1e-9, abs=0)
    assert e.metrics["wire_bytes"] == pytest.approx(sim["wire_bytes"], rel=1e-12)
    profile, plan, _ = plan_of(c)
    shapes = [tuple(t.shape) for t in profile.tensors]
    numels = [t.numel for t in profile.tensors]
    ref = PowerSGD() if strategy == "powersgd" else ACPSGD()
    assert any(len(s) == 2 and ref.wire_bytes_for_shape(s, 0) < 4 * n
               for s, n in zip(shapes, numels, strict=True))  # fmt: skip
    for b, bucket in enumerate(plan.buckets):
        want = sum(ref.wire_bytes_for_shape(shapes[i], 0) for i in bucket)
        assert all(rank[b] == [want] for rank in e.phase_bytes)
        parts = []
        for j, i in enumerate(bucket):  # factors seeded by the key, alike on every worker
            key = f"bucket{b}#{j}"
            grads = [gradient(c.seed, r, 0, i, numels[i]).view(shapes[i]) for r in range(4)]
            comps = [PowerSGD() if strategy == "powersgd" else ACPSGD() for _ in range(4)]
            sent = [k.compress(g, key, 0) for k, g in zip(comps, grads, strict=True)]
            if strategy == "powersgd":  # Q from the summed P
                summed = comps[0].reduce(sent)
                sent = [k.compress(g, key, 0, summed) for k, g in zip(comps, grads, strict=True)]
            parts.append(comps[0].aggregate(sent, key, 0).reshape(-1))
        assert torch.allclose(e.aggregates[b], torch.cat(parts), rtol=1e-4, atol=1e-6)
    assert 0 < e.error_first < 1
    if strategy == "powersgd":  # the wall clock: the same work, each round on its stream
        wall = Cell.model_validate({**c.model_dump(), "mode": "emulate", "clock": "wall"})
        ew = emulate_cell(wall, steps=2, keep=True)
        assert ew.phase_bytes == e.phase_bytes
        # the wall clock's jobs carry the bytes each round sent
        assert ew.metrics["wire_bytes"] == pytest.approx(e.metrics["wire_bytes"], rel=1e-9)
        assert all(torch.equal(a, b) for a, b in zip(ew.aggregates, e.aggregates, strict=True))
        names = {(s.stream, s.name) for s in ew.spans}
        assert ("inter_tx", "bucket 0 flat:ar* round 2") in names  # the hook's three
        assert ("compute", "bucket 0 compress round 2") in names
        # synchronous: backward goes on only after the bucket's last work
        first = {s.name: s for s in ew.spans if s.kind == "backward"}
        for b, bucket in enumerate(plan.buckets):
            end = max(s.start_s + s.dur_s for s in ew.spans if s.name.startswith(f"bucket {b} "))
            if bucket[-1] + 1 < len(profile.tensors):
                assert first[profile.tensors[bucket[-1] + 1].name].start_s >= end - 1e-6


def test_covap_sends_the_selected_shards_with_error_feedback(ray_local):
    """COVAP (fusion per tensor, so the two large tensors are cut into 4 shards each,
    §III-C): every step each worker sends the shards its interval selects (§III-A), the
    others' residuals kept and added back, scaled (§III-D). Step 0: the selected shards'
    aggregate is the exact sum, the others' zero, and their bytes the shard's; the
    virtual clock is the simulator's mean over the period of 4 steps to 1e-9; the error
    of the aggregates summed over the 4 steps is the one COVAP's algorithm gives when
    run here on the same gradients (per worker a `covap` compressor and its residual)."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.cluster.execute import shard_slices
    from gcbench.compress import create_memory
    from gcbench.compress.covap import selected

    c = Cell.model_validate({**cell("covap", "covap").model_dump(), "fusion": "tensor"})
    e = emulate_cell(c, steps=1, keep=True)  # at least the period's 4 steps run
    sim = simulate_cell(c).metrics
    assert e.iteration_s == pytest.approx(sim["iteration_s"], rel=1e-9, abs=0)
    assert e.metrics["wire_bytes"] == pytest.approx(sim["wire_bytes"], rel=1e-12)
    profile, plan, _ = plan_of(c)
    numels = [t.numel for t in profile.tensors]
    cuts = shard_slices(plan.buckets, plan.elements, numels)
    assert sum(cut is not None for cut in cuts) == 8  # two tensors, four shards each

    def shard(rank: int, step: int, b: int) -> torch.Tensor:
        x = bucket_gradient(c.seed, rank, step, plan.buckets[b], numels)
        return x if cuts[b] is None else x[cuts[b][0] : cuts[b][1]]

    err = ref = 0.0
    comps = [create("covap") for _ in range(4)]
    memories = [create_memory("residual", coefficient=k.ef_coefficient) for k in comps]
    for b in range(len(plan.buckets)):
        exact = sum(shard(r, 0, b) for r in range(4))
        if selected(b, 0, 4):
            assert torch.allclose(e.aggregates[b], exact, rtol=1e-5, atol=1e-7)
            assert all(rank[b] == [4 * exact.numel()] for rank in e.phase_bytes)
        else:
            assert not e.aggregates[b].any() and all(rank[b] == [0] for rank in e.phase_bytes)
        total = torch.zeros(exact.numel(), dtype=torch.float64)
        truth = torch.zeros_like(total)
        for step in range(4):
            for r, (k, memory) in enumerate(zip(comps, memories, strict=True)):
                x = shard(r, step, b)
                sent = memory.compensate(x, f"bucket{b}", step)
                payload = k.compress(sent, f"bucket{b}#{b}", step)
                memory.update(sent, f"bucket{b}", step, k, payload)
                total += k.decompress(payload, f"bucket{b}#{b}", step).double()
                truth += x.double()
        err += float((total - truth).square().sum())
        ref += float(truth.square().sum())
    assert e.error_total == pytest.approx((err / ref) ** 0.5, rel=1e-4)
    assert e.error_total < e.error_first


def test_shards_and_partitions_tile_their_bucket():
    """HiPress's partitions of resnet50's large tensors and COVAP's shards: each run of
    plan buckets over the same tensors takes consecutive slices of their gradient that
    cover it exactly, each within one value of the plan's `elements`."""
    from gcbench.backends.simulate import cell_profile
    from gcbench.cluster.execute import shard_slices
    from gcbench.strategies.baselines import hipress_partitions

    resnet = Cell.model_validate({**cell("hipress").model_dump(), "model": "resnet50"})
    profile = cell_profile(resnet)
    covap = Cell.model_validate({**cell("covap", "covap").model_dump(), "fusion": "tensor"})
    _, plan, _ = plan_of(covap)
    cases = [
        (hipress_partitions(profile), [t.numel for t in profile.tensors]),
        ((plan.buckets, plan.elements), [t.numel for t in cell_profile(covap).tensors]),
    ]
    for (buckets, elements), numels in cases:
        cuts = shard_slices(buckets, elements, numels)
        assert sum(cut is not None for cut in cuts) >= 4
        end = 0
        for b, cut in enumerate(cuts):
            if cut is None:
                continue
            first = b == 0 or buckets[b - 1] != buckets[b]
            assert cut[0] == (0 if first else end)
            assert abs((cut[1] - cut[0]) - elements[b]) <= 1
            end = cut[1]
            if b + 1 == len(buckets) or buckets[b + 1] != buckets[b]:
                assert end == sum(numels[i] for i in buckets[b])


def test_every_option_of_bytecomps_space_is_emulated():
    """All 4,341 options of a non-additive compressor and 8,929 of an additive one pass
    emulation's check (the tests above run each kind of step); what lies outside the
    space (an alltoall of payloads an allgather brought, a compressed reduce) is
    refused by name before any actor starts."""
    from gcbench.cluster.execute import check
    from gcbench.sim.options import Option, enumerate_options

    for kind, count in (("dgc", 4341), ("randomk", 8929)):
        compressor = create(kind)
        options = enumerate_options(additive=compressor.additive)
        assert len(options) == count
        for o in options:
            check(o, compressor)
    with pytest.raises(NotEmulated, match="inter:a2a\\* of payloads forwarded from an allgather"):
        check(Option.parse("gc intra:ag* inter:a2a* gd inter:ag intra:ag"), create("dgc"))
    with pytest.raises(NotEmulated, match="a compressed reduce is not emulated"):
        check(Option.parse("gc flat:red* gd flat:bc"), create("randomk"))


def test_an_emulate_suite_runs_through_the_runner(ray_local, tmp_path):
    """`mode: emulate` cells run from `gcbench run`: one row per cell with the virtual
    clock's metrics (fp32's equal to the simulator's), the aggregation errors and the
    emulation settings; cells run one at a time (each uses every core)."""
    from gcbench import load_results
    from gcbench.backends.simulate import simulate_cell
    from gcbench.config import expand, load_suite
    from gcbench.runner import run_suite

    from conftest import write

    suite = load_suite(
        write(
            tmp_path,
            "e.yaml",
            "name: e\nmode: emulate\ngrid:\n  model: tiny-mlp\n"
            "  strategy: [fp32, allgather]\n  compressor: [efsignsgd]\n"
            "  network: {inter_gbps: 10}\n  cluster: {machines: 2, gpus_per_machine: 2}\n",
        )
    )
    summary = run_suite(suite, tmp_path / "r")
    assert summary.failed == 0
    rows = load_results(tmp_path / "r" / "e").set_index("strategy")
    assert list(rows["mode"].unique()) == ["emulate"] and list(rows["clock"]) == ["virtual"] * 2
    fp32 = next(c for c in expand(suite) if c.strategy == "fp32")
    assert rows.loc["fp32", "iteration_s"] == pytest.approx(
        simulate_cell(fp32.model_copy(update={"mode": "simulate"})).metrics["iteration_s"],
        rel=1e-9,
    )
    assert rows.loc["fp32", "agg_error"] < 1e-6
    assert 0.1 < rows.loc["allgather", "agg_error"] < 1.5  # signs and a scale per worker
    # each emulated cell's trace is worker 0's timeline, as the simulator's
    traces = list((tmp_path / "r" / "e").glob("*/traces/*.json.gz"))
    assert len(traces) == 2
    for path in traces:
        spans = json.loads(gzip.decompress(path.read_bytes()))
        assert {"forward", "backward", "comm", "update"} <= {s["kind"] for s in spans}


def test_an_emulated_planner_cell_stores_the_plan_it_executed(ray_local):
    """A planner's emulated cell returns the plan the workers executed, as a simulated
    planner cell stores it (the report's plan map)."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.runner.cell import execute_cell

    c = cell("bytecomp", "dgc")
    rows, spans, plan = execute_cell(c.model_copy(update={"mode": "emulate"}), 1)
    want = simulate_cell(c).plan
    assert plan is not None and want is not None
    assert plan["tensors"] == want["tensors"] and spans


def test_a_wall_clock_suite_records_a_real_iteration_per_repetition(ray_local, tmp_path):
    """`clock: wall` through `gcbench run`: a row per repetition, each a warm iteration
    of its own as it ran (so they differ), at least the profile's compute long, with the
    trace of the last."""
    from gcbench import load_results
    from gcbench.config import load_suite
    from gcbench.runner import run_suite

    from conftest import write

    suite = load_suite(
        write(
            tmp_path,
            "w.yaml",
            "name: w\nmode: emulate\nclock: wall\nrepetitions: 2\ngrid:\n  model: tiny-mlp\n"
            "  strategy: [byteps-compress]\n  compressor: [efsignsgd]\n"
            "  network: {inter_gbps: 10}\n"
            "  cluster: {machines: 2, gpus_per_machine: 2, cpu_servers: 1}\n",
        )
    )
    summary = run_suite(suite, tmp_path / "r")
    assert summary.failed == 0
    rows = load_results(tmp_path / "r" / "w")
    assert list(rows["clock"]) == ["wall"] * 2 and sorted(rows["repetition"]) == [0, 1]
    assert rows["iteration_s"].nunique() == 2
    assert (rows["iteration_s"] >= rows["compute_s"]).all() and (rows["comm_total_s"] > 0).all()
    assert len(list((tmp_path / "r" / "w").glob("*/traces/*.json.gz"))) == 1


def test_the_rendezvous_is_on_loopback_on_one_host_and_on_rank_0s_node_across_hosts():
    """The workers' bundles on nodes sharing one address (a local run,
    `ray.cluster_utils.Cluster`): 127.0.0.1. On several hosts (`ray up`): rank 0's node
    address (its bundle comes first), which the others reach; hosts of nodes that hold
    no worker do not count; a workers' node that left the cluster: infeasible, named."""
    from gcbench.cluster.emulate import rendezvous_host
    from gcbench.cluster.worker import interface_of
    from gcbench.errors import InfeasibleError

    local = [{"NodeID": n, "NodeManagerAddress": "10.0.0.5"} for n in "abc"]
    assert rendezvous_host(local, ["b", "c"]) == "127.0.0.1"
    hosts = [{"NodeID": n, "NodeManagerAddress": f"10.0.0.{i}"} for i, n in enumerate("abc")]
    assert rendezvous_host(hosts, ["b", "c"]) == "10.0.0.1"
    assert rendezvous_host(hosts, ["c", "a"]) == "10.0.0.2"
    assert rendezvous_host(hosts, ["b", "b"]) == "127.0.0.1"
    with pytest.raises(InfeasibleError, match="node z"):
        rendezvous_host(hosts, ["a", "z"])
    assert interface_of("127.0.0.1") == "lo" and interface_of("0.0.0.1") is None


def test_every_listening_socket_of_an_emulated_run_is_on_loopback(ray_local):
    """Issue #14: Ray's and gloo's listeners of an emulated cell (watched while it runs)
    are all on 127.0.0.1; the actors' own gloo listeners are among those seen, so the
    check could fail."""
    import threading
    import time

    import psutil

    seen: set[tuple[str, int, str]] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for c in psutil.net_connections(kind="inet"):
                if c.status != psutil.CONN_LISTEN or not c.pid:
                    continue
                try:
                    what = " ".join(psutil.Process(c.pid).cmdline())
                except psutil.Error:
                    continue
                if "ray" in what or "gcs_server" in what:
                    seen.add((c.laddr.ip, c.laddr.port, what[:60]))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        emulate_cell(cell("fp32-2level"), steps=2)
    finally:
        stop.set()
        watcher.join()
    assert any("Worker" in what for _, _, what in seen), seen  # the actors' gloo listeners
    assert {ip for ip, _, _ in seen} <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, seen


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [0, 2])
def test_workers_are_placed_one_machine_to_a_node_on_a_multi_node_cluster(gpus):
    """On a Ray cluster with a node per machine (three fake nodes on 127.0.0.1), a
    machine's workers share a node and the machines are on different nodes
    (STRICT_SPREAD), and the cell still aggregates exactly. Where the nodes have GPUs
    (two of them 2 each), every worker holds one, and cells that need more GPUs than a
    node or the cluster has are refused before any actor starts; when a GPU node leaves
    between cells, the next cell is infeasible (an `infeasible` row), said within 30 s.
    A PS cell's summation server runs on a node that declares the `summation` resource
    (two of the three), and three servers are refused (two units in all)."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "multinode_emulate.py"), str(gpus)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    nodes = got["nodes"]
    assert nodes[0] == nodes[1] and nodes[2] == nodes[3]  # ranks 0-1 machine 0, 2-3 machine 1
    assert nodes[0] != nodes[2]
    assert got["error"] < 1e-6
    assert len(got["summation_nodes"]) == 2
    assert got["server_nodes"][0] in got["summation_nodes"] and got["ps_error"] < 1e-6
    assert "3 summation servers cannot be placed" in got["refused"][-1]
    if gpus:
        assert len(got["refused"]) == 3  # 4 GPUs on one node; 6 in all; 3 servers
        assert all("cannot be placed on this Ray cluster" in r for r in got["refused"])
        # a GPU node leaves mid-run: the next cell is infeasible within 30 s, nothing left
        midrun = got["midrun"]
        assert midrun["raised"] and "changed during the run" in midrun["raised"], midrun
        assert midrun["seconds"] < 30 and midrun["groups_left"] == []
    else:
        assert len(got["refused"]) == 1  # CPU workers share the cores: any number fits


@pytest.mark.slow
def test_a_worker_killed_mid_cell_fails_the_attempt_at_once_and_the_cell_is_retried(ray_local):
    """Issue #14: SIGKILL one worker's process while the cell runs: the attempt stops
    as soon as its death is known (not after the survivors' 30 s collective timeout),
    the cell runs again on fresh actors and completes with the same exact aggregate.
    Only this test's Ray workers are candidates: a decoy process named `ray::Worker.run`
    that is not this test's survives (issue #35)."""
    import subprocess

    import psutil

    from conftest import kill_own_actor_while

    c = Cell.model_validate({**cell("fp32").model_dump(), "model": "resnet50"})
    # a decoy named as Ray's workers are, not this test's (its parent exits: not a child
    # of this process, as another user's worker would not be): it must survive
    out = subprocess.run(
        ["bash", "-c", "(exec -a ray::Worker.run sleep 300) >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    decoy = psutil.Process(int(out.stdout))

    killed, box = kill_own_actor_while(lambda: emulate_cell(c, steps=2), "Worker.run")
    me = psutil.Process()
    try:
        assert decoy.is_running() and decoy.cmdline()[0] == "ray::Worker.run"
        assert decoy not in me.children(recursive=True)
    finally:
        decoy.kill()  # started here: its PID is this test's to signal
    assert killed, "no worker was seen running"
    assert "error" not in box, box.get("error")
    e = box["value"]
    assert e.attempts == 2
    assert e.error_first < 1e-6 and e.bound_ratio <= 1.0


@pytest.mark.slow
def test_no_actor_or_placement_group_outlives_a_20_cell_run(ray_local):
    """Issue #14: after 20 emulated cells (four strategies and compressors, 1-2 machines),
    every worker actor is dead and every placement group removed; gloo's process groups
    die with their actors' processes."""
    from ray._private import state
    from ray.util import placement_group_table

    shapes = [(1, 2), (2, 2), (2, 1), (1, 3)]
    kinds = [
        ("fp32", "none"),
        ("allgather", "randomk"),
        ("fp32-2level", "none"),
        ("allgather", "efsignsgd"),
    ]
    before = {a for a, info in state.actors().items() if info["State"] == "ALIVE"}
    for k in range(20):
        strategy, compressor = kinds[k % 4]
        machines, gpus = shapes[k % 4]
        emulate_cell(cell(strategy, compressor, machines, gpus), steps=1)
    import time

    for _ in range(50):  # `ray.kill` is asynchronous: the GCS says DEAD a moment later
        alive = {
            a for a, info in state.actors().items()
            if info["State"] != "DEAD" and a not in before
        }  # fmt: skip
        if not alive:
            break
        time.sleep(0.2)
    assert not alive
    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())
    assert len(placement_group_table()) >= 20  # the check saw the cells' groups


def test_the_wall_clock_times_the_real_iteration_with_compute_waited_out(ray_local):
    """`clock: wall`: the same work as the virtual clock (the aggregate equal to the last
    bit, the same bytes per phase), timed as it ran. Compute is the profile's, waited
    out on the compute thread (scaled up here so it dominates): the iteration lasts at
    least that long, the backward jobs sit where the profile puts them, each bucket's
    collectives start once its gradients are ready and, for all but the last bucket,
    while backward still runs (overlap, as the simulator's streams)."""
    base = {**cell("fp32", "none").model_dump(), "fusion": "tensor"}
    base["network"]["compute_scale"] = 1000.0
    virtual = Cell.model_validate({**base, "mode": "emulate"})
    wall = Cell.model_validate({**base, "mode": "emulate", "clock": "wall"})
    assert wall.id != virtual.id
    ev, ew = emulate_cell(virtual, steps=2, keep=True), emulate_cell(wall, steps=2, keep=True)
    assert ew.phase_bytes == ev.phase_bytes
    assert all(torch.equal(a, b) for a, b in zip(ew.aggregates, ev.aggregates, strict=True))
    profile, plan, _ = plan_of(wall)
    compute = profile.forward_s + sum(t.backward_s for t in profile.tensors) + profile.update_s
    m = ew.metrics
    assert compute > 0.03 and len(plan.buckets) > 1
    assert compute <= m["iteration_s"] < compute + 2.0
    # waited out, never shorter; a busy host's sleeps overshoot (7% once in CI)
    assert compute * 0.99 <= m["compute_s"] < compute * 1.5
    assert m["wire_bytes"] == ev.metrics["wire_bytes"]  # counted as the simulator counts
    assert m["comm_total_s"] > 0 and m["throughput"] > 0
    assert ew.step_wall_s[-1] >= compute


def test_the_wall_clock_overlaps_communication_with_backward():
    """Without Ray: a worker of one (collectives over a group of one) with the wall
    clock's threads; each bucket's phase starts after its gradients are ready, and the
    first bucket's before backward ends."""
    import datetime

    import torch.distributed as dist

    from gcbench.cluster import worker as w

    base = {**cell("fp32", "none", machines=1, gpus=1).model_dump(), "fusion": "tensor"}
    base["network"]["compute_scale"] = 1000.0
    c = Cell.model_validate({**base, "mode": "emulate", "clock": "wall"})
    profile, plan, _ = plan_of(c)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))  # fmt: skip
    try:
        me = object.__new__(w.Worker)
        me.rank, me.world, me.gpus = 0, 1, 1
        g = dist.group.WORLD
        me.groups = w.Groups(g, g, g, {"flat": 1, "intra": 1, "inter": 1},
                             {"flat": 0, "intra": 0, "inter": 0})  # fmt: skip
        numels = [t.numel for t in profile.tensors]
        xs = [bucket_gradient(0, 0, 0, bk, numels) for bk in plan.buckets]
        outs, jobs, iteration_s = me.wall_step(
            profile, plan, xs, create("none"), w.create_memory("none"), 0
        )
    finally:
        dist.destroy_process_group()
    assert all(torch.equal(o.aggregate, x) for o, x in zip(outs, xs, strict=True))
    assert len(plan.buckets) > 1
    assert iteration_s >= profile.compute_s
    ready = {t.name: j.end_s for t in profile.tensors for j in jobs if j.name == t.name}
    backward_end = max(ready.values())
    comm = {j.name.split()[1]: j for j in jobs if j.kind == "comm"}
    assert sorted(comm) == [str(b) for b in range(len(plan.buckets))]
    for b, bucket in enumerate(plan.buckets):
        last = max(ready[profile.tensors[i].name] for i in bucket)
        assert comm[str(b)].start_s >= last
    assert comm["0"].start_s < backward_end  # overlapped with the rest of backward


@pytest.mark.parametrize("strategy", ["ps", "byteps"])
def test_summation_servers_sum_exactly_and_time_as_the_simulator(ray_local, strategy):
    """PS (`intra:rs inter:ps intra:ag`) and BytePS (its split between the servers and
    an allreduce) through one summation-server actor: the aggregate is the exact sum
    within fp32 rounding, each phase moves its dense slice, and the virtual clock is
    the simulator's to 1e-9."""
    from gcbench.backends.simulate import simulate_cell

    c = cell(strategy, servers=1)
    e = emulate_cell(c, steps=2)
    assert e.bound_ratio <= 1.0
    assert 0 < e.error_first < 1e-6 and e.error_total < 1e-6
    profile, plan, _ = plan_of(c)
    numels = [t.numel for t in profile.tensors]
    for rank_bytes in e.phase_bytes:
        for bucket, phases in zip(plan.buckets, rank_bytes, strict=True):
            shard = 4 * -(-sum(numels[i] for i in bucket) // 2)
            assert phases == [2 * shard, shard, shard]
    want = simulate_cell(c).metrics
    assert e.iteration_s == pytest.approx(want["iteration_s"], rel=1e-9, abs=0)
    assert e.metrics["wire_bytes"] == want["wire_bytes"]


def test_compressing_servers_decompress_sum_and_recompress(ray_local):
    """BytePS-Compress (`intra:rs gc inter:ps* gd intra:ag`) with randomk through two
    servers: each machine's shard is compressed (1% of its positions, the same on every
    worker of a step), the server decompresses both machines' payloads, sums and
    recompresses (the same positions), so the aggregate holds the exact sum of all four
    workers on those positions and zero elsewhere; the virtual clock is the simulator's."""
    from gcbench.backends.simulate import simulate_cell

    c = cell("byteps-compress", "randomk", servers=2)
    e = emulate_cell(c, steps=1, keep=True)
    profile, plan, _ = plan_of(c)
    numels = [t.numel for t in profile.tensors]
    for b, bucket in enumerate(plan.buckets):
        exact = sum(bucket_gradient(c.seed, r, 0, bucket, numels) for r in range(4))
        got = e.aggregates[b]
        kept = got != 0
        n = exact.numel()
        assert 0 < int(kept.sum()) <= 2 * create("randomk").wire_bytes(-(-n // 2), 0) // 4
        assert torch.allclose(got[kept], exact[kept], rtol=1e-5, atol=1e-7)
        payload = create("randomk").wire_bytes(-(-n // 2), 0)
        assert all(rank[b] == [4 * n, payload, 4 * -(-n // 2)] for rank in e.phase_bytes)
    assert e.iteration_s == pytest.approx(simulate_cell(c).metrics["iteration_s"], rel=1e-9)


def test_servers_get_bytepss_partitions_round_robin():
    """A dense slice is cut into 4,096,000-byte partitions dealt round-robin (the loads
    `comm.byteps.server_loads` charges); a payload goes whole to one server."""
    from gcbench.cluster.server import Servers
    from gcbench.comm.byteps import server_loads

    class Handle:
        def __init__(self):
            self.got: list[int] = []
            self.pushpull = self

        def remote(self, key, step, expected, rank, data, codec=""):
            self.got.append(data.element_size() * data.numel() if torch.is_tensor(data) else -1)
            return key

    handles = [Handle(), Handle(), Handle()]
    s = Servers(handles, ring=1, machines=2, machine=0)
    keys = s.push("bucket0", 0, torch.zeros(2_500_000))
    assert len(keys) == 3 and all("ring 1" in k for k in keys)
    assert [sum(h.got) for h in handles] == server_loads(4 * 2_500_000, 3)
    s.push("bucket0", 0, create("randomk").compress(torch.ones(1000), "b", 0))
    assert sorted(len(h.got) for h in handles) == [1, 1, 2]


@pytest.mark.parametrize("clock", ["virtual", "wall"])
def test_measured_compute_runs_the_real_backward_on_each_worker(ray_local, clock):
    """`compute_time: measured`: each worker's gradients are tiny-mlp's real gradients
    on its own seeded input (the aggregate is their sum, recomputed here from the same
    seeds, and not the synthetic gradients' sum), and the compute in the timeline is the
    forward and backward as they ran on the actor, not the profile's."""
    from gcbench.cluster.backward import Backward

    base = cell("fp32").model_dump()
    c = Cell.model_validate({**base, "mode": "emulate", "clock": clock, "compute_time": "measured"})
    e = emulate_cell(c, steps=2, keep=True)
    profile, plan, _ = plan_of(c)
    numels = [t.numel for t in profile.tensors]
    real = [Backward(profile, c.seed).step(r, 0)[0] for r in range(4)]
    for b, bucket in enumerate(plan.buckets):
        exact = sum(torch.cat([g[i] for i in bucket]) for g in real)
        synthetic = sum(bucket_gradient(c.seed, r, 0, bucket, numels) for r in range(4))
        assert torch.allclose(e.aggregates[b], exact, rtol=1e-5, atol=1e-7)
        assert not torch.allclose(e.aggregates[b], synthetic, rtol=1e-2)
    assert e.bound_ratio <= 1.0 and e.error_first < 1e-6
    m = e.metrics
    assert m["compute_s"] > 0 and m["compute_s"] != pytest.approx(profile.compute_s, rel=0.01)
    assert m["iteration_s"] >= m["compute_s"]
    backward = [s for s in e.spans if s.kind == "backward"]
    assert len(backward) == len(profile.tensors)


@pytest.mark.slow
def test_a_synchronous_hook_holds_the_real_backward_and_its_waits_are_not_compute(ray_local):
    """Power-SGD* with `compute_time: measured` on the wall clock: the real backward
    waits inside its hook for each bucket (a bucket per tensor here), the next tensor's
    backward starts after the bucket's last work, and the measured backward times leave
    the waits out (they are the bucket's, not compute)."""
    base = cell("powersgd", "powersgd").model_dump()
    c = Cell.model_validate({**base, "fusion": "tensor", "mode": "emulate", "clock": "wall",
                             "compute_time": "measured"})  # fmt: skip
    e = emulate_cell(c, steps=2, keep=True)
    profile, plan, _ = plan_of(c)
    backward = {s.name: s for s in e.spans if s.kind == "backward"}
    held = 0.0
    for b, bucket in enumerate(plan.buckets):
        mine = [s for s in e.spans if s.name.startswith(f"bucket {b} ")]
        end = max(s.start_s + s.dur_s for s in mine)
        if bucket[-1] + 1 < len(profile.tensors):
            nxt = backward[profile.tensors[bucket[-1] + 1].name]
            assert nxt.start_s >= end - 1e-6
            held += nxt.start_s - (backward[profile.tensors[bucket[-1]].name].start_s
                                   + backward[profile.tensors[bucket[-1]].name].dur_s)
    assert held > 0  # gaps between backward spans: the waits, outside compute


def test_measured_compute_is_refused_for_a_model_it_cannot_run(tmp_path):
    """A model whose profile comes from a file has no module to run: refused before
    any actor starts."""
    from gcbench.cluster.emulate import check_cell
    from gcbench.errors import ConfigError
    from gcbench.zoo.profile import model_profile
    from gcbench.zoo.profile_io import write_profile

    path = tmp_path / "tiny.json"
    write_profile(model_profile("tiny-mlp", 16, "v100"), path)
    base = cell("fp32").model_dump()
    base["model"] = {"name": "tiny-mlp", "profile": str(path)}
    c = Cell.model_validate({**base, "mode": "emulate", "compute_time": "measured"})
    with pytest.raises(ConfigError, match="compute_time: measured runs a zoo model"):
        check_cell(c)


def test_workers_execute_the_plan_the_cells_task_made():
    """A planner cell's plan travels to the workers and is executed as it is (no worker
    plans again); a named strategy's plan is rebuilt from the cell (it may carry costs
    of its own, e.g. upper-bound's)."""
    from dataclasses import replace

    bytecomp = cell("bytecomp", "dgc")
    _, plan, _ = plan_of(bytecomp)
    other = replace(plan, options=[plan.options[0]] * len(plan.options))
    assert plan_of(bytecomp, other)[1] is other
    fp32 = cell("fp32")
    assert plan_of(fp32, other)[1] is not other


def test_rooted_sections_reduce_on_the_root_and_broadcast(ray_local):
    """HiPress's uncompressed partitions (`flat:red flat:bc`, root = bucket mod n): the
    aggregate is the exact sum within fp32 rounding on every worker, and the virtual
    clock is the simulator's to 1e-9."""
    from gcbench.backends.simulate import simulate_cell

    c = cell("hipress", "dgc")
    _, plan, _ = plan_of(c)
    assert {o.name for o in plan.options} == {"flat:red flat:bc"}
    e = emulate_cell(c, steps=2)
    assert e.bound_ratio <= 1.0 and e.error_first < 1e-6
    assert e.iteration_s == pytest.approx(simulate_cell(c).metrics["iteration_s"], rel=1e-9)


def test_compressed_gathers_and_broadcasts_through_nested_roots(ray_local):
    """ByteComp's `intra:red gc inter:ga* inter:bc* intra:bc* gd` with randomk: the
    machine's sum on its root (local rank bucket mod 2), compressed there (the same 1%
    of positions on every machine), the machines' payloads gathered on the inter
    root, broadcast back across and inside the machines, and every worker sums the
    decompressed payloads: the exact sum of all four workers on those positions, zero
    elsewhere; the virtual clock is the simulator's to 1e-9."""
    from gcbench.backends.simulate import simulate_cell

    data = cell("bytecomp", "randomk").model_dump()
    data["constraints"] = {"collectives": ["reduce", "gather", "broadcast"], "gpu_only": True}
    c = Cell.model_validate(data)
    profile, plan, _ = plan_of(c)
    assert all("ga*" in o.name for o in plan.options)
    e = emulate_cell(c, steps=1, keep=True)
    numels = [t.numel for t in profile.tensors]
    for b, bucket in enumerate(plan.buckets):
        exact = sum(bucket_gradient(c.seed, r, 0, bucket, numels) for r in range(4))
        got = e.aggregates[b]
        kept = got != 0
        assert 0 < int(kept.sum()) <= create("randomk").wire_bytes(exact.numel(), 0) // 4
        assert torch.allclose(got[kept], exact[kept], rtol=1e-5, atol=1e-7)
    assert e.iteration_s == pytest.approx(simulate_cell(c).metrics["iteration_s"], rel=1e-9)


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("option", "clock"),
    [
        ("flat:red flat:bc", "virtual"),
        ("intra:red inter:ar intra:bc", "virtual"),
        ("intra:red gc inter:ag* gd intra:bc", "virtual"),
        ("gc intra:ga* gd gc inter:ag* gd intra:bc", "virtual"),
        ("gc intra:ga* gd gc inter:ag* gd intra:bc", "wall"),
        ("gc intra:ga* inter:ag* gd intra:bc", "virtual"),
        ("intra:rs cc inter:ag* cd intra:ag", "virtual"),
        ("intra:rs cc inter:ag* cd intra:ag", "wall"),
        ("flat:rs gc flat:ag* gd", "virtual"),
        ("gc flat:a2a* gd flat:ag", "virtual"),
        pytest.param("gc flat:a2a* gd flat:ag", "wall", marks=SLOW),
        pytest.param("gc flat:a2a* flat:ag* gd", "virtual", marks=SLOW),
        pytest.param("intra:rs gc inter:a2a* gd inter:ag intra:ag", "virtual", marks=SLOW),
        ("intra:rs gc inter:a2a* inter:ag* intra:ag* gd", "virtual"),
        pytest.param("gc intra:a2a* inter:ag* intra:ag* gd", "virtual", marks=SLOW),
        pytest.param("intra:red gc inter:a2a* gd inter:ag intra:bc", "virtual", marks=SLOW),
        ("gc flat:rs* gd flat:ag", "virtual"),
        pytest.param("gc flat:rs* flat:ag* gd", "virtual", marks=SLOW),
        pytest.param("gc flat:rs* gd flat:ag", "wall", marks=SLOW),
        pytest.param("intra:rs gc inter:rs* gd inter:ag intra:ag", "virtual", marks=SLOW),
        ("gc intra:rs* inter:ar* intra:ag* gd", "virtual"),
        ("gc intra:a2a* inter:a2a* inter:ag* intra:ag* gd", "virtual"),
        pytest.param("gc intra:a2a* inter:a2a* gd inter:ag intra:ag", "virtual", marks=SLOW),
        ("gc intra:ga* inter:a2a* inter:ag* intra:bc* gd", "virtual"),
        pytest.param("gc intra:ga* inter:a2a* gd inter:ag intra:bc", "wall", marks=SLOW),
        pytest.param("gc intra:rs* inter:a2a* gd inter:ag intra:ag", "virtual", marks=SLOW),
    ],
)
def test_options_the_planner_picks_run_as_the_simulator_times_them(
    ray_local, monkeypatch, option, clock
):
    """Options with rooted sections, CPU compression, alltoalls (a payload per
    destination) or compressed second steps that ByteComp's planner picks (the task's
    plan is what the workers run, so one is put there by hand): every worker
    ends with the exact sum (dense) or with the sum on randomk's positions and zero
    elsewhere (every compression of a bucket at a step keeps the same positions); the
    virtual clock is the simulator's on that plan to 1e-9, and the wall clock runs it
    (no collective out of order: the cell ends) with CPU work on a core's stream."""
    from dataclasses import replace

    from gcbench.cluster import emulate
    from gcbench.sim.iteration import simulate
    from gcbench.sim.options import Option

    # a bucket per tensor: roots at rank b mod n, so rank 0 (whose aggregate comes back)
    # is the root of some buckets and waits on others
    data = {**cell("bytecomp", "randomk").model_dump(), "fusion": "tensor"}
    c = Cell.model_validate({**data, "mode": "emulate", "clock": clock})
    profile, (step,) = emulate.period_of(c)
    assert len(step.plan.buckets) > 2
    plan = replace(step.plan, options=[Option.parse(option)] * len(step.plan.options))
    monkeypatch.setattr(
        emulate, "period_of", lambda _cell, planned=None: (profile, [replace(step, plan=plan)])
    )
    e = emulate_cell(c, steps=1, keep=True)
    numels = [t.numel for t in profile.tensors]
    for b, bucket in enumerate(plan.buckets):
        exact = sum(bucket_gradient(c.seed, r, 0, bucket, numels) for r in range(4))
        got = e.aggregates[b]
        compressed = "gc" in option or "cc" in option
        kept = got != 0 if compressed else torch.ones_like(got, dtype=torch.bool)
        assert int(kept.sum()) > 0
        assert torch.allclose(got[kept], exact[kept], rtol=1e-5, atol=1e-7)
    if clock == "virtual":
        # a compressed reduce-scatter sends a payload per destination, each of a shard:
        # randomk keeps at least one value of each, so the simulator is fed their sizes
        fed = None
        if "rs*" in option:
            from gcbench.cluster.execute import payloads

            fed = payloads(plan.options, e.phase_bytes, {"flat": 4, "intra": 2, "inter": 2})
        want = simulate(profile, step.costs, plan, keep_jobs=False, payloads=fed)
        assert e.iteration_s == pytest.approx(want.iteration_s, rel=1e-9)
        # the bytes too: tiny-mlp's iteration hardly moves with them, the bytes do
        assert e.metrics["wire_bytes"] == pytest.approx(want.metrics["wire_bytes"], rel=1e-9)
    elif "cc" in option:
        assert any(s.stream.startswith("cpu:") and s.kind == "compress" for s in e.spans)


def test_actors_the_clusters_memory_cannot_hold_are_refused_before_any_starts():
    """A CPU-only Ray cluster took any number of actors (issue #35 item 17: 2 x 16
    tiny-mlp workers, ~150 MB each, ran 214 s into a 5 GB limit; up to 2^20 GPUs were
    accepted): the cell is refused in one line against the nodes' `memory` resource."""
    from gcbench.cluster.emulate import ACTOR_BASE_BYTES, refuse_placement
    from gcbench.errors import ConfigError

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 5e9}}]
    small = Cell.model_validate({**cell("fp32").model_dump(), "model": "tiny-mlp"})
    refuse_placement(small, nodes)  # 2 x 2 workers: well within
    big = small.model_copy(update={"cluster": small.cluster.model_copy(
        update={"machines": 2, "gpus_per_machine": 16})})  # fmt: skip
    with pytest.raises(ConfigError) as e:
        refuse_placement(big, nodes)
    (line,) = e.value.messages
    assert line.startswith("emulate: 32 actors (2 x 16 workers) need about")
    assert "offers its workers 4.7 GiB" in line
    assert 32 * ACTOR_BASE_BYTES > 5e9  # the workers alone pass it, whatever the model
    refuse_placement(big, [{"Alive": True, "Resources": {"CPU": 2.0}}])  # no memory declared


@pytest.mark.slow
def test_a_dead_cell_task_holds_no_placement_group(ray_local, tmp_path):
    """Issue #35 item 19: when an emulated cell's task dies (its process killed), its
    placement groups stayed CREATED until `gcbench run` exited, holding the cluster's
    GPUs. The driver removes them when it records the failed cell. Only this test's Ray
    task is killed: a child of this process (its Ray instance runs under it)."""
    import signal
    import threading
    import time

    import psutil
    from ray.util.placement_group import placement_group_table

    from gcbench.config import load_suite
    from gcbench.runner import run_suite

    from conftest import write

    text = ("name: d\nmode: emulate\ngrid:\n  model: resnet50\n  strategy: [fp32]\n"
            "  network: {inter_gbps: 10}\n  cluster: {machines: 2, gpus_per_machine: 2}\n")
    suite = load_suite(write(tmp_path, "d.yaml", text))

    def groups(keep) -> list[str]:  # gcbench's placement groups in the states `keep` takes
        return [str(i["name"]) for i in placement_group_table().values()
                if str(i.get("name", "")).startswith("gcbench:") and keep(i["state"])]  # fmt: skip

    box: dict[str, object] = {}
    runner = threading.Thread(target=lambda: box.update(s=run_suite(suite, tmp_path / "r")))
    runner.start()
    me, killed, deadline = psutil.Process(), False, time.monotonic() + 120
    while not killed and time.monotonic() < deadline and runner.is_alive():
        created = groups(lambda state: state == "CREATED")
        for p in me.children(recursive=True) if created else ():
            try:
                if (p.cmdline() or [""])[0].startswith("ray::_task"):
                    p.send_signal(signal.SIGKILL)
                    killed = True
                    break
            except psutil.Error:
                continue
        time.sleep(0.05)
    runner.join(timeout=240)
    assert killed, "the cell's task was not seen running with its placement groups"
    assert box["s"].failed == 1  # type: ignore[attr-defined]
    assert groups(lambda state: state != "REMOVED") == []
