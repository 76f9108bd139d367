"""The quantize family (gcbench.compress.quantize): signsgd, efsignsgd, signum, onebit,
terngrad, qsgd — shapes and dtypes, exact wire bytes, determinism, bit packing, and each
algorithm against a reference written out here. Every behavioural test runs on both host
paths: numpy (the CPU default) and torch (what other devices run)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.compress import quantize as q
from gcbench.compress import stochastic as sq
from gcbench.compress.base import Payload
from gcbench.compress.registry import create
from gcbench.errors import ConfigError

CLASSES = {
    "signsgd": q.SignSGD,
    "efsignsgd": q.EFSignSGD,
    "signum": q.Signum,
    "onebit": q.OneBit,
    "terngrad": sq.TernGrad,
    "qsgd": sq.QSGD,
}
NAMES = list(CLASSES)
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SHAPES = [(0,), (1,), (7,), (1000,), (3, 5, 7), (), (2, 0, 3)]


@pytest.fixture(params=[True, False], ids=["numpy", "torch"])
def backend(request, monkeypatch):
    monkeypatch.setattr(q, "USE_NUMPY", request.param)
    return request.param


def expected_bytes(name: str, n: int, levels: int = 16) -> int:
    signs = math.ceil(n / 8)
    return {
        "signsgd": signs,
        "signum": signs,
        "efsignsgd": signs + 4,
        "onebit": signs + 8,
        "terngrad": math.ceil(n / 4) + 4,
        "qsgd": math.ceil(n * math.ceil(math.log2(2 * levels + 1)) / 8) + 4,
    }[name]


def sign(x: torch.Tensor) -> torch.Tensor:
    """The module's sign: +1 for x >= 0 (zero included), -1 below."""
    return torch.where(x < 0, -1.0, 1.0).to(torch.float64)


def roundtrip(c, x: torch.Tensor, key: str = "k", step: int = 0) -> torch.Tensor:
    return c.decompress(c.compress(x, key, step), key, step)


# --- the contract -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_the_contract_properties(name):
    c = create(name)
    assert type(c) is CLASSES[name]
    assert c.family == "quantize" and c.rounds == 1
    assert not (c.data_dependent or c.additive or c.splittable)
    with pytest.raises(TypeError):
        c.reduce([])


def test_parameters_reach_the_compressors_and_are_checked():
    assert create("qsgd", levels=4).width == 4
    assert create("qsgd-s16").levels == 16
    assert create("signum", momentum=0.5).momentum == 0.5
    for name, params in (
        ("qsgd", {"levels": 0}),
        ("qsgd", {"levels": 2.5}),
        ("signum", {"momentum": 1.0}),
        ("onebit", {"levels": 4}),
    ):
        with pytest.raises(ConfigError):
            create(name, **params)
    with pytest.raises(ConfigError):
        sq.QSGD(levels=2**31)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_keeps_shape_and_dtype_and_wire_bytes_are_exact(name, backend):
    c = CLASSES[name]()
    for dtype in DTYPES:
        for shape in SHAPES:
            x = torch.randn(shape, dtype=torch.float64).to(dtype)
            p = c.compress(x, "layer#1", 3)
            out = c.decompress(p, "layer#1", 3)
            assert out.shape == x.shape and out.dtype == dtype, (dtype, shape)
            agg = c.aggregate([p, p, p], "layer#1", 3)
            assert agg.shape == x.shape and agg.dtype == dtype
            n = x.numel()
            tensor_bytes = sum(t.numel() * t.element_size() for t in p.tensors.values())
            assert p.wire_bytes == tensor_bytes == c.wire_bytes(n, 3) == expected_bytes(name, n)
            for k, t in p.tensors.items():  # packed codes, and fp32 scalars
                assert t.dtype == (torch.uint8 if k in ("signs", "codes") else torch.float32), k
                assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), k


@pytest.mark.parametrize("name", NAMES)
def test_wire_bytes_are_exact_for_every_size(name, backend):
    c = CLASSES[name]()
    for n in [*range(0, 41), 1000, 4099, 65537]:
        p = c.compress(torch.randn(n), "t", n)
        assert p.wire_bytes == c.wire_bytes(n, n) == expected_bytes(name, n), n


