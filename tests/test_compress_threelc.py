"""3LC (gcbench/compress/threelc.py): the vectorized encoder against a serial reference
written here from the paper (§3.2 base-3^5, §3.3 zero-run encoding), lossless round trips,
the compressor contract, and the sparsity multiplier (§3.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.compress.registry import create
from gcbench.compress.threelc import (
    ThreeLC,
    dequantize,
    pack_base3,
    quantize,
    unpack_base3,
    zero_run_decode,
    zero_run_encode,
)
from gcbench.errors import ConfigError

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


# --- a serial reference, one element at a time ---------------------------------------------


def ref_pack(trits: list[int]) -> list[int]:
    """§3.2: t = q + 1; pad the shifted array with zeros to a multiple of 5; each group of
    five consecutive t (a, b, c, d, e) is the byte a·3^4 + b·3^3 + c·3^2 + d·3 + e."""
    t = [q + 1 for q in trits]
    while len(t) % 5:
        t.append(0)
    out = []
    for i in range(0, len(t), 5):
        a, b, c, d, e = t[i : i + 5]
        out.append(a * 81 + b * 27 + c * 9 + d * 3 + e)
    return out


def ref_zero_run(packed: list[int]) -> list[int]:
    """§3.3: k consecutive 121s (2 <= k <= 14) -> 243 + (k - 2); longer runs in pieces of
    14 from the start; a piece of one stays 121."""
    out: list[int] = []
    i = 0
    while i < len(packed):
        if packed[i] != 121:
            out.append(packed[i])
            i += 1
            continue
        j = i
        while j < len(packed) and packed[j] == 121:
            j += 1
        run = j - i
        while run:
            k = min(run, 14)
            out.append(121 if k == 1 else 243 + k - 2)
            run -= k
        i = j
    return out


def ref_encode(trits: list[int]) -> list[int]:
    return ref_zero_run(ref_pack(trits))


def encode(trits: list[int]) -> list[int]:
    q = torch.tensor(trits, dtype=torch.int8)
    return zero_run_encode(pack_base3(q)).tolist()


def zero_groups(k: int) -> list[int]:
    return [0] * (5 * k)


# --- base-3^5 and zero-run encoding against the reference ----------------------------------


def test_byte_convention_by_hand():
    # First trit most significant (§3.2's a·3^4 + ... + e); padding trit 0 (= q of -1).
    assert pack_base3(torch.tensor([1, 0, 0, 0, 0], dtype=torch.int8)).tolist() == [202]
    assert pack_base3(torch.tensor([0, 0, 0, 0, 1], dtype=torch.int8)).tolist() == [122]
    assert pack_base3(torch.tensor([-1, -1, -1, -1, -1], dtype=torch.int8)).tolist() == [0]
    assert pack_base3(torch.tensor([1, 1, 1, 1, 1], dtype=torch.int8)).tolist() == [242]
    assert pack_base3(torch.tensor([1], dtype=torch.int8)).tolist() == [162]
    assert pack_base3(torch.tensor([0] * 7, dtype=torch.int8)).tolist() == [121, 108]
    assert encode(zero_groups(1)) == [121]
    assert encode(zero_groups(2)) == [243]
    assert encode(zero_groups(14)) == [255]
    assert encode(zero_groups(15)) == [255, 121]
    assert encode(zero_groups(16)) == [255, 243]
    assert encode(zero_groups(29)) == [255, 255, 121]
    assert encode([]) == []


NONZERO = [1, -1, 0, 1, 0]  # a group that is not five zeros


@pytest.mark.parametrize(
    "trits",
    [
        pytest.param(NONZERO + zero_groups(1) + NONZERO, id="run-1"),
        pytest.param(NONZERO + zero_groups(2) + NONZERO, id="run-2"),
        pytest.param(zero_groups(14) + NONZERO, id="run-14"),
        pytest.param(NONZERO + zero_groups(15), id="run-15"),
        pytest.param(NONZERO + zero_groups(29) + NONZERO + zero_groups(1), id="run-29"),
        pytest.param(zero_groups(1) + NONZERO + zero_groups(2) + zero_groups(0), id="mixed"),
        pytest.param(zero_groups(3) + [0, 0], id="pad-zeros-12"),
        pytest.param(zero_groups(2) + [1], id="pad-one-11"),
        pytest.param([0, 0, 0], id="pad-3"),
        pytest.param([-1] * 4, id="pad-4"),
        pytest.param([1], id="single"),
        pytest.param(zero_groups(40), id="all-zero-200"),
        pytest.param([0] * 203, id="all-zero-203"),
        pytest.param([0] * 70 + [1] + [0] * 140, id="runs-around-one"),
    ],
)
def test_encoder_matches_reference(trits):
    assert encode(trits) == ref_encode(trits)


def test_encoder_matches_reference_random():
    rng = np.random.default_rng(0)
    trits = rng.choice([-1, 0, 1], size=4003, p=[0.05, 0.9, 0.05]).tolist()
    assert encode(trits) == ref_encode(trits)
    dense = rng.integers(-1, 2, size=997).tolist()
    assert encode(dense) == ref_encode(dense)


def byte_stream(kind: str) -> list[int]:
    rng = np.random.default_rng(len(kind))
    if kind == "few-literals":  # long runs of 121 between rare literal bytes
        b = np.full(5000, 121)
        b[rng.integers(0, 5000, 60)] = rng.integers(0, 243, 60)
    elif kind == "few-runs":  # literal bytes with a few runs of 121
        b = rng.integers(0, 243, 5000)
        for start, length in ((0, 3), (100, 14), (500, 15), (900, 29), (4970, 30)):
            b[start : start + length] = 121
    else:  # "short-runs": runs of one and two 121s between single literals
        b = np.tile([7, 121, 121, 200, 121], 1000)
    return b.tolist()


@pytest.mark.parametrize("kind", ["few-literals", "few-runs", "short-runs"])
def test_zero_run_coding_on_byte_streams(kind):
    b = byte_stream(kind)
    encoded = zero_run_encode(torch.tensor(b, dtype=torch.uint8))
    assert encoded.tolist() == ref_zero_run(b)
    assert zero_run_decode(encoded).tolist() == b


@st.composite
def trit_arrays(draw):
    """Up to 2000 trits: zero runs (often longer than 14 groups) between random stretches."""
    out: list[int] = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            out += [0] * draw(st.integers(0, 300))
        else:
            out += draw(st.lists(st.sampled_from([-1, 0, 1]), max_size=40))
    return out[:2000]


@settings(max_examples=2 * settings.default.max_examples, deadline=None)
@given(trit_arrays())
def test_round_trip_lossless(trits):
    q = torch.tensor(trits, dtype=torch.int8)
    packed = pack_base3(q)
    encoded = zero_run_encode(packed)
    assert encoded.tolist() == ref_encode(trits)
    assert encoded.numel() <= packed.numel()  # zero-run encoding never expands
    decoded = zero_run_decode(encoded)
    assert torch.equal(decoded, packed)
    assert unpack_base3(decoded, len(trits)).tolist() == trits


def test_decoders_reject_bad_input():
    with pytest.raises(ValueError):
        unpack_base3(torch.tensor([121, 121], dtype=torch.uint8), 5)  # 2 bytes for 5 values
    with pytest.raises(ValueError):
        unpack_base3(torch.tensor([243], dtype=torch.uint8), 5)  # a run code, not a group
    with pytest.raises(ValueError):
        pack_base3(torch.tensor([2], dtype=torch.int8))
    c = ThreeLC()
    p = c.compress(torch.randn(100), "k", 0)
    p.shape = torch.Size([200])
    with pytest.raises(ValueError):
        c.decompress(p, "k", 0)


# --- quantization (§3.1) ---------------------------------------------------------------------


def test_quantize_is_round_of_x_over_m():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for s in (1.0, 1.5, 1.9):
        q, m = quantize(x, s)
        assert m == float(np.float32(x.abs().max().item() * s))
        assert q.dtype == torch.int8 and q.shape == x.shape
        assert torch.equal(q, torch.round(x / m).to(torch.int8))


def test_quantize_ties_round_half_to_even():
    q, m = quantize(torch.tensor([1.0, 0.5, -0.5, 0.25, -1.0]), 1.0)
    assert m == 1.0
    assert q.tolist() == [1, 0, 0, 0, -1]


def test_sparsity_multiplier_gives_more_zeros():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(2))
    c_zeros, c_bytes = [], []
    for s in (1.0, 1.25, 1.5, 1.75, 1.99):
        q, _ = quantize(x, s)
        c_zeros.append(int((q == 0).sum()))
        c_bytes.append(ThreeLC(s).compress(x, "k", 0).wire_bytes)
    assert c_zeros == sorted(c_zeros) and c_zeros[-1] > c_zeros[0]
    assert c_bytes == sorted(c_bytes, reverse=True)


# --- the compressor ----------------------------------------------------------------------------


def test_properties():
    c = ThreeLC()
    assert (c.name, c.family, c.rounds) == ("threelc", "threelc", 1)
    assert not c.additive and not c.splittable and c.data_dependent
    with pytest.raises(TypeError):
        c.split(c.compress(torch.ones(10), "k", 0), 2)
    with pytest.raises(TypeError):
        c.compress(torch.ones(10, dtype=torch.int32), "k", 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", [0, 1, 7, 1000])
@pytest.mark.parametrize("sparsity", [1.0, 1.75])
@pytest.mark.parametrize("sparse", [False, True], ids=["randn", "sparse"])
def test_compress_round_trip(dtype, size, sparsity, sparse):
    x = torch.randn(size, generator=torch.Generator().manual_seed(size)).to(dtype)
    if sparse:
        x[size // 10 :] = 0  # mostly zero groups: the decoder writes only the others
    c = ThreeLC(sparsity)
    payload = c.compress(x, "k", 0)
    y = c.decompress(payload, "k", 0)
    assert y.shape == x.shape and y.dtype == x.dtype
    q, m = quantize(x, sparsity)
    assert torch.equal(y, dequantize(q, m, dtype))
    assert payload.tensors["bytes"].dtype == torch.uint8
    assert payload.tensors["scale"].dtype == torch.float32
    assert payload.tensors["scale"].numel() == 1
    assert torch.equal(payload.tensors["bytes"], zero_run_encode(pack_base3(q)))
    on_wire = sum(t.numel() * t.element_size() for t in payload.tensors.values())
    assert payload.wire_bytes == on_wire
    assert on_wire <= c.wire_bytes(size, 0) == math.ceil(size / 5) + 4


@pytest.mark.parametrize(
    "x",
    [
        pytest.param(torch.tensor(-2.5), id="0-dim"),
        pytest.param(torch.randn(4, 3, 5).permute(2, 0, 1), id="non-contiguous"),
        pytest.param(torch.zeros(2, 0, 3), id="empty-3d"),
        pytest.param(torch.zeros(33), id="all-zero"),
        pytest.param(torch.randn(6, requires_grad=True), id="requires-grad"),
    ],
)
def test_compress_shapes(x):
    c = ThreeLC(1.5)
    y = c.decompress(c.compress(x, "k", 0), "k", 0)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.equal(y, dequantize(*quantize(x, 1.5), x.dtype))


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_compress_large_blocks(kind):
    """Several packing blocks, a length that is not a multiple of 5, and both encoder and
    decoder strategies (few or many nonzero groups) against the serial reference."""
    g = torch.Generator().manual_seed(3)
    n = 5 * (1 << 15) + 2 * 5 * 1000 + 3
    if kind == "sparse":
        x = torch.zeros(n)
        hits = torch.randint(0, n, (300,), generator=g)
        x[hits] = torch.randn(300, generator=g)
    else:
        x = torch.rand(n, generator=g) * 2 - 1
        x[1000:90_000] = 0.0  # one zero run across a block boundary
    c = ThreeLC()
    payload = c.compress(x, "k", 0)
    q, m = quantize(x, 1.0)
    assert payload.tensors["bytes"].tolist() == ref_encode(q.tolist())
    assert torch.equal(c.decompress(payload, "k", 0), dequantize(q, m))


def test_non_finite_input_stays_non_finite():
    c = ThreeLC()
    for bad in (float("inf"), float("nan")):
        y = c.decompress(c.compress(torch.tensor([1.0, bad, 0.0, -2.0]), "k", 0), "k", 0)
        assert not torch.isfinite(y).any()


def test_create_validates_sparsity():
    c = create("threelc", sparsity=1.75)
    assert isinstance(c, ThreeLC) and c.sparsity == 1.75
    assert create("threelc").sparsity == 1.0
    with pytest.raises(ConfigError):
        create("threelc", sparsity=2.0)
    with pytest.raises(ConfigError):
        create("threelc", sparsity=0.5)
