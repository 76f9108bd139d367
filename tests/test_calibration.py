"""Calibrations checked out of sample: each constant fitted on some measurements is judged on
a measurement it was not fitted to.

- COVAP Table V (`benchmarks/covap_table5.py`): the inter-machine link (alpha, eta) of the
  hierarchical allreduce model fitted to five of VGG-19's six DDP buckets, the sixth
  predicted.
- V100 (`benchmarks/calibrate_v100.py`): the device table's efficiencies and per-kernel
  overhead fitted to seven of the eight ByteComp/Espresso V100 profiles, the eighth
  model's backward predicted.

Tolerances come from the results recorded in BENCHMARKS.md and are stated where asserted.
Points the model does not predict are asserted as known misses, in the direction and
roughly the size observed, with their cause: if one of them starts to pass (or misses by
more), the test fails and its comment is due for an update.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

from gcbench.zoo import devices
from gcbench.zoo.catalog import ESPRESSO_MODELS
from gcbench.zoo.profile import model_profile

from conftest import ROOT, SHARED


def benchmark(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


# --- COVAP Table V: leave one bucket out -------------------------------------------------

# Held-out ratio (predicted / measured) allowed for a bucket the model covers. Observed,
# absolute weighting: 0.99, 0.85, 1.28, 1.22 (buckets 2-5); relative weighting: 0.97, 0.92
# (buckets 4, 5). 30% is the smallest round tolerance those pass; bucket 4 (1.28) is the
# closest to it. It is looser than the V100 check's 25% because one ring-allreduce model
# with two constants is fitted to five points that do not lie on one line (below).
COVAP_TOL = 0.30

# Known misses, both weightings. COVAP does not say how Table V was measured; the two
# buckets below are inconsistent with the other four under any latency + bytes/bandwidth
# model, so no fit of (alpha, eta) to the others predicts them:
# - bucket 6 (2.2 MB, 34.2 ms) takes longer than bucket 1 (16.4 MB, 16.2 ms): the time is
#   not monotone in size. At full line rate it would take 1.1 ms; fitted to the other
#   five, alpha comes out 0 (clamped), so it is predicted at 2.8-3.2 ms (ratio 0.08-0.09).
#   Whatever the 34 ms holds (waiting, synchronisation at the end of backward), it is not
#   the transfer this model describes.
# - bucket 1 (16.4 MB, 16.2 ms) moves 1.01 GB/s of algorithm bandwidth, the others 0.68-0.78;
#   at the eta the big buckets need (0.34) even alpha = 0 gives 22.8 ms, so it is predicted
#   1.9-2.2x too slow.
COVAP_MISSES = {1: (1.5, 2.5), 6: (0.0, 0.2)}


def covap_ratios(weighting: str) -> dict[int, float]:
    return {h.bucket: h.ratio for h in benchmark("covap_table5").leave_one_out(weighting)}


def test_covap_in_sample_total_is_reproduced_by_construction():
    """Why the old check (fit to all six, compare the total) proved nothing: least squares
    with an intercept (the 2(M-1) alpha latency term) has residuals summing to zero, so the
    fitted model reproduces the measured total for any six points."""
    t5 = benchmark("covap_table5")
    f = t5.fit("absolute")
    assert f.link.latency_s > 0  # the intercept is free (not clamped at 0)
    assert sum(f.predicted_s) == pytest.approx(t5.TOTAL_S, rel=1e-9)


def test_covap_held_out_buckets_absolute_weighting():
    r = covap_ratios("absolute")
    for bucket in (2, 3, 4, 5):
        assert abs(r[bucket] - 1) <= COVAP_TOL, (bucket, r[bucket])
    for bucket, (lo, hi) in COVAP_MISSES.items():
        assert lo < r[bucket] < hi, (bucket, r[bucket])
    # Sum of the six held-out predictions vs 830.094 ms: observed 742 ms (0.894). The
    # 603 ms bucket 3 dominates it (predicted at 0.85 by extrapolating 6.4x beyond the
    # largest of the other five); the two misses (+15 ms, -31 ms) nearly cancel.
    t5 = benchmark("covap_table5")
    total = sum(h.predicted_s for h in t5.leave_one_out("absolute"))
    assert total / t5.TOTAL_S == pytest.approx(1, abs=0.15)


def test_covap_held_out_buckets_relative_weighting():
    r = covap_ratios("relative")
    for bucket in (4, 5):
        assert abs(r[bucket] - 1) <= COVAP_TOL, (bucket, r[bucket])
    for bucket, (lo, hi) in COVAP_MISSES.items():
        assert lo < r[bucket] < hi, (bucket, r[bucket])
    # Known misses of this weighting: buckets 2 (67 MB) and 3 (430 MB) are predicted at
    # 0.70 and 0.58. Weighting by 1/measured^2 makes the small anomalous buckets 1 and 6
    # count as much as the big ones; bucket 6 pulls alpha up (565-755 us) and eta up with
    # it (0.52-0.60 vs 0.34), so the bandwidth term of big buckets is too small
    # (`test_covap_misses_are_caused_by_buckets_1_and_6` removes them and the misses go).
    for bucket in (2, 3):
        assert 0.5 < r[bucket] < 0.75, (bucket, r[bucket])
    # Sum: observed 531 ms, 0.64 of Table V's 830 ms (bucket 3's miss is 253 ms of it).
    t5 = benchmark("covap_table5")
    total = sum(h.predicted_s for h in t5.leave_one_out("relative"))
    assert 0.5 < total / t5.TOTAL_S < 0.75


@pytest.mark.parametrize("weighting", ["absolute", "relative"])
def test_covap_misses_are_caused_by_buckets_1_and_6(weighting):
    """The documented cause of the misses: fitted without buckets 1 and 6, the link predicts
    each of buckets 2 and 3 from the remaining three within 10% (observed: absolute 0.95,
    1.02; relative 0.90, 0.97), with either weighting."""
    t5 = benchmark("covap_table5")
    table = t5.TABLE_V
    for held in (2, 3):
        train = [table[b - 1] for b in (2, 3, 4, 5) if b != held]
        n, measured = table[held - 1]
        ratio = t5.predict_s(n, t5.fit(weighting, train).link) / measured
        assert ratio == pytest.approx(1, abs=0.10), (held, ratio)


# --- V100: leave one model out ------------------------------------------------------------

REFERENCE = SHARED / "data" / "espresso-v100-profiles.json"

# Held-out ratio (predicted / measured backward span) allowed: +-25%, the target the
# in-sample check had. Observed for the six models that pass: resnet50 1.13, resnet101 0.86,
# bert-base-squad 0.95, bert-large-squad 1.01, gpt2 1.20, ugatit 1.06.
V100_TOL = 0.25

# Known misses: models that alone pin one of the five constants, so without them the
# constant is free and the refit puts it where it suits the other seven.
V100_MISSES = {
    # VGG-16's backward is 85% Winograd-eligible 3x3 stride-1 convolutions (time share on
    # the shipped constants); the ResNets have 11-17% and U-GAT-IT 29% of them, alongside
    # other convolutions (strided 3x3, 7x7, 4x4) that the fit can trade them against, the
    # transformers and the LSTM none. Refitted without VGG-16: Winograd 0.7 x peak (1.55
    # with it), other convs 0.56 (0.16), and VGG-16 comes out 2.25x too slow.
    "vgg16": (1.5, 2.5),
    # The LSTM is the only model with ~2,000 small kernels in a 70 ms span: the per-kernel
    # overhead is 5% of its span, at most 1.4% of any other's, so only the LSTM pins it.
    # Refitted without it the overhead goes to 11 us (2 with it: 21% of the LSTM's
    # predicted span) and the matmul efficiency to 0.68 (0.76; the LSTM is 86% GEMMs), and
    # the LSTM comes out 1.43x too slow.
    "lstm": (1.25, 1.6),
}


@pytest.fixture(scope="module")
def v100():
    """(benchmark module, measured spans, FastSpans, held-out results); about 3 s: 1 s to
    trace the eight models, 0.25 s per refit."""
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} is absent (it ships beside the project, not with it)")
    cal = benchmark("calibrate_v100")
    measured = cal.measured_spans(REFERENCE)
    spans = {m: cal.FastSpan(m) for m in measured}
    return cal, measured, spans, cal.leave_one_model_out(measured, spans)


def test_v100_fast_span_is_the_profiles_backward_span(v100):
    """The refits evaluate `FastSpan`; it must be the span the zoo's profile gives (first
    gradient ready to last) on the shipped V100 entry, or the held-out ratios below would
    judge something other than the profile."""
    _, measured, spans, _ = v100
    for m in measured:
        profile = model_profile(m, device="v100")
        expected = sum(t.backward_s for t in profile.tensors[1:])
        assert spans[m](devices.DEVICES["v100"]) == pytest.approx(expected, rel=1e-9), m


def test_v100_fit_on_all_models_gives_the_shipped_constants(v100):
    cal, measured, spans, _ = v100
    dev = cal.fit(measured, spans)
    shipped = devices.DEVICES["v100"]
    for field in cal.GRID:
        assert getattr(dev, field) == getattr(shipped, field), field


@pytest.mark.parametrize("ref_name", sorted(ESPRESSO_MODELS))
def test_v100_backward_predicted_leaving_the_model_out(v100, ref_name):
    zoo = ESPRESSO_MODELS[ref_name]
    _, _, _, held = v100
    _, ratio = held[zoo]
    if zoo in V100_MISSES:
        lo, hi = V100_MISSES[zoo]
        assert lo < ratio < hi, (zoo, ratio)
    else:
        assert abs(ratio - 1) <= V100_TOL, (zoo, ratio)


# --- H100: alternate blocks held out -----------------------------------------------------

H100_DIR = SHARED / "data" / "measured" / "h100"

# Held-out (predicted / measured) of the blocks of a class, summed, and the median |error|
# of a block: observed resnet50 convolutions 1.035 and 18.8%, bert-base matmuls 1.103 and
# 18.0% (benchmarks/calibrate_h100.py, BENCHMARKS.md).
H100_CLASS_TOL, H100_BLOCK_TOL = 0.15, 0.25
# Known miss: the memory-bound blocks (batch norm's and layer norm's backward, residual
# adds) are predicted too fast, 0.77 (resnet50, 15 blocks) and 0.56 (bert-base, 2 blocks):
# blocks of 2-4 small kernels (15-150 MB) measure 160-240 us, more than any bandwidth and
# the fitted per-kernel cost explain; each ends at a ready gradient, whose hook the
# profiles were measured with, which the roofline has no term for.
H100_MEMORY_MISS = (0.45, 0.9)
# Never fitted, predicted from the constants fitted to every block: the forward (observed
# resnet50 -1.0%, bert-base +9.2%) and the update (+3.5%, +9.3%: torch's foreach SGD).
H100_TOTALS_TOL = 0.15


@pytest.fixture(scope="module")
def h100():
    """(benchmark module, the two measured models, the held-out pairs); about 6 s."""
    if not H100_DIR.exists():
        pytest.skip(f"{H100_DIR} is absent (it ships beside the project, not with it)")
    cal = benchmark("calibrate_h100")
    models = [cal.Model.load(H100_DIR / f) for f in cal.MEASURED]
    return cal, models, cal.held_out(models)


@pytest.mark.slow
def test_h100_model_blocks_are_the_profiles_backward(h100):
    """The fit evaluates `Model.many`; summed over the blocks it must be the zoo profile's
    backward on the shipped H100 entry, or the held-out figures would judge something
    other than the profile."""
    _, models, _ = h100
    for m in models:
        batch, seq = {"resnet50": (32, None), "bert-base": (32, 64)}[m.name]
        profile = model_profile(m.name, batch, "h100", seq)
        got = float(m.many([devices.DEVICES["h100"]])[0].sum())
        assert got == pytest.approx(profile.backward_s, rel=1e-9), m.name


@pytest.mark.slow
def test_h100_fit_on_every_block_gives_the_shipped_constants(h100):
    cal, models, _ = h100
    dev = cal.fit(models, {m.name: m.spanned for m in models})
    shipped = devices.DEVICES["h100"]
    for field in cal.GRID:
        assert getattr(dev, field) == pytest.approx(getattr(shipped, field), rel=5e-3), field


@pytest.mark.slow
def test_h100_held_out_blocks_by_class(h100):
    _, _, held = h100
    seen = set()
    for model, per in held.items():
        for cls, pairs in per.items():
            ratio = sum(p for p, _ in pairs) / sum(m for _, m in pairs)
            if cls == "memory-bound":
                lo, hi = H100_MEMORY_MISS
                assert lo < ratio < hi, (model, cls, ratio)
                continue
            seen.add(cls)
            median = sorted(abs(p / m - 1) for p, m in pairs)[len(pairs) // 2]
            assert abs(ratio - 1) <= H100_CLASS_TOL, (model, cls, ratio)
            assert median <= H100_BLOCK_TOL, (model, cls, median)
    assert seen == {"convolutions", "matmuls"}


@pytest.mark.slow
def test_h100_forward_and_update_are_predicted(h100):
    _, models, _ = h100
    dev = devices.DEVICES["h100"]
    for m in models:
        assert m.forward(dev) / m.forward_s == pytest.approx(1, abs=H100_TOTALS_TOL), m.name
        assert m.update(dev) / m.update_s == pytest.approx(1, abs=H100_TOTALS_TOL), m.name