@pytest.mark.parametrize("levels", [1, 2, 3, 4, 7, 8, 15, 16, 64, 127, 128, 255, 1000, 2**20])
def test_qsgd_uses_ceil_log2_2s_plus_1_bits(levels, backend):
    c = sq.QSGD(levels=levels)
    b = math.ceil(math.log2(2 * levels + 1))
    assert c.width == q.code_width(levels) == b
    for n in (0, 1, 9, 100):
        x = torch.randn(n)
        p = c.compress(x, "k", 0)
        assert p.tensors["codes"].numel() == math.ceil(n * b / 8)
        assert p.wire_bytes == c.wire_bytes(n, 0) == math.ceil(n * b / 8) + 4
        out = c.decompress(p, "k", 0).double()
        norm = float(p.tensors["norm"])
        k = out / norm * levels if norm else out
        assert torch.allclose(k, k.round(), atol=1e-3) and bool((k.abs() <= levels + 1e-3).all())
        assert torch.all((k.round() == 0) | (torch.sign(k) == torch.sign(x.double())))


@pytest.mark.parametrize("name", NAMES)
def test_same_key_and_step_give_the_same_payload(name, backend):
    x = torch.randn(4099)
    a, b = CLASSES[name](), CLASSES[name]()  # two workers, or two runs
    for step in range(3):
        pa, pb = a.compress(x, "layer#2", step), b.compress(x, "layer#2", step)
        again = a.compress(x, "layer#2", step)  # twice in one step (signum: not re-applied)
        for p in (pb, again):
            assert p.tensors.keys() == pa.tensors.keys()
            assert all(torch.equal(pa.tensors[k], p.tensors[k]) for k in pa.tensors)


@pytest.mark.parametrize("name", ["terngrad", "qsgd"])
def test_stochastic_rounding_changes_with_step_key_and_seed(name, backend):
    x = torch.randn(4096)
    c = CLASSES[name]()

    def codes(comp, key, step):  # a copy: the payload is valid until the key's next compress
        return comp.compress(x, key, step).tensors["codes"].clone()

    base = codes(c, "k", 0)
    assert not torch.equal(base, codes(c, "k", 1))
    assert not torch.equal(base, codes(c, "j", 0))
    assert not torch.equal(base, codes(CLASSES[name](seed=1), "k", 0))


def test_numpy_and_torch_paths_agree(monkeypatch):
    """Bit for bit on the deterministic compressors, and on the rounding given the same
    uniforms (the two paths draw those from different generators)."""
    x = torch.randn(3, 1001)
    x[0, :5] = 0.0
    for name in ("signsgd", "efsignsgd", "signum", "onebit"):
        payloads = []
        for use in (True, False):
            monkeypatch.setattr(q, "USE_NUMPY", use)
            c = CLASSES[name]()
            payloads.append([c.compress(x * (1 + step), "k", step) for step in range(3)])
        for pa, pb in zip(*payloads, strict=True):
            for k in pa.tensors:
                assert torch.allclose(pa.tensors[k], pb.tensors[k], rtol=1e-6, atol=0), (name, k)
    flat = x.reshape(-1)
    u = torch.rand(flat.numel())
    for levels in (1, 16, 300):
        out = []
        for use in (True, False):
            monkeypatch.setattr(q, "USE_NUMPY", use)
            c = sq.QSGD(levels=levels)
            codes = c.rounded(flat, u, levels / float(flat.norm()), levels, c.width)
            out.append((codes.long(), q.pack_codes(codes, c.width)))
        assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


# --- bit packing ----------------------------------------------------------------------------


def reference_pack(codes: list[int], width: int) -> list[int]:
    """The documented stream: code i at bits [width·i, width·i + width), LSB first, bit k in
    bit k % 8 of byte k // 8, zero padding."""
    stream = 0
    for i, c in enumerate(codes):
        stream |= c << (width * i)
    nbytes = (len(codes) * width + 7) // 8
    return list(stream.to_bytes(nbytes, "little")) if nbytes else []


