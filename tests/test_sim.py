"""The first simulate backend against hand-computed values and basic invariants."""

from __future__ import annotations

import pytest

from gcbench.comm import Link, ring_allreduce_s
from gcbench.config import Cell, expand, load_suite
from gcbench.sim import simulate_cell
from gcbench.zoo.profile import model_profile

from conftest import ROOT


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


def test_smoke_cell_iteration_time_by_hand():
    """tiny-mlp, fp32, 2 machines x 4 GPUs, 10 Gbps. Its 26,122 parameters (104,488 bytes)
    fit DDP's first 1 MiB bucket, so one ring allreduce over the 10 Gbps link (the
    bottleneck) starts when the last gradient is ready."""
    c = smoke_cell("tiny-mlp", "fp32", 2, 10)
    p = model_profile("tiny-mlp", 16, "v100")
    # tiny-mlp's six tensors, output layer first: 10+1280 / 128+16384 / 128+8192
    assert [t.numel for t in p.tensors] == [10, 1280, 128, 16384, 128, 8192]
    n, nbytes = 8, 26122 * 4
    bandwidth = 10e9 / 8 * 0.7  # line rate x inter-machine efficiency, bytes/s
    alpha = 25e-6  # inter-machine latency per ring step
    allreduce = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth
    expected = p.forward_s + sum(t.backward_s for t in p.tensors) + allreduce + p.update_s
    m = simulate_cell(c).metrics
    assert m["iteration_s"] == pytest.approx(expected, rel=1e-12)
    assert m["comm_exposed_s"] == pytest.approx(allreduce, rel=1e-9)
    assert m["wire_bytes"] == round(2 * 7 / 8 * nbytes)


def test_resnet50_buckets_by_hand():
    """resnet50, fp32, 4 machines x 4 GPUs, 100 Gbps: DDP buckets (close a bucket once it
    holds >= 1 MiB, then >= 25 MiB), each allreduced in order when its last gradient is
    ready and the link is free."""
    c = smoke_cell("resnet50", "fp32", 4, 100)
    p = model_profile("resnet50", 32, "v100")
    n, bandwidth, alpha = 16, 100e9 / 8 * 0.7, 25e-6
    ready, link_free, filled, cap = p.forward_s, 0.0, 0, 2**20
    buckets = 0
    for i, t in enumerate(p.tensors):
        ready += t.backward_s
        filled += t.numel * 4
        if filled >= cap or i == len(p.tensors) - 1:
            start = max(ready, link_free)
            link_free = start + 2 * (n - 1) * alpha + 2 * (n - 1) / n * filled / bandwidth
            filled, cap, buckets = 0, 25 * 2**20, buckets + 1
    expected = max(ready, link_free) + p.update_s
    m = simulate_cell(c).metrics
    assert buckets == m["buckets"] == 5
    assert m["iteration_s"] == pytest.approx(expected, rel=1e-12)


def test_single_gpu_iteration_is_compute():
    for strategy in ("fp32", "fp16"):
        c = cell(cluster={"machines": 1, "gpus_per_machine": 1}, strategy=strategy)
        m = simulate_cell(c).metrics
        p = model_profile("tiny-mlp", 16, "v100")
        assert m["iteration_s"] == pytest.approx(p.compute_s)
        assert m["scaling_factor"] == pytest.approx(1.0)
        assert m["wire_bytes"] == 0


@pytest.mark.parametrize("model", ["tiny-mlp", "tiny-cnn", "resnet50"])
@pytest.mark.parametrize("strategy", ["fp32", "fp16"])
def test_breakdown_adds_up_and_more_bandwidth_never_hurts(model, strategy):
    previous = None
    for gbps in (1, 10, 100, 1000):
        m = simulate_cell(
            cell(model=model, strategy=strategy, network={"inter_gbps": gbps})
        ).metrics
        parts = m["compute_s"] + m["compress_exposed_s"] + m["comm_exposed_s"]
        assert parts == pytest.approx(m["iteration_s"], rel=1e-9)
        assert 0 < m["scaling_factor"] <= 1
        if previous is not None:
            assert m["iteration_s"] <= previous + 1e-12
        previous = m["iteration_s"]


def test_fp16_halves_the_wire_bytes_and_pays_for_casts():
    fp32 = simulate_cell(cell(model="resnet50")).metrics
    fp16 = simulate_cell(cell(model="resnet50", strategy="fp16")).metrics
    assert fp16["wire_bytes"] * 2 == pytest.approx(fp32["wire_bytes"], abs=2)
    assert fp16["compress_total_s"] > 0 and fp32["compress_total_s"] == 0
    assert fp16["iteration_s"] < fp32["iteration_s"]  # 10 Gbps: communication-bound


def test_trace_is_deterministic_and_never_runs_backwards():
    a = simulate_cell(cell(model="resnet50", strategy="fp16"))
    b = simulate_cell(cell(model="resnet50", strategy="fp16"))
    assert a.spans == b.spans
    by_stream: dict[str, float] = {}
    for s in a.spans:
        assert s.dur_s >= 0
        assert s.start_s >= by_stream.get(s.stream, 0.0) - 1e-15  # no overlap on a stream
        by_stream[s.stream] = s.end_s


@pytest.mark.parametrize("path", sorted((ROOT / "suites").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_suite_simulates(path):
    """Examples are tests (STYLE §13): every cell of every shipped suite runs in-process."""
    from gcbench.runner import execute_cell

    for c in expand(load_suite(path)):
        rows, spans = execute_cell(c, 1)
        assert 0 < rows[0]["scaling_factor"] <= 1
        assert spans[0]["kind"] == "forward" and spans[-1]["kind"] == "update"
