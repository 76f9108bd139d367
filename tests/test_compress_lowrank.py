"""PowerSGD and ACP-SGD (`gcbench.compress.lowrank`) against float64 references of the
ACP-SGD paper's Algorithms 1 and 2, the shape convention, and Table I's ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.cluster.fused import Fused, HookFused
from gcbench.compress import registry
from gcbench.compress.base import generator
from gcbench.compress.lowrank import (
    ACPSGD,
    PowerSGD,
    acpsgd_numel,
    compressed_numel,
    lowrank_view,
    matrix_view,
    orthogonalize,
)
from gcbench.errors import ConfigError

KEY = "layer.weight"


def gram_schmidt(p: np.ndarray) -> np.ndarray:
    """Classical Gram–Schmidt, column by column (the definition, not a QR call)."""
    out = p.astype(np.float64).copy()
    for i in range(out.shape[1]):
        for j in range(i):
            out[:, i] -= (out[:, j] @ out[:, i]) * out[:, j]
        out[:, i] /= np.linalg.norm(out[:, i])
    return out


def close(actual, expected, tol: float = 1e-5) -> None:
    """Equal up to the float32 rounding of what goes on the wire (computation is float64)."""
    actual = actual.numpy() if isinstance(actual, torch.Tensor) else actual
    scale = max(float(np.abs(expected).max()), 1e-30)
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


def initial(seed: tuple[object, ...], rows: int, rank: int) -> np.ndarray:
    g = generator(*seed)
    return torch.randn(rows, rank, generator=g, dtype=torch.float32).double().numpy()


def grads(workers: int, shape: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.standard_normal(shape)) for _ in range(workers)]


def powersgd_step(cs: list[PowerSGD], gs: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    """One step of the two-round protocol across workers: P summed, then Q summed."""
    p0 = [c.compress(g, KEY, step) for c, g in zip(cs, gs, strict=True)]
    summed_p = cs[0].reduce(p0)
    p1 = [c.compress(g, KEY, step, prev=summed_p) for c, g in zip(cs, gs, strict=True)]
    return [c.aggregate(p1, KEY, step) for c in cs]


# -- PowerSGD ------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 3])
def test_powersgd_matches_float64_power_iteration(workers):
    n, m, r = 12, 9, 3
    gs = grads(workers, (n, m), seed=1)
    cs = [PowerSGD(rank=r) for _ in range(workers)]
    outs = powersgd_step(cs, gs, step=0)

    q0 = initial(("powersgd", KEY), m, r)
    ms = [g.numpy() for g in gs]
    p_hat = gram_schmidt(sum(mi @ q0 for mi in ms))  # Alg. 1 lines 3-5
    q = sum(mi.T @ p_hat for mi in ms)  # lines 6-7
    expected = p_hat @ q.T  # line 8
    for c, out in zip(cs, outs, strict=True):
        assert out.dtype == torch.float64 and out.shape == (n, m)
        close(c.factors(KEY)["p_hat"], p_hat)
        close(out, expected)
    # the estimate is the projection of the summed gradient onto span(P̂)
    np.testing.assert_allclose(expected, p_hat @ p_hat.T @ sum(ms), rtol=1e-10, atol=1e-12)


def test_powersgd_reuses_the_aggregated_query():
    n, m, r, workers = 10, 8, 2, 3
    cs = [PowerSGD(rank=r) for _ in range(workers)]
    first = grads(workers, (n, m), seed=2)
    powersgd_step(cs, first, step=0)

    q0 = initial(("powersgd", KEY), m, r)
    p_hat = gram_schmidt(sum(g.numpy() @ q0 for g in first))
    q_sum = sum(g.numpy().T @ p_hat for g in first)
    second = grads(workers, (n, m), seed=3)
    for c, g in zip(cs, second, strict=True):
        close(c.factors(KEY)["q"], q_sum)
        p = c.compress(g, KEY, step=1).tensors["p"]  # step 1 starts from step 0's Q
        assert p.dtype == torch.float32  # fp32 on the wire
        close(p, g.numpy() @ q_sum)


def test_powersgd_single_worker_reuses_local_query_and_local_decompress_keeps_state():
    n, m, r = 10, 8, 2
    c = PowerSGD(rank=r)
    (g,) = grads(1, (n, m), seed=4)
    p1 = c.compress(g, KEY, 0, prev=c.compress(g, KEY, 0))
    c.decompress(p1, KEY, 0)  # no reduce: the local Q is the one reused
    np.testing.assert_allclose(c.factors(KEY)["q"].numpy(), p1.tensors["q"].numpy())

    # after aggregate, decompressing a local payload (error feedback does) keeps Σ Q
    cs = [PowerSGD(rank=r) for _ in range(2)]
    gs = grads(2, (n, m), seed=5)
    p0 = cs[0].reduce([ci.compress(gi, KEY, 0) for ci, gi in zip(cs, gs, strict=True)])
    p1s = [ci.compress(gi, KEY, 0, prev=p0) for ci, gi in zip(cs, gs, strict=True)]
    cs[0].aggregate(p1s, KEY, 0)
    summed = cs[0].factors(KEY)["q"]
    cs[0].decompress(p1s[0], KEY, 0)
    torch.testing.assert_close(cs[0].factors(KEY)["q"], summed)
    torch.testing.assert_close(summed, (p1s[0].tensors["q"] + p1s[1].tensors["q"]).double())


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 24), m=st.integers(2, 24), r=st.integers(1, 4), seed=st.integers(0, 999))
def test_powersgd_is_exact_on_matrices_of_rank_at_most_r(n, m, r, seed):
    if lowrank_view((n, m), r) is None:
        return
    rng = np.random.default_rng(seed)
    k = min(r, n, m)
    g = torch.from_numpy(rng.standard_normal((n, k)) @ rng.standard_normal((k, m)))
    (out,) = powersgd_step([PowerSGD(rank=r)], [g], 0)
    # Exact in exact arithmetic; P = M Q0 goes on the wire in float32 and is
    # orthogonalised, so the rounding (2^-24) grows with P's condition number (a random
    # Q0 can give 5e3: seed 410 at 14 x 16, rank 4, errs by 5e-3)
    amplified = 100 * 2.0**-24 * np.linalg.cond(g.numpy() @ initial(("powersgd", KEY), m, r))
    close(out, g.numpy(), max(1e-5, amplified))


def test_orthogonalize_is_gram_schmidt():
    p = torch.randn(20, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q = orthogonalize(p.clone())
    np.testing.assert_allclose(q.numpy(), gram_schmidt(p.numpy()), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(q.T @ q, torch.eye(5, dtype=torch.float64))
    assert torch.isfinite(orthogonalize(torch.zeros(6, 2))).all()  # no 0/0


def test_powersgd_decompress_needs_round_one():
    c = PowerSGD(rank=2)
    g = torch.randn(8, 8)
    p0 = c.compress(g, KEY, 0)
    with pytest.raises(ValueError):
        c.decompress(p0, KEY, 0)
    with pytest.raises(ValueError):
        c.compress(g, KEY, 0, prev=c.compress(g, KEY, 0, prev=p0))


# -- ACP-SGD -------------------------------------------------------------------------------


def test_acpsgd_alternates_p_and_q_in_one_round():
    n, m, r = 12, 20, 3
    c = ACPSGD(rank=r)
    assert c.rounds == 1
    for step in range(4):
        pl = c.compress(torch.randn(n, m), KEY, step)
        assert pl.round == 0
        name, rows = ("p", n) if step % 2 == 0 else ("q", m)
        assert list(pl.tensors) == [name] and pl.tensors[name].shape == (rows, r)
        assert pl.wire_bytes == 4 * rows * r == c.wire_bytes_for_shape((n, m), step)
        assert c.aggregate([pl], KEY, step).shape == (n, m)


@pytest.mark.parametrize("shape", [(12, 9), (6, 2, 3, 3)])
def test_acpsgd_matches_algorithm_2_with_error_feedback(shape):
    workers, r, steps = 3, 2, 5
    n, m = matrix_view(shape)
    cs = [ACPSGD(rank=r) for _ in range(workers)]
    p = initial(("acpsgd", KEY, "p"), n, r)
    q = initial(("acpsgd", KEY, "q"), m, r)
    e = [np.zeros((n, m)) for _ in range(workers)]
    for step in range(steps):
        gs = grads(workers, shape, seed=10 + step)
        payloads = [c.compress(g, KEY, step) for c, g in zip(cs, gs, strict=True)]
        outs = [c.aggregate(payloads, KEY, step) for c in cs]
        a = [g.numpy().reshape(n, m) + ei for g, ei in zip(gs, e, strict=True)]
        if step % 2 == 0:  # Alg. 2 lines 4-7 (the paper's odd 1-based t)
            q_hat = gram_schmidt(q)
            ps = [ai @ q_hat for ai in a]
            e = [ai - pi @ q_hat.T for ai, pi in zip(a, ps, strict=True)]
            p = sum(ps)
            expected = p @ q_hat.T
        else:  # lines 9-12
            p_hat = gram_schmidt(p)
            qs = [ai.T @ p_hat for ai in a]
            e = [ai - p_hat @ qi.T for ai, qi in zip(a, qs, strict=True)]
            q = sum(qs)
            expected = p_hat @ q.T
        for c, out, ei in zip(cs, outs, e, strict=True):
            assert out.shape == shape and out.dtype == torch.float64
            close(out.reshape(n, m), expected)
            close(c.factors(KEY)["error"], ei)


def test_acpsgd_internal_error_feedback_equals_an_external_residual():
    n, m, r = 10, 7, 2
    inner, outer = ACPSGD(rank=r), ACPSGD(rank=r, error_feedback=False)
    residual = torch.zeros(n, m, dtype=torch.float64)
    for step in range(4):
        (g,) = grads(1, (n, m), seed=30 + step)
        a = inner.aggregate([inner.compress(g, KEY, step)], KEY, step)
        comp = g + residual
        pl = outer.compress(comp, KEY, step)
        residual = comp - outer.decompress(pl, KEY, step)
        b = outer.aggregate([pl], KEY, step)
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(inner.factors(KEY)["error"], residual)
    assert "error" not in outer.factors(KEY)


def test_acpsgd_decompress_needs_the_step_it_compressed():
    c = ACPSGD(rank=2)
    pl = c.compress(torch.randn(8, 8), KEY, 0)
    with pytest.raises(ValueError):
        c.decompress(pl, KEY, 1)


# -- shape convention and bytes ------------------------------------------------------------


@pytest.mark.parametrize("cls", [PowerSGD, ACPSGD])
def test_conv_weight_is_compressed_as_out_by_in_k_k(cls):
    c = cls(rank=4)
    assert lowrank_view((64, 3, 7, 7), 4) == (64, 147)
    g = torch.randn(64, 3, 7, 7)
    pl = c.compress(g, KEY, 0)
    assert pl.tensors["p"].shape == (64, 4)
    if cls is PowerSGD:
        pl = c.compress(g, KEY, 0, prev=pl)
    else:
        pl = c.compress(g, KEY, 1)
    assert pl.tensors["q"].shape == (147, 4)
    assert c.decompress(pl, KEY, 1 if cls is ACPSGD else 0).shape == (64, 3, 7, 7)


@pytest.mark.parametrize("cls", [PowerSGD, ACPSGD])
@pytest.mark.parametrize("shape", [(64,), (4, 4)])
def test_bias_and_small_matrix_are_sent_exactly(cls, shape):
    c = cls(rank=4)
    g = torch.randn(shape)
    (out,) = _protocol(c, [g], step=0)
    assert torch.equal(out, g)
    assert c.wire_bytes_for_shape(shape, 0) == 4 * g.numel() == 4 * compressed_numel(shape, 4)
    assert lowrank_view(shape, 4) is None
    assert lowrank_view((4, 4), 1) == (4, 4)  # 1·8 < 16: compressed at rank 1


def _protocol(c, gs: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    """The whole step for either compressor, every worker sharing compressor `c`'s state
    (fine for one worker; for several, only where the state is the same)."""
    if c.rounds == 2:
        summed = c.reduce([c.compress(g, KEY, step) for g in gs])
        final = [c.compress(g, KEY, step, prev=summed) for g in gs]
    else:
        final = [c.compress(g, KEY, step) for g in gs]
    return [c.aggregate(final, KEY, step)]


@pytest.mark.parametrize("cls", [PowerSGD, ACPSGD])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(), (0,), (1,), (1, 1), (0, 5), (3, 0, 2), (7,), (9, 6)])
def test_round_trip_shape_dtype_and_exact_wire_bytes(cls, dtype, shape):
    c = cls(rank=2)
    g = torch.randn(shape).to(dtype)
    for step in (0, 1):
        if cls is PowerSGD:
            p0 = c.compress(g, KEY, step)
            assert p0.wire_bytes == c.wire_bytes_for_shape(shape, step, round=0)
            final = c.compress(g, KEY, step, prev=p0)
            assert final.wire_bytes == c.wire_bytes_for_shape(shape, step, round=1)
            total = p0.wire_bytes + final.wire_bytes
        else:
            final = c.compress(g, KEY, step)
            total = final.wire_bytes
        assert total == c.wire_bytes_for_shape(shape, step)
        assert final.wire_bytes == c.payload_bytes(shape, KEY, step)  # the last round's
        assert all(t.dtype == torch.float32 for t in final.tensors.values())
        out = c.decompress(final, KEY, step)
        assert out.shape == g.shape and out.dtype == dtype
        if lowrank_view(shape, 2) is None:  # exact up to the fp32 wire
            assert torch.equal(out, g.float().to(dtype))


def test_wire_bytes_by_numel_uses_known_shapes():
    p, a = PowerSGD(rank=4), ACPSGD(rank=4)
    numel = 64 * 3 * 7 * 7
    assert p.wire_bytes(numel, 0) == a.wire_bytes(numel, 0) == 4 * numel  # taken as 1-D
    p.compress(torch.randn(64, 3, 7, 7), KEY, 0)
    a.learn_shapes({KEY: (64, 3, 7, 7)})
    assert p.wire_bytes(numel, 0) == 4 * 4 * (64 + 147)
    assert a.wire_bytes(numel, 0) == 4 * 4 * 64 and a.wire_bytes(numel, 1) == 4 * 4 * 147
    p.learn_shapes({"a": (64, 576), "b": (192, 192)})  # same numel: the larger count
    assert p.wire_bytes(36864, 0) == 4 * 4 * max(64 + 576, 192 + 192)


@settings(max_examples=settings.default.max_examples // 2, deadline=None)
@given(shape=st.lists(st.integers(0, 40), min_size=0, max_size=4), r=st.integers(1, 40))
def test_numel_formulas(shape, r):
    numel = math.prod(shape)
    sent = compressed_numel(shape, r)
    assert sent <= numel
    extra = numel if lowrank_view(shape, r) is None else 0
    assert acpsgd_numel(shape, r, 0) + acpsgd_numel(shape, r, 1) == sent + extra


@pytest.mark.parametrize(
    "model, rank, table",
    [("resnet50", 4, 67), ("resnet152", 4, 53), ("bert-base", 32, 16), ("bert-large", 32, 21)],
)
def test_powersgd_ratio_matches_table_1(model, rank, table):
    from gcbench.zoo.profile import model_profile

    shapes = [t.shape for t in model_profile(model).tensors]
    total = sum(math.prod(s) for s in shapes)
    ratio = total / sum(compressed_numel(s, rank) for s in shapes)
    assert ratio == pytest.approx(table, rel=0.05)
    c = PowerSGD(rank=rank)
    assert 4 * sum(compressed_numel(s, rank) for s in shapes) == sum(
        c.wire_bytes_for_shape(s, 0) for s in shapes
    )
    # ACP-SGD sends one factor a step: over two steps as much as Power-SGD in one step,
    # plus the uncompressed tensors twice.
    acp = sum(acpsgd_numel(s, rank, 0) + acpsgd_numel(s, rank, 1) for s in shapes) / 2
    assert 1.5 * ratio < total / acp < 2 * ratio


# -- reduce, registry ----------------------------------------------------------------------


def test_reduce_is_linear_given_the_same_p_hat():
    n, m, r, workers = 16, 12, 3, 3
    c = PowerSGD(rank=r)
    gs = [torch.randn(n, m) for _ in range(workers)]
    summed = c.reduce([c.compress(g, KEY, 0) for g in gs])
    q_payloads = [c.compress(g, KEY, 0, prev=summed) for g in gs]
    reduced = c.reduce(q_payloads)
    assert reduced.info["reduced"] == workers and reduced.tensors["q"].dtype == torch.float32
    each = sum(c.decompress(pl, KEY, 0) for pl in q_payloads)
    torch.testing.assert_close(c.decompress(reduced, KEY, 0), each, rtol=1e-5, atol=1e-5)

    a = ACPSGD(rank=r, error_feedback=False)
    for step in (0, 1):
        payloads = [a.compress(g, KEY, step) for g in gs]  # same fixed factor for all
        each = sum(a.decompress(pl, KEY, step) for pl in payloads)
        torch.testing.assert_close(a.aggregate(payloads, KEY, step), each, rtol=1e-5, atol=1e-5)


def test_registry_and_config():
    with pytest.raises(ConfigError):
        registry.create("powersgd", rank=0)
    with pytest.raises(ConfigError):
        registry.create("acpsgd", rank=0)
    with pytest.raises(ConfigError):
        PowerSGD(rank=0)
    c = registry.create("powersgd", rank=8)
    assert isinstance(c, PowerSGD) and c.rank == 8
    a = registry.create("acpsgd-r32")
    assert isinstance(a, ACPSGD) and a.rank == 32 and a.error_feedback
    for cls, rounds in ((PowerSGD, 2), (ACPSGD, 1)):
        assert cls.family == "lowrank" and cls.additive and not cls.data_dependent
        assert cls.rounds == rounds


def test_state_numel_and_reset():
    c = ACPSGD(rank=2)
    c.aggregate([c.compress(torch.randn(8, 6), KEY, 0)], KEY, 0)
    assert c.state_numel() == 8 * 2 + 6 * 2 + 8 * 6 + 6 * 2
    c.reset()
    assert c.state_numel() == 0


def test_the_hooks_order_sends_the_same_bytes_and_sums_in_three_rounds():
    """`HookFused` (the emulated `powersgd` strategy, torch's powerSGD_hook order): round 0
    the bucket's uncompressed tensors, round 1 its Ps, round 2 its Qs; the same aggregate
    and the same bytes in all as `Fused` over PowerSGD's two rounds; a worker's own
    round-2 payload decompresses its vectors to its own values (error feedback)."""
    shapes = {"b": [(16, 8), (8,), (32, 4, 3, 3), (5,)]}
    numel = sum(math.prod(s) for s in shapes["b"])
    grads = [torch.randn(numel, generator=torch.Generator().manual_seed(w)) for w in range(3)]

    def run(cls):
        comps = [cls(PowerSGD(rank=2), shapes) for _ in grads]
        mine = [c.compress(g, "b", 0) for c, g in zip(comps, grads, strict=True)]
        sent = [sum(p.wire_bytes for p in mine)]
        for _ in range(1, comps[0].rounds):
            summed = comps[0].reduce(mine)
            mine = [c.compress(g, "b", 0, summed) for c, g in zip(comps, grads, strict=True)]
            sent.append(sum(p.wire_bytes for p in mine))
        return comps, mine, sent, comps[0].aggregate(mine, "b", 0)

    _, _, two, want = run(Fused)
    comps, mine, three, got = run(HookFused)
    assert len(two) == 2 and len(three) == 3 and sum(three) == sum(two)
    vectors = [8, 5]
    assert three[0] == 3 * 4 * sum(vectors)  # the uncompressed tensors alone, first
    assert three[1] == two[0]  # the Ps
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    own = comps[1].decompress(mine[1], "b", 0)
    at = 16 * 8
    assert torch.equal(own[at : at + 8], grads[1][at : at + 8])
