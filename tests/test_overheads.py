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
    # and the scaling factor sees it: its baseline is one GPU, which waits for no one
    # (it was the jittered compute, which cancelled the jitter out)
    ratio = jit.metrics["scaling_factor"] / base.metrics["scaling_factor"]
    assert ratio == pytest.approx(base.metrics["iteration_s"] / jit.metrics["iteration_s"])
    assert ratio < 1 - 1e-4
    one = cell(machines=1, gpus=1)
    assert simulate_cell(one.model_copy(update={"network": one.network.model_copy(
        update={"compute_jitter": 0.05})})).metrics == simulate_cell(one).metrics  # fmt: skip


def test_contention_slows_the_backward_a_collective_overlaps_and_only_that():
    """Two tensors, each its own bucket, machines 1 Gb/s apart: t0's allreduce (64 MB,
    ~1 s) runs through all of t1's 10 ms backward, so with contention c = 0.5 t1 takes
    10 x 1.5 = 15 ms, exactly (phi = 1); t0, computed before any collective, is unchanged."""
    from dataclasses import replace

    from gcbench.backends.simulate import cell_profile, contended
    from gcbench.comm import Link, nvlink_machine
    from gcbench.sim.iteration import Costs, Plan, fuse
    from gcbench.sim.options import PRESETS
    from gcbench.zoo.profile import TensorProfile

    base = cell_profile(cell())
    tensors = (TensorProfile("t0", (2**24,), 2**24, "l0", 2e-3),
               TensorProfile("t1", (256,), 256, "l1", 10e-3))  # fmt: skip
    profile = replace(base, tensors=tensors)
    costs = Costs(2, 1, nvlink_machine(1), Link(1e9 / 8, 25e-6, 0.7))
    plan = Plan.uniform(fuse(profile, "tensor"), PRESETS["fp32"])
    plain = {j.name: j for j in contended(profile, costs, plan, 0.0).jobs}
    slowed = contended(profile, costs, plan, 0.5)
    got = {j.name: j for j in slowed.jobs}
    assert got["t1"].dur_s == pytest.approx(15e-3, rel=1e-9)
    assert got["t0"].dur_s == plain["t0"].dur_s == pytest.approx(2e-3, rel=1e-12)
    assert contended(profile, costs, plan, 0.5, keep_jobs=False).jobs == []


def test_contention_grows_the_iteration_and_never_past_its_bound():
    """On resnet50 over 2 x 4 GPUs at 25 Gb/s (DDP buckets overlapping backward) the
    iteration grows with the contention, backward by at most 1 + c (all of it overlapped);
    the CPU servers' push and pull (copy engines, host memory), overlapping backward as
    much, slow nothing."""

    def resnet(c, strategy="fp32", gpus=4, servers=0):
        return Cell.model_validate({
            "model": "resnet50", "compressor": "none", "strategy": strategy,
            "network": {"inter_gbps": 25, "compute_contention": c},
            "cluster": {"machines": 2, "gpus_per_machine": gpus,
                        "cpu_servers": servers}})  # fmt: skip

    times, computes = [], []
    for c in (0.0, 0.25, 0.5, 1.0):
        m = simulate_cell(resnet(c)).metrics
        times.append(m["iteration_s"])
        computes.append(m["compute_s"])
    assert times == sorted(times) and times[-1] > 1.2 * times[0]
    assert all(b <= computes[0] * (1 + c) * (1 + 1e-9)
               for b, c in zip(computes, (0.0, 0.25, 0.5, 1.0), strict=True))  # fmt: skip
    ps = [simulate_cell(resnet(c, "ps", 1, 2)).metrics for c in (0.0, 1.0)]
    assert ps[0] == ps[1] and ps[0]["comm_total_s"] > 0.5 * ps[0]["compute_s"]


def test_emulation_refuses_contention_with_the_line(tmp_path):
    """The emulation's actors time their own timelines; contention's fixed point runs over
    a whole cell's, so an emulated suite that sets it is refused, not silently ignored."""
    from gcbench.config import load_suite
    from gcbench.errors import ConfigError

    path = tmp_path / "emc.yaml"
    path.write_text("name: emc\nmode: emulate\ngrid:\n  model: [tiny-mlp]\n  strategy: [fp32]\n"
                    "  network:\n    - {inter_gbps: 25, compute_contention: 0.2}\n"
                    "  cluster:\n    - {machines: 2, gpus_per_machine: 1}\n")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.messages == [
        f"{path}:3: grid: network 0: compute_contention: mode emulate does not apply it (its "
        "actors time their own timelines; the fixed point runs over a whole cell's); use "
        "mode: simulate"
    ]
    path.write_text(path.read_text().replace("mode: emulate", "mode: simulate"))
    assert load_suite(path).grid.network[0].compute_contention == 0.2
