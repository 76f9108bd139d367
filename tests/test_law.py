"""The gradient law and the payload sizes it implies (issue #14's expected-size model):
derived, not fitted, so every comparison with compressed gradients is out of sample."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gcbench.cluster.gradients import bucket_gradient, gradient
from gcbench.compress import create
from gcbench.compress.law import tail, threelc_bytes, threshold_bytes


def test_the_closed_form_tail_matches_the_integrated_density():
    """P(|T| > x) for ν = 3 against 2∫_x^∞ of the density 6√3 / (π (3 + t²)²),
    integrated numerically (substituting t = x / s), across the series/closed switch."""
    for x in (0.0, 0.3, 1.0, 3.0, 30.0, 170.0, 300.0, 1e4):
        s = np.linspace(0.0, 1.0, 200_001)[1:]  # t = x/s, dt = x/s² ds
        t = x / s if x else None
        if t is None:
            assert float(tail(0.0)) == 1.0
            continue
        dens = 6 * math.sqrt(3) / (math.pi * (3 + t * t) ** 2) * x / (s * s)
        want = 2 * float(np.trapezoid(dens, s))
        assert float(tail(x)) == pytest.approx(want, rel=1e-6)
    xs = np.logspace(-3, 6, 400)
    assert np.all(np.diff(tail(xs)) < 0)  # strictly decreasing, never negative
    assert np.all(tail(xs) > 0)


def test_emulated_gradients_follow_the_law():
    """The share of one draw's values above a level equals the law's tail."""
    n = 400_000
    g = gradient(7, 1, 0, 2, n).abs().numpy() * math.sqrt(n)
    for level in (0.5, 2.0, 6.0):
        assert float((g > level).mean()) == pytest.approx(float(tail(level)), rel=0.03)


@pytest.mark.parametrize("sparsity", [1.0, 1.9])
@pytest.mark.parametrize("numel", [7, 50, 300, 2000, 20_000, 200_000])
def test_threelc_expected_size_matches_what_3lc_sends_on_the_law(numel, sparsity):
    """Mean bytes 3LC sends over draws of one tensor of the law against the model, from
    7 values (the peak's group and boundary runs dominate) to 200,000 (zero runs)."""
    c = create("threelc", sparsity=sparsity)
    draws = 200 if numel <= 2000 else 12
    sent = np.mean(
        [c.compress(gradient(3, r, 0, 0, numel), "k", 0).wire_bytes for r in range(draws)]
    )
    assert threelc_bytes((numel,), sparsity) == pytest.approx(sent, rel=0.05)
    assert c.expected_bytes([numel]) == threelc_bytes((numel,), sparsity)


@pytest.mark.parametrize("level", [1e-4, 1e-3, 1e-2])
def test_threshold_expected_size_matches_what_threshold_sends_on_a_bucket(level):
    """A bucket of tensors of four sizes (so four scales) concatenated: the sum of the
    tensors' expected bytes against what threshold sends for the bucket."""
    numels = [64, 4096, 150_000, 1_000_000]
    c = create("threshold", threshold=level)
    sent = np.mean(
        [
            c.compress(bucket_gradient(5, r, 0, [0, 1, 2, 3], numels), "b", 0).wire_bytes
            for r in range(3)
        ]
    )
    want = c.expected_bytes(numels)
    assert want == pytest.approx(sent, rel=0.02)
    assert want == sum(threshold_bytes(n, level) for n in numels)


def test_the_simulator_plans_with_the_expected_sizes():
    """A 3LC allgather cell's wire bytes in the simulator follow its buckets' expected
    sizes, not the (14-fold larger) upper bound."""
    from gcbench.config import Cell
    from gcbench.sim import simulate_cell
    from gcbench.sim.costs import cell_profile, plan_for

    cell = Cell.model_validate(
        {
            "model": "tiny-cnn",
            "compressor": "threelc",
            "network": {"inter_gbps": 10},
            "cluster": {"machines": 1, "gpus_per_machine": 4},
            "strategy": "allgather",
        }
    )
    profile = cell_profile(cell)
    numels = [t.numel for t in profile.tensors]
    buckets = [[numels[i] for i in b] for b in plan_for(cell, profile).buckets]
    expected = sum(threelc_bytes(tuple(b)) for b in buckets)
    bound = sum(create("threelc").wire_bytes(sum(b), 0) for b in buckets)
    # allgather of payloads: each GPU sends its payload to the 3 others
    wire = simulate_cell(cell).metrics["wire_bytes"]
    assert wire == pytest.approx(3 * expected, rel=1e-6, abs=2)
    assert wire < 0.5 * 3 * bound
