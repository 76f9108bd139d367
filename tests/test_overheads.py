"""The overhead terms of a network profile (issue #31): a fixed cost each iteration pays,
a fixed cost of each bucket's communication, and the straggler spread of the workers'
compute. Each is 0 by default (nothing changes) and fittable by `gcbench calibrate`."""

from __future__ import annotations

import math

import pytest

from gcbench.backends.simulate import expected_max_normal, simulate_cell
from gcbench.config import Cell


def cell(machines=2, gpus=4, **network):
    return Cell.model_validate({
        "model": "tiny-cnn", "compressor": "none", "strategy": "fp32", "fusion": "tensor",
        "network": {"inter_gbps": 25, **network},
        "cluster": {"machines": machines, "gpus_per_machine": gpus}})  # fmt: skip


def test_the_expected_maximum_of_normals_is_the_order_statistic():
    """e_2 = 1/sqrt(pi) and e_3 = 3/(2 sqrt(pi)) exactly; e_n grows like sqrt(2 ln n)."""
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)
    e = [expected_max_normal(n) for n in (2, 8, 64, 1024)]
    assert e == sorted(e) and e[-1] < math.sqrt(2 * math.log(1024))


def test_defaults_change_nothing_and_each_term_costs_what_it_says():
    base = simulate_cell(cell())
    assert simulate_cell(cell(iteration_overhead_us=0.0)).metrics == base.metrics
    more = simulate_cell(cell(iteration_overhead_us=2000.0))
    assert more.metrics["iteration_s"] == pytest.approx(base.metrics["iteration_s"] + 2e-3)
    # each bucket's first phase is longer by the bucket overhead, and only that one
    slow = simulate_cell(cell(bucket_overhead_us=300.0))
    comm = [[s for s in r.spans if s.kind == "comm"] for r in (base, slow)]
    firsts = {}
    for a, b in zip(*comm, strict=True):
        bucket = a.name.split()[1]
        d = b.dur_s - a.dur_s
        assert d == pytest.approx(3e-4 if bucket not in firsts else 0.0, abs=1e-12)
        firsts.setdefault(bucket, a.name)
    # jitter: the compute of n workers stretched by 1 + cv e_n; one GPU waits for no one
    jit = simulate_cell(cell(compute_jitter=0.05))
    f = 1 + 0.05 * expected_max_normal(8)
    assert jit.metrics["compute_s"] == pytest.approx(base.metrics["compute_s"] * f, rel=1e-9)
    one = cell(machines=1, gpus=1)
    assert simulate_cell(one.model_copy(update={"network": one.network.model_copy(
        update={"compute_jitter": 0.05})})).metrics == simulate_cell(one).metrics  # fmt: skip
