"""Issue #16: payload buffers per (key, phase), the device (torch) paths against the CPU
fast paths, and every kind on CUDA where a GPU is visible.

- Buffers (`gcbench.compress.base`): a payload's tensors are the compressor's buffers,
  the same ones (same `data_ptr`) at every step of one key; the phase is the count of
  earlier compresses of that key at the same step, so a second compress in one step (a
  divisible scheme, PowerSGD's round 1, simulated workers sharing an instance) never
  overwrites a payload still in flight.
- Device paths: `base.HOST_FAST_PATHS = False` makes CPU tensors take the torch paths
  that CUDA runs; they must give the same payloads as the fast paths (bit for bit, except
  sums whose order differs: efsignsgd's scale and onebit's means, to 1e-6; the stochastic
  kinds given the same uniforms).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench.compress import base, chunks, create, names
from gcbench.compress import stochastic as sq
from gcbench.compress import threelc as t3
from gcbench.compress.base import MAX_PHASES, Compressor, Payload

ALL = names()
PARAMS: dict[str, dict] = {"threshold": {"threshold": 0.5}, "covap": {"interval": 1}}
LOWRANK = ("powersgd", "acpsgd")
# Sums taken in another order on the two paths: equal to rounding, not bit for bit.
SUMS = {("efsignsgd", "scale"), ("onebit", "means")}


def make(name: str) -> Compressor:
    return create(name, **PARAMS.get(name, {}))


def tensor_for(name: str, n: int, dtype: torch.dtype = torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if name in LOWRANK:
        side = max(2, int(math.isqrt(n)))
        return torch.randn(side, n // side, generator=g).to(dtype)
    return torch.randn(n, generator=g).to(dtype)


def send(c: Compressor, x: torch.Tensor, key: str, step: int) -> Payload:
    """Every round of one step on one worker (earlier rounds passed on unreduced)."""
    p = c.compress(x, key, step)
    for _ in range(1, c.rounds):
        p = c.compress(x, key, step, prev=c.reduce([p]))
    return p


def snapshot(p: Payload) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in p.tensors.items()}


# --- buffers and phases ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_payload_buffers_keep_their_data_ptr_across_steps_of_one_key(name):
    c = make(name)
    x = tensor_for(name, 4099)
    ptrs = []
    for step in range(4):
        p = send(c, x, "layer#3", step)
        ptrs.append({k: (t.data_ptr(), t.numel()) for k, t in p.tensors.items() if t.numel()})
    assert ptrs[0], name  # something is sent
    if name == "dgc":  # a sampled threshold: the count varies, the buffer only grows
        for a, b in zip(ptrs, ptrs[1:], strict=False):
            for k in a:
                if b[k][1] <= a[k][1]:
                    assert b[k][0] == a[k][0], (k, a, b)
        return
    seen: dict[str, set[int]] = {}  # ACP-SGD sends P and Q on alternate steps
    for p in ptrs:
        for k, (ptr, _) in p.items():
            seen.setdefault(k, set()).add(ptr)
    assert all(len(s) == 1 for s in seen.values()), ptrs


def test_buffers_are_per_key():
    c = create("fp16")
    a, b = c.compress(torch.ones(10), "a", 0), c.compress(torch.ones(10), "b", 0)
    assert a.tensors["values"].data_ptr() != b.tensors["values"].data_ptr()


@pytest.mark.parametrize("name", [n for n in ALL if make(n).rounds == 1])
def test_a_second_compress_in_one_step_never_overwrites_the_first(name):
    """A divisible scheme compresses a key twice in one step (two phases); simulated
    workers sharing one instance do the same. Every payload of the step stays intact."""
    c = make(name)
    xs = [tensor_for(name, 1000, seed=s) for s in range(MAX_PHASES + 2)]  # past MAX_PHASES
    for step in (5, 6):
        payloads = [c.compress(x, "w#1", step) for x in xs]
        kept = [snapshot(p) for p in payloads]
        for p, before in zip(payloads, kept, strict=True):
            for k in before:
                assert torch.equal(p.tensors[k], before[k]), (name, k)
        first = [t.data_ptr() for t in payloads[0].tensors.values() if t.numel()]
        assert all(
            ptr not in [t.data_ptr() for t in other.tensors.values() if t.numel()]
            for other in payloads[1:]
            for ptr in first
        )


def test_phase_buffers_are_reused_at_the_next_step():
    c = create("fp16")
    x, y = torch.randn(64), torch.randn(64)
    p0, p1 = c.compress(x, "k", 0), c.compress(y, "k", 0)  # phases 0 and 1
    q0, q1 = c.compress(y, "k", 1), c.compress(x, "k", 1)
    assert q0.tensors["values"].data_ptr() == p0.tensors["values"].data_ptr()
    assert q1.tensors["values"].data_ptr() == p1.tensors["values"].data_ptr()
    assert torch.equal(q0.tensors["values"], y.half()) and torch.equal(
        q1.tensors["values"], x.half()
    )


def test_phases_past_the_limit_get_fresh_tensors():
    c = create("none")
    ps = [c.compress(torch.full((8,), float(i)), "k", 0) for i in range(MAX_PHASES + 3)]
    assert [float(p.tensors["values"][0]) for p in ps] == list(range(MAX_PHASES + 3))
    again = [c.compress(torch.zeros(8), "k", 1) for _ in range(MAX_PHASES + 1)]
    assert again[0].tensors["values"].data_ptr() == ps[0].tensors["values"].data_ptr()
    assert again[-1].tensors["values"].data_ptr() not in {
        p.tensors["values"].data_ptr() for p in ps
    }


def test_powersgd_round_zero_payload_survives_round_one():
    c = create("powersgd", rank=2)
    x = torch.randn(32, 16)
    p = c.compress(x, "w", 3)
    before = p.tensors["p"].clone()
    c.compress(x, "w", 3, prev=p)  # round 1 (phase 1): its own buffers
    assert torch.equal(p.tensors["p"], before)


def test_payload_clone_outlives_the_buffers():
    c = create("signsgd")
    p = c.compress(torch.tensor([1.0, -1.0, 2.0]), "k", 0)
    kept = p.clone()
    c.compress(torch.tensor([-1.0, 1.0, -2.0]), "k", 1)  # rewrites p's buffer
    assert kept.tensors["signs"].tolist() == [0b010] and p.tensors["signs"].tolist() == [0b101]


def test_decompress_never_returns_a_payload_buffer():
    for name in ("none", "fp16", "covap"):
        c = make(name)
        x = torch.randn(10)
        p = c.compress(x, "k#0", 0)
        out = c.decompress(p, "k#0", 0)
        before = out.clone()
        out += 1
        assert torch.equal(c.decompress(p, "k#0", 0), before), name


def test_reset_forgets_the_buffers():
    c = create("fp16")
    p = c.compress(torch.randn(10), "k", 0)
    ptr = p.tensors["values"].data_ptr()
    c.reset()
    keep = p  # the old buffer stays alive: a new one cannot reuse its address
    assert c.compress(torch.randn(10), "k", 1).tensors["values"].data_ptr() != ptr
    assert keep.tensors["values"].numel() == 10


# --- device (torch) paths against the CPU fast paths ----------------------------------------


def fixed_uniforms(monkeypatch) -> None:
    """Both paths of terngrad and qsgd draw the same uniforms (a function of the key,
    step and size), so their codes must agree bit for bit."""

    def uniform(self, n, x, key, step):
        g = torch.Generator().manual_seed(base.stable_seed(self.name, self.seed, key, step))
        return torch.rand(n, generator=g).to(x.device)

    monkeypatch.setattr(sq._Stochastic, "_uniform", uniform)


def run_paths(monkeypatch, name: str, x: torch.Tensor, steps: int = 2):
    """(payloads, reconstructions) of the fast paths and of the device paths."""
    out = []
    for fast in (True, False):
        monkeypatch.setattr(base, "HOST_FAST_PATHS", fast)
        c = make(name)
        payloads, recons = [], []
        for step in range(steps):
            p = send(c, x * (1 + step), "layer#2", step)
            payloads.append(snapshot(p))
            recons.append(c.aggregate([p], "layer#2", step))
        out.append((payloads, recons))
    monkeypatch.setattr(base, "HOST_FAST_PATHS", True)
    return out


def assert_same(name: str, fast, device) -> None:
    (pf, rf), (pd, rd) = fast, device
    for a, b in zip(pf, pd, strict=True):
        assert a.keys() == b.keys(), name
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, (name, k)
            if (name, k) in SUMS:
                assert torch.allclose(a[k], b[k], rtol=1e-6, atol=0), (name, k, a[k], b[k])
            else:
                assert torch.equal(a[k], b[k]), (name, k)
    for a, b in zip(rf, rd, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if any(n == name for n, _ in SUMS):
            assert torch.allclose(a, b, rtol=1e-6, atol=0), name
        else:
            assert torch.equal(a, b), name


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_device_paths_match_the_fast_paths(monkeypatch, name, dtype):
    fixed_uniforms(monkeypatch)
    for n in (0, 1, 13, 1000, 4099):
        x = tensor_for(name, n, dtype, seed=n)
        if x.numel() > 5:
            x.reshape(-1)[:5] = 0.0  # zeros: the sign of zero, and a zero group for 3LC
        assert_same(name, *run_paths(monkeypatch, name, x))


@pytest.mark.parametrize(
    "name", ["signsgd", "efsignsgd", "onebit", "signum", "terngrad", "qsgd", "threelc", "randomk"]
)
def test_device_paths_match_on_several_chunks(monkeypatch, name):
    """Sizes past one chunk (`chunks.CHUNK`), and not a multiple of 8 or 5."""
    fixed_uniforms(monkeypatch)
    x = tensor_for(name, 2 * chunks.CHUNK + 13, seed=7)
    assert_same(name, *run_paths(monkeypatch, name, x, steps=1))


@pytest.mark.parametrize(
    "data", ["gradient", "sparse", "dense", "subnormal", "all-zero", "inf", "nan", "fp64"]
)
@pytest.mark.parametrize("sparse_min", [0, t3.SPARSE_MIN])
def test_threelc_sparse_dense_and_device_paths_agree(monkeypatch, data, sparse_min):
    """3LC's host path finds the nonzero values (sparse) or packs every byte (dense);
    both, and the device path, against the paper's serial reference."""
    from test_compress_threelc import ref_encode

    monkeypatch.setattr(t3, "SPARSE_MIN", sparse_min)
    g = torch.Generator().manual_seed(11)
    n = 3 * chunks.CHUNK + 3 if sparse_min else 5003
    x = torch.randn(n, generator=g)
    if data == "sparse":
        x[torch.rand(n, generator=g) < 0.99] = 0.0
    elif data == "dense":
        x = torch.rand(n, generator=g) * 2 - 1
    elif data == "subnormal":  # m/2 underflows fp32: comparisons in float64
        x = x * 1e-40
    elif data == "all-zero":
        x.zero_()
    elif data == "inf":
        x[n // 2] = float("inf")
    elif data == "nan":  # past the first chunk: the compiled scan gives up for the dense path
        x[n - 17] = float("nan")
    elif data == "fp64":
        x = x.double() * 1e-3
    q_ref, m_ref = t3.quantize(x, 1.5)
    expected = t3.zero_run_encode(t3.pack_base3(q_ref))
    if n < 20_000:
        assert expected.tolist() == ref_encode(q_ref.tolist())
    for fast in (True, False):
        monkeypatch.setattr(base, "HOST_FAST_PATHS", fast)
        c = t3.ThreeLC(1.5)
        p = c.compress(x, "k", 0)
        assert float(p.tensors["scale"]) == m_ref or (
            math.isnan(m_ref) and math.isnan(float(p.tensors["scale"]))
        )
        assert torch.equal(p.tensors["bytes"], expected), (data, fast)
        y = c.decompress(p, "k", 0)
        assert torch.equal(y, t3.dequantize(q_ref, m_ref, x.dtype)) or data in ("inf", "nan")


def test_chunked_uniforms_are_the_sequential_stream():
    n = 2 * chunks.CHUNK + 11
    out = np.empty(n, np.float32)
    sq._np_uniform_into(42, out)
    ref = np.random.Generator(np.random.PCG64(42)).random(n, dtype=np.float32)
    assert np.array_equal(out, ref)


def test_results_do_not_depend_on_the_thread_count():
    x = torch.randn(3 * chunks.CHUNK + 5, generator=torch.Generator().manual_seed(3))
    old = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            out.append(
                [
                    snapshot(create(n).compress(x, "k", 0))
                    for n in ("efsignsgd", "onebit", "threelc")
                ]
            )
    finally:
        torch.set_num_threads(old)
    for other in out[1:]:
        for a, b in zip(out[0], other, strict=True):
            assert all(torch.equal(a[k], b[k]) for k in a)


def test_chunk_errors_reach_the_caller():
    def fail(lo, hi):
        if lo:
            raise ValueError("boom")
        return lo

    with pytest.raises(ValueError, match="boom"):
        chunks.for_chunks(5 * chunks.CHUNK, fail)


# --- CUDA -------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL)
def test_every_kind_runs_on_cuda(name):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible (torch.cuda.is_available() is False)")
    dev = torch.device("cuda")
    for n in (0, 7, 4099, 2 * chunks.CHUNK + 13):
        x = tensor_for(name, n, seed=n)
        c_gpu, c_cpu = make(name), make(name)
        for step in range(2):
            p = send(c_gpu, x.to(dev), "layer#1", step)
            assert all(t.device.type == "cuda" for t in p.tensors.values()), name
            out = c_gpu.aggregate([p, p], "layer#1", step)
            assert out.device.type == "cuda" and out.shape == x.shape and out.dtype == x.dtype
            ref = send(c_cpu, x, "layer#1", step)
            assert p.wire_bytes == ref.wire_bytes or make(name).data_dependent, name
            if name in ("terngrad", "qsgd"):  # the device draws its own uniforms
                continue
            if name == "topk":  # unsorted: the order of the k may differ between devices
                order_gpu = p.tensors["indices"].cpu().argsort()
                order_cpu = ref.tensors["indices"].argsort()
                for k in ("indices", "values"):
                    assert torch.equal(p.tensors[k].cpu()[order_gpu], ref.tensors[k][order_cpu])
                continue
            for k, t in ref.tensors.items():
                got = p.tensors[k].cpu()
                if (name, k) in SUMS or name in LOWRANK:
                    assert torch.allclose(got, t, rtol=1e-4, atol=1e-5), (name, k)
                elif name != "dgc":  # its sample of magnitudes may tie differently
                    assert torch.equal(got, t), (name, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, chunks.ASUM_PIECE - 1, chunks.ASUM_PIECE + 3, 300_001])
def test_abs_sum_matches_a_float64_reference_with_and_without_blas(monkeypatch, dtype, n):
    """efsignsgd's Σ|x| per block: BLAS asum (in pieces, `chunks.abs_sum`) and the numpy
    fallback both agree with an fp64 sum, to fp32 accumulation error."""
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    want = float(np.abs(x.astype(np.float64)).sum())
    rel = 1e-5 if dtype == np.float32 else 1e-12
    blas = chunks.abs_sum(x)
    monkeypatch.setattr(chunks, "_ASUM", {})  # no BLAS: the numpy route
    plain = chunks.abs_sum(x)
    assert blas == pytest.approx(want, rel=rel, abs=1e-30)
    assert plain == pytest.approx(want, rel=rel, abs=1e-30)


def test_abs_sum_finds_the_bundled_blas():
    """numpy wheels bundle OpenBLAS: if this fails, efsignsgd silently takes the slower
    numpy route (a speed regression, not a wrong result)."""
    chunks.abs_sum(np.ones(8, np.float32))
    assert chunks._ASUM and np.dtype(np.float32) in chunks._ASUM