@settings(max_examples=3 * settings.default.max_examples // 2, deadline=None)
@given(
    width=st.integers(1, 32),
    n=st.integers(0, 70),
    seed=st.integers(0, 2**31),
    use_numpy=st.booleans(),
)
def test_bit_packing_round_trips_and_matches_the_documented_stream(width, n, seed, use_numpy):
    old = q.USE_NUMPY
    q.USE_NUMPY = use_numpy
    try:
        g = torch.Generator().manual_seed(seed)
        codes = torch.randint(0, 2**width, (n,), generator=g, dtype=torch.int64)
        packed = q.pack_codes(codes, width)
        assert packed.dtype == torch.uint8 and packed.numel() == q.packed_bytes(n, width)
        assert packed.tolist() == reference_pack(codes.tolist(), width)
        assert torch.equal(q.unpack_codes(packed, n, width), codes)
        if width == 1:
            bits = codes.bool()
            assert torch.equal(q.pack_bits(bits), packed)
            assert torch.equal(q.unpack_bits(packed, n), bits)
    finally:
        q.USE_NUMPY = old


def test_bit_packing_of_large_tensors_and_bad_sizes():
    codes = torch.randint(0, 64, (100_003,), dtype=torch.int64)
    for width in (6, 7):
        packed = q.pack_codes(codes % 2**width, width)
        assert torch.equal(q.unpack_codes(packed, codes.numel(), width), codes % 2**width)
    with pytest.raises(ValueError):
        q.unpack_codes(packed, codes.numel() + 8, 7)


def test_signs_are_eight_to_a_byte_least_significant_bit_first():
    x = torch.tensor([-1.0, 2.0, 0.0, -0.0, -3.0, 1.0, 1.0, 1.0, -5.0])
    p = q.SignSGD().compress(x, "k", 0)
    # Bits where x < 0: elements 0 and 4 of the first byte, element 8 = bit 0 of the second.
    assert p.tensors["signs"].tolist() == [0b00010001, 0b00000001]


# --- references -------------------------------------------------------------------------------


def test_signsgd_majority_vote_is_the_sign_of_the_summed_signs(backend):
    c = q.SignSGD()
    workers = [torch.randn(1001) for _ in range(3)]
    workers[0][:10] = 0.0  # zero votes +1
    payloads = [c.compress(w, "k", 0) for w in workers]
    for w, p in zip(workers, payloads, strict=True):
        assert torch.equal(c.decompress(p, "k", 0).double(), sign(w))
    expected = torch.sign(sum(sign(w) for w in workers))
    assert torch.equal(c.aggregate(payloads, "k", 0).double(), expected)
    assert set(expected.tolist()) == {-1.0, 1.0}  # three voters never tie


def test_a_tied_vote_gives_zero_and_one_voter_gives_its_signs(backend):
    c = q.SignSGD()
    a, b = torch.tensor([1.0, -1.0, 2.0, -2.0]), torch.tensor([1.0, -1.0, -2.0, 2.0])
    pa, pb = c.compress(a, "k", 0), c.compress(b, "k", 0)
    assert c.aggregate([pa, pb], "k", 0).tolist() == [1.0, -1.0, 0.0, 0.0]
    assert c.aggregate([pa], "k", 0).tolist() == [1.0, -1.0, 1.0, -1.0]


def test_efsignsgd_sends_the_mean_magnitude_times_the_sign(backend):
    c = q.EFSignSGD()
    x = torch.randn(10, 101, dtype=torch.float64)
    x[0, :3] = 0.0
    for dtype in (torch.float32, torch.float64):
        xd = x.to(dtype)
        scale = float(xd.double().abs().sum() / xd.numel())
        out = roundtrip(c, xd).double()
        assert torch.allclose(out, scale * sign(xd), rtol=1e-6, atol=0)
    workers = [torch.randn(50) for _ in range(3)]
    payloads = [c.compress(w, "k", 0) for w in workers]
    summed = sum(c.decompress(p, "k", 0) for p in payloads)
    assert torch.allclose(c.aggregate(payloads, "k", 0), summed)  # the sum, not a vote


def test_efsignsgd_scale_of_half_precision_gradients_is_summed_in_fp32(backend):
    x = torch.full((100_000,), 1000.0, dtype=torch.float16)  # Σ|x| = 1e8 overflows fp16
    p = q.EFSignSGD().compress(x, "k", 0)
    assert float(p.tensors["scale"]) == 1000.0


def test_efsignsgd_compresses_32_to_1():
    n = 2**20
    p = q.EFSignSGD().compress(torch.randn(n), "k", 0)
    assert abs(n * 4 / p.wire_bytes - 32) <= 0.32
    assert p.wire_bytes == n // 8 + 4


def test_onebit_rebuilds_each_sign_from_its_mean(backend):
    c = q.OneBit()
    x = torch.randn(7, 143)
    x[0, :4] = 0.0
    xd = x.double()
    neg = xd < 0
    mean_pos, mean_neg = float(xd[~neg].mean()), float(xd[neg].mean())
    expected = torch.where(neg, mean_neg, mean_pos).double()
    assert torch.allclose(roundtrip(c, x).double(), expected, rtol=1e-5, atol=0)
    ones = roundtrip(c, torch.ones(9))  # an empty bin sends mean 0 and is never used
    assert torch.equal(ones, torch.ones(9))
    skewed = torch.tensor([-1e6, -2e6, 1e-3, 3e-3])  # no cancellation between the bins
    assert torch.allclose(roundtrip(c, skewed), torch.tensor([-1.5e6, -1.5e6, 2e-3, 2e-3]))


def test_signum_sends_the_sign_of_its_momentum_and_votes(backend):
    beta = 0.8
    c = q.Signum(momentum=beta)
    m = torch.zeros(500, dtype=torch.float64)
    for step in range(4):
        g = torch.randn(500)
        m = beta * m + (1 - beta) * g.double()
        p = c.compress(g.reshape(20, 25), "w", step)
        assert torch.equal(c.decompress(p, "w", step).reshape(-1).double(), sign(m))
    assert c.state_numel() == 2 * 500
    c.reset()
    assert c.state_numel() == 0
    workers = [torch.randn(64) for _ in range(3)]
    payloads = [q.Signum().compress(w, "w", 0) for w in workers]  # step 0: m = (1 − β) g
    expected = torch.sign(sum(sign(w) for w in workers))
    assert torch.equal(c.aggregate(payloads, "w", 0).double(), expected)


def test_signum_keeps_momentum_per_key():
    c = q.Signum(momentum=0.5)
    c.compress(torch.ones(4), "a", 0)
    p = c.compress(-torch.ones(4), "b", 0)  # a fresh key starts from m = 0
    assert c.decompress(p, "b", 0).tolist() == [-1.0] * 4
    p = c.compress(-0.5 * torch.ones(4), "a", 1)  # 0.5·0.5 − 0.5·0.5 = 0 → +1
    assert c.decompress(p, "a", 1).tolist() == [1.0] * 4


def mean_of_draws(c, x: torch.Tensor, draws: int) -> torch.Tensor:
    total = torch.zeros_like(x, dtype=torch.float64)
    for step in range(draws):
        total += roundtrip(c, x, "k", step).double()
    return total / draws


def test_terngrad_is_ternary_and_unbiased(backend):
    c = sq.TernGrad()
    x = torch.randn(64)
    x[0] = 0.0
    s = float(x.abs().max())
    out = roundtrip(c, x).double()
    assert set(out.unique().tolist()) <= {-s, 0.0, s}
    assert out[0] == 0 and out[int(x.abs().argmax())] == s * sign(x)[int(x.abs().argmax())]
    assert torch.all((out == 0) | (torch.sign(out) == torch.sign(x.double())))
    draws = 3000
    # Var(s·b) = |x|(s − |x|) <= s²/4, so the mean of the draws is within s/(2√draws)·5.
    err = (mean_of_draws(c, x, draws) - x.double()).abs().max()
    assert err <= 5 * s / (2 * math.sqrt(draws))
    assert torch.equal(roundtrip(c, torch.zeros(5)), torch.zeros(5))


@pytest.mark.parametrize("levels", [1, 4, 16])
def test_qsgd_is_unbiased(levels, backend):
    c = sq.QSGD(levels=levels)
    x = torch.randn(64)
    norm = float(x.double().norm())
    draws = 2000
    # One draw is off by less than a level, norm/s: the mean is within 5·norm/(2s√draws).
    err = (mean_of_draws(c, x, draws) - x.double()).abs().max()
    assert err <= 5 * norm / (2 * levels * math.sqrt(draws))
    assert torch.equal(roundtrip(c, torch.zeros(5)), torch.zeros(5))


def test_qsgd_rounds_to_the_neighbouring_levels():
    c = sq.QSGD(levels=8)
    x = torch.randn(1000)
    out = roundtrip(c, x).double()
    level = x.double().abs() / x.double().norm() * 8
    got = out.abs() / float(x.double().norm()) * 8
    assert torch.isin((got - level.floor()).round(), torch.tensor([0.0, 1.0])).all()


def test_stochastic_aggregate_sums_the_reconstructions(backend):
    for c in (sq.TernGrad(), sq.QSGD()):
        workers = [torch.randn(33, dtype=torch.float16) for _ in range(4)]
        payloads = [c.compress(w, "k", 1) for w in workers]
        summed = sum(c.decompress(p, "k", 1).float() for p in payloads)
        agg = c.aggregate(payloads, "k", 1)
        assert agg.dtype == torch.float16
        assert torch.allclose(agg.float(), summed, rtol=1e-3, atol=1e-3)


def test_aggregate_accepts_a_payload_rebuilt_from_its_tensors(backend):
    """Payloads cross the wire as their tensors plus the shape and dtype."""
    x = torch.randn(5, 3)
    for name in NAMES:
        c = CLASSES[name]()
        p = c.compress(x, "k", 0)
        rebuilt = Payload({k: v.clone() for k, v in p.tensors.items()}, x.shape, x.dtype)
        assert torch.equal(c.decompress(rebuilt, "k", 0), c.decompress(p, "k", 0))
