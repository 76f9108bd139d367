"""Low-rank compressors: PowerSGD (Vogels et al. 2019) and ACP-SGD (Zhang et al.).

References are to the ACP-SGD paper (`shared/papers/acp-sgd.txt`): §II-B3 (low-rank
decomposition, ratio nm / (nr + mr)), Algorithm 1 (Power-SGD vs. ACP-SGD compression),
Algorithm 2 (ACP-SGD with error feedback), §IV-A (query reuse, initialisation), §IV-C
(`torch.linalg.qr` for orthogonalisation; vectors are not compressed, other parameters are
reshaped into matrices), Table I (compression ratios).

Shape convention (§IV-C, reproduces Table I within 5%, see tests):
- a tensor with two or more dimensions is viewed as the matrix (shape[0], prod(shape[1:])):
  a conv weight (out, in, k, k) becomes (out, in·k·k), a linear weight and an embedding
  stay as they are;
- 0-D and 1-D tensors (biases, norms) are sent uncompressed, and so is a matrix whose rank-r
  factors are not smaller than itself (r·(n + m) ≥ n·m; this covers every tensor with no
  elements). An uncompressed payload holds `{"raw": grad}`.

Everything on the wire is float32, like the `none` compressor: factors and raw tensors alike,
whatever the gradient's dtype, so payload bytes depend on the shape only (`payload_bytes`
is exact). Products are computed in float32, or float64 for float64 gradients;
decompression casts back to the gradient's dtype.

Sums, not means: `reduce` sums payloads elementwise and `aggregate` returns the sum of the
workers' contributions, like the rest of gcbench; dividing by the worker count is the
caller's business. Only the reused factors' scale differs from torch's powerSGD_hook (which
keeps the mean Q), and that scale is removed by the next orthogonalisation.

How a worker learns the aggregated factors: the *reduced* payload (the one `reduce`
returns; it carries `info["reduced"]`, the number of payloads summed) is what
`decompress` reads the aggregated factor from, and that is when it is stored for reuse at
the next step. `aggregate(payloads, key, step)` is `decompress(reduce(payloads))`.
Decompressing a worker's own, unreduced payload (error feedback does that) reads the
state but never changes it. Until a reduced payload is seen, the local factor is kept, so a
single worker may skip `reduce` altogether.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from gcbench.compress.base import Buffers, Compressor, Payload, generator
from gcbench.compress.registry import register
from gcbench.errors import ConfigError

WIRE_DTYPE = torch.float32  # factors and raw tensors alike
FACTOR_BYTES = 4


def matrix_view(shape: Sequence[int]) -> tuple[int, int] | None:
    """The (n, m) matrix a tensor of `shape` is compressed as, or None for 0-D/1-D tensors
    (§IV-C: "vector-shaped parameters require no compression, while other parameters are
    reshaped into matrices"; conv (out, in, k, k) → (out, in·k·k))."""
    if len(shape) < 2:
        return None
    return int(shape[0]), math.prod(int(s) for s in shape[1:])


def lowrank_view(shape: Sequence[int], rank: int) -> tuple[int, int] | None:
    """`matrix_view(shape)` when rank-`rank` factors are smaller than the matrix
    (r·(n + m) < n·m, §II-B3's ratio above 1), else None: sent uncompressed."""
    view = matrix_view(shape)
    if view is None:
        return None
    n, m = view
    return view if rank * (n + m) < n * m else None


def compressed_numel(shape: Sequence[int], rank: int) -> int:
    """Elements PowerSGD sends per step for a tensor of `shape`: r·(n + m) (P in round 0 plus
    Q in round 1, §II-B3), or all of them when the tensor is sent uncompressed. Table I's
    ratio is `sum(numel) / sum(compressed_numel)`."""
    view = lowrank_view(shape, rank)
    if view is None:
        return math.prod(int(s) for s in shape)
    n, m = view
    return rank * (n + m)


def acpsgd_numel(shape: Sequence[int], rank: int, step: int) -> int:
    """Elements ACP-SGD sends at `step`: P (n·r) on even steps, Q (m·r) on odd ones
    (Algorithm 2; one factor per step, so about twice Table I's Power-SGD ratio)."""
    view = lowrank_view(shape, rank)
    if view is None:
        return math.prod(int(s) for s in shape)
    n, m = view
    return rank * (n if step % 2 == 0 else m)


def orthogonalize(p: Tensor) -> Tensor:
    """Orthonormal columns spanning those of `p` (n × r, r ≤ n): the Q of a reduced QR
    (§IV-C uses `torch.linalg.qr`), column signs chosen so that R's diagonal is
    non-negative, i.e. exactly classical Gram–Schmidt's result (torch's powerSGD_hook
    `_orthogonalize` with epsilon 0) without its division by zero on a vanishing column."""
    q, r = torch.linalg.qr(p)
    return q.mul_(1 - 2 * (torch.diagonal(r) < 0).to(q.dtype))  # no host sync, no branch


def _product(left: Tensor, right: Tensor, payload: Payload, out: Tensor | None) -> Tensor:
    """left @ rightᵀ as a tensor of the payload's shape and dtype, in `out` if given."""
    if out is None:
        return (left @ right.T).reshape(payload.shape).to(payload.dtype)
    if out.shape != payload.shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(payload.shape)}")
    if out.dtype == left.dtype and out.is_contiguous():
        torch.mm(left, right.T, out=out.view(left.shape[0], right.shape[0]))
    else:
        out.copy_((left @ right.T).reshape(payload.shape))
    return out


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_rank(rank: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError([f"rank: must be an integer >= 1, got {rank!r}"])
    return rank


class _LowRank(Compressor):
    """What PowerSGD and ACP-SGD share: the matrix view, seeded factors, shape bookkeeping
    for `wire_bytes`, and a `reduce` that marks its result as aggregated."""

    family = "lowrank"
    additive = True
    splittable = False
    data_dependent = False

    def __init__(self, rank: int = 4):
        self.rank = _check_rank(rank)
        self.shapes: dict[str, tuple[int, ...]] = {}  # key -> shape, for wire_bytes(numel)

    # -- shapes and bytes --------------------------------------------------------------

    def learn_shapes(self, shapes: Mapping[str, Sequence[int]]) -> None:
        """Tell `wire_bytes(numel, step)` the tensors' shapes without compressing them
        (e.g. from a `ModelProfile`); `compress` records every shape it sees too."""
        for key, shape in shapes.items():
            self.shapes[key] = tuple(int(s) for s in shape)

    @abstractmethod
    def wire_bytes_for_shape(
        self, shape: Sequence[int], step: int, round: int | None = None
    ) -> int:
        """Exact bytes of fp32 payloads for a tensor of `shape` at `step`: one round's, or
        with `round=None` the whole step's."""

    def payload_bytes(self, shape: tuple[int, ...], key: str, step: int) -> int:
        """Exact bytes of the last round's payload (PowerSGD: Q, or the raw tensor)."""
        return self.wire_bytes_for_shape(shape, step, round=self.rounds - 1)

    def wire_bytes(self, numel: int, step: int) -> int:
        """Bytes sent per step, every round together (PowerSGD: P + Q, i.e. 4 ·
        `compressed_numel`; unlike the base contract's "last round's", which is
        `payload_bytes`), for a tensor of `numel` elements. `numel` alone
        does not say whether or how a tensor is compressed, so: when a tensor with that
        many elements has been seen (by `compress` or `learn_shapes`) its shape is used;
        when several shapes share the count, the largest of their byte counts (an upper
        bound); otherwise the tensor is taken as 1-D, i.e. sent uncompressed in fp32. Use
        `wire_bytes_for_shape` to be exact."""
        known = {s for s in self.shapes.values() if math.prod(s) == numel}
        if not known:
            return FACTOR_BYTES * numel
        return max(self.wire_bytes_for_shape(s, step) for s in known)

    # -- helpers -----------------------------------------------------------------------

    def _matrix(self, grad: Tensor, view: tuple[int, int]) -> Tensor:
        m = grad.detach().reshape(view)
        work = _work_dtype(grad.dtype)
        return m if m.dtype == work else m.to(work)

    def _factor(
        self, store: dict[str, Tensor], key: str, seed: tuple[object, ...], like: Tensor, rows: int
    ) -> Tensor:
        """store[key] as a (rows × rank) tensor of like's dtype and device; on first use
        i.i.d. standard normal (§IV-A) from a generator every worker seeds alike."""
        f = store.get(key)
        if f is None or f.shape != (rows, self.rank):
            f = torch.randn(rows, self.rank, generator=generator(*seed), dtype=torch.float32)
        if f.dtype != like.dtype or f.device != like.device:
            f = f.to(device=like.device, dtype=like.dtype)
        store[key] = f
        return f

    @staticmethod
    def _keep(store: dict[str, Tensor], key: str, value: Tensor) -> None:
        """store[key] = value, copied into the existing buffer when it fits."""
        f = store.get(key)
        if f is not None and f.shape == value.shape and f.dtype == value.dtype:
            f.copy_(value)
        else:
            store[key] = value.clone()

    @staticmethod
    def _raw(grad: Tensor, bufs: Buffers, round: int = 0) -> Payload:
        """The gradient in fp32, in the key's buffer (never aliasing the gradient)."""
        raw = bufs.get("raw", tuple(grad.shape), WIRE_DTYPE, grad.device).copy_(grad.detach())
        return Payload({"raw": raw}, grad.shape, grad.dtype, round, {"uncompressed": True})

    @staticmethod
    def _wire(t: Tensor, bufs: Buffers, name: str) -> Tensor:
        """t in fp32, copied into the key's payload buffer `name`."""
        return bufs.get(name, tuple(t.shape), WIRE_DTYPE, t.device).copy_(t)

    def reduce(self, payloads: list[Payload]) -> Payload:
        """Elementwise sum in fp32 (the wire dtype of factors and raw tensors); the result
        is marked `info["reduced"]` = number of worker payloads summed, which is what lets
        `decompress` keep its factor for reuse."""
        if not payloads:
            raise ValueError("reduce needs at least one payload")
        first = payloads[0]
        for p in payloads[1:]:
            if (
                p.round != first.round
                or p.shape != first.shape
                or p.tensors.keys() != (first.tensors.keys())
            ):
                raise ValueError(f"{self.name}: payloads of different rounds or tensors")
        tensors = {}
        for k, v in first.tensors.items():
            acc = v.clone()
            for p in payloads[1:]:
                acc.add_(p.tensors[k])
            tensors[k] = acc
        info = dict(first.info)
        info["reduced"] = sum(int(p.info.get("reduced", 1)) for p in payloads)
        return Payload(tensors, first.shape, first.dtype, first.round, info)

    def decompress(
        self, payload: Payload, key: str, step: int, out: Tensor | None = None
    ) -> Tensor:
        """The reconstruction, of the payload's shape and dtype: a new tensor, or written
        into `out` (e.g. the gradient itself, as torch's powerSGD_hook does) and returned.
        On CPU a new 64 MiB tensor costs about as much as the product that fills it (fresh
        pages), so pass `out` where the caller has a buffer."""
        if "raw" in payload.tensors:
            raw = payload.tensors["raw"]
            return raw.to(payload.dtype, copy=True) if out is None else out.copy_(raw)
        left, right = self._factors_for(payload, key, step)
        return _product(left, right, payload, out)

    @abstractmethod
    def _factors_for(self, payload: Payload, key: str, step: int) -> tuple[Tensor, Tensor]:
        """(L, R) with the reconstruction L Rᵀ; keeps the aggregated factor if reduced."""

    def aggregate(
        self, payloads: list[Payload], key: str, step: int, out: Tensor | None = None
    ) -> Tensor:
        """`decompress(reduce(payloads))`: the summed gradient estimate, and the aggregated
        factor kept for the next step."""
        return self.decompress(self.reduce(payloads), key, step, out)


@register
class PowerSGD(_LowRank):
    """PowerSGD, one power-iteration step per SGD step with query reuse (Algorithm 1,
    lines 2-9; §IV-A), two rounds per step:

        round 0: p0 = compress(grad, key, step)            payload {"p": P = M Q}
                 P  = reduce([p0 of every worker])
        round 1: p1 = compress(grad, key, step, prev=P)    P̂ = orth(P) kept;
                                                           payload {"q": Q = Mᵀ P̂}
                 ĝ  = aggregate([p1 of every worker], key, step)    = P̂ (Σ Q)ᵀ

    The Q reused at the next step is the aggregated one (Σ Q, read from the reduced round-1
    payload), as torch's powerSGD_hook keeps the all-reduced Q; it is the same on every
    worker, which the sum of P = M_i Q over workers needs. The initial Q is standard normal
    from `generator("powersgd", key)` (not orthogonalised: P̂ only depends on P's span).

    Uncompressed tensors send nothing in round 0 and `{"raw": grad}` in round 1, so that the
    last round's payload always decompresses to the gradient (error feedback reads it).
    Error feedback is not part of this class: use a `Memory` (`residual` is Vogels et al.'s
    e = M − P̂ Q_localᵀ, since it decompresses the worker's own round-1 payload).
    """

    name = "powersgd"
    rounds = 2

    def __init__(self, rank: int = 4):
        super().__init__(rank)
        self._q: dict[str, Tensor] = {}  # query reused at the next step (m × r)
        self._p_hat: dict[str, Tensor] = {}  # this step's orthogonalised aggregated P (n × r)

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        self.shapes[key] = tuple(grad.shape)
        view = lowrank_view(grad.shape, self.rank)
        bufs = self.buffers(key, step)
        if prev is None:  # round 0
            if view is None:
                return Payload({}, grad.shape, grad.dtype, 0, {"uncompressed": True})
            m = self._matrix(grad, view)
            q = self._factor(self._q, key, ("powersgd", key), m, view[1])
            if m.dtype == WIRE_DTYPE:  # Alg. 1 line 3, straight into the payload
                p = torch.mm(m, q, out=bufs.get("p", (view[0], self.rank), WIRE_DTYPE, m.device))
            else:
                p = self._wire(m @ q, bufs, "p")
            return Payload({"p": p}, grad.shape, grad.dtype, 0)
        if prev.round != 0:
            raise ValueError(f"powersgd: prev must be the round-0 payload, got round {prev.round}")
        if view is None:
            return self._raw(grad, bufs, round=1)
        m = self._matrix(grad, view)
        p = prev.tensors["p"]
        if p.shape != (view[0], self.rank):
            raise ValueError(f"powersgd: P of shape {tuple(p.shape)} for matrix {view}")
        p_hat = orthogonalize(p.to(device=m.device, dtype=m.dtype))  # Alg. 1 line 5
        self._p_hat[key] = p_hat
        q = (p_hat.T @ m).T.contiguous()  # Alg. 1 line 6: Mᵀ P̂, in the faster order on CPU
        # Reused as is on a single worker; aggregate() replaces it by the sum.
        self._keep(self._q, key, q)
        return Payload({"q": self._wire(q, bufs, "q")}, grad.shape, grad.dtype, 1)

    def _factors_for(self, payload: Payload, key: str, step: int) -> tuple[Tensor, Tensor]:
        if payload.round != 1 or "q" not in payload.tensors:
            raise ValueError("powersgd decompresses the round-1 payload (Q); round 0 has only P")
        p_hat = self._p_hat.get(key)
        if p_hat is None:
            raise ValueError(f"powersgd: no P̂ for {key!r}; run round 1 (compress with prev)")
        q = payload.tensors["q"].to(device=p_hat.device, dtype=p_hat.dtype)
        if payload.info.get("reduced"):
            self._keep(self._q, key, q)  # query reuse: the aggregated Q (Alg. 1 line 7)
        return p_hat, q  # Alg. 1 line 8: P̂ Qᵀ

    def wire_bytes_for_shape(
        self, shape: Sequence[int], step: int, round: int | None = None
    ) -> int:
        view = lowrank_view(shape, self.rank)
        if view is None:
            numel = math.prod(int(s) for s in shape)
            return 0 if round == 0 else FACTOR_BYTES * numel
        n, m = view
        per_round = (n * self.rank, m * self.rank)
        return FACTOR_BYTES * (sum(per_round) if round is None else per_round[round])

    def factors(self, key: str) -> dict[str, Tensor]:
        """Copies of the state kept for `key`: `q` (the query the next step reuses) and
        `p_hat` (the last orthogonalised aggregated P)."""
        out = {"q": self._q.get(key), "p_hat": self._p_hat.get(key)}
        return {k: v.clone() for k, v in out.items() if v is not None}

    def reset(self) -> None:
        super().reset()
        self._q.clear()
        self._p_hat.clear()

    def state_numel(self) -> int:
        return sum(t.numel() for d in (self._q, self._p_hat) for t in d.values())


@register
class ACPSGD(_LowRank):
    """ACP-SGD (Algorithm 2): one factor per step, one round, alternating.

        even step t (the paper's odd 1-based t):  Q̂ = orth(Q_{t-1});  A = M + E
            send P = A Q̂;   E ← A − P Q̂ᵀ;   ĝ = (Σ P) Q̂ᵀ,   keep Σ P as P_t
        odd step t:                               P̂ = orth(P_{t-1});  A = M + E
            send Q = Aᵀ P̂;  E ← A − P̂ Qᵀ;   ĝ = P̂ (Σ Q)ᵀ,   keep Σ Q as Q_t

    Usage per step: `pl = compress(grad, key, step)` on each worker, then
    `ĝ = aggregate([pl of every worker], key, step)` (= decompress(reduce(...))); the
    reduced payload is how a worker learns Σ P (or Σ Q), which it keeps as P_t (Q_t) and
    orthogonalises at the next step (reuse, §IV-A). The fixed factor (Q̂ or P̂) of the step
    is kept from `compress`; `decompress` must be called for that same step. Parity is the
    step number's, so a skipped step keeps the older factor. P_0 and Q_0 are standard normal
    from `generator("acpsgd", key, "p" | "q")`, alike on every worker.

    Error feedback is Algorithm 2's and lives here (`error_feedback=True`, the default):
    the residual E (n × m, zero at first; float32, float64 for float64 gradients) is kept
    per key and updated from the local factor before aggregation (lines 6, 11). Do not
    also wrap this compressor in a `residual` Memory; `ACPSGD(error_feedback=False)` with
    one is equivalent (that Memory's residual is the same A − local reconstruction).
    Uncompressed tensors (vectors, small matrices) are sent raw (exact up to the fp32
    wire), so they have no residual; nor does E hold the fp32 rounding of a float64
    gradient's factors.
    """

    name = "acpsgd"
    rounds = 1

    def __init__(self, rank: int = 4, error_feedback: bool = True):
        super().__init__(rank)
        self.error_feedback = error_feedback
        self._p: dict[str, Tensor] = {}  # P_{t-1}: last aggregated P (n × r), not orthogonal
        self._q: dict[str, Tensor] = {}  # Q_{t-1}: last aggregated Q (m × r), not orthogonal
        self._e: dict[str, Tensor] = {}  # error-feedback residual E (n × m)
        self._fixed: dict[str, tuple[int, Tensor]] = {}  # step, orthogonalised other factor

    def _compensated(self, key: str, m: Tensor) -> Tensor:
        """A = M + E, in the residual's own buffer (updated in place afterwards)."""
        if not self.error_feedback:
            return m
        e = self._e.get(key)
        if e is None or e.shape != m.shape or e.dtype != m.dtype or e.device != m.device:
            e = m.clone()  # E_0 = 0
            self._e[key] = e
            return e
        return e.add_(m)

    def compress(self, grad: Tensor, key: str, step: int, prev: Payload | None = None) -> Payload:
        self.shapes[key] = tuple(grad.shape)
        view = lowrank_view(grad.shape, self.rank)
        bufs = self.buffers(key, step)
        if view is None:
            return self._raw(grad, bufs)
        n, m_cols = view
        m = self._matrix(grad, view)
        a = self._compensated(key, m)
        if step % 2 == 0:  # Alg. 2 lines 4-7
            q_hat = orthogonalize(self._factor(self._q, key, ("acpsgd", key, "q"), m, m_cols))
            p = a @ q_hat
            if self.error_feedback:
                a.addmm_(p, q_hat.T, alpha=-1)  # E = A - P Q̂ᵀ
            self._fixed[key] = (step, q_hat)
            self._keep(self._p, key, p)  # local P_t, until the aggregated one is seen
            return Payload(
                {"p": self._wire(p, bufs, "p")}, grad.shape, grad.dtype, 0, {"step": step}
            )
        p_hat = orthogonalize(self._factor(self._p, key, ("acpsgd", key, "p"), m, n))  # 9-12
        q = (p_hat.T @ a).T.contiguous()  # Aᵀ P̂, in the faster order
        if self.error_feedback:
            a.addmm_(p_hat, q.T, alpha=-1)  # E = A - P̂ Qᵀ
        self._fixed[key] = (step, p_hat)
        self._keep(self._q, key, q)
        return Payload({"q": self._wire(q, bufs, "q")}, grad.shape, grad.dtype, 0, {"step": step})

    def _factors_for(self, payload: Payload, key: str, step: int) -> tuple[Tensor, Tensor]:
        fixed = self._fixed.get(key)
        if fixed is None or fixed[0] != step:
            raise ValueError(
                f"acpsgd: {key!r} was not compressed at step {step}; decompress needs that "
                "step's orthogonalised factor"
            )
        other = fixed[1]
        reduced = bool(payload.info.get("reduced"))
        if "p" in payload.tensors:
            p = payload.tensors["p"].to(device=other.device, dtype=other.dtype)
            if reduced:
                self._keep(self._p, key, p)  # P_t = all-reduced P (Alg. 2 line 7)
            return p, other  # Alg. 2 line 14: P_t Q̂ᵀ
        else:
            q = payload.tensors["q"].to(device=other.device, dtype=other.dtype)
            if reduced:
                self._keep(self._q, key, q)  # Q_t = all-reduced Q (Alg. 2 line 12)
            return other, q  # Alg. 2 line 14: P̂ Q_tᵀ

    def wire_bytes_for_shape(
        self, shape: Sequence[int], step: int, round: int | None = None
    ) -> int:
        if round not in (None, 0):
            raise ValueError("acpsgd has one round per step")
        return FACTOR_BYTES * acpsgd_numel(shape, self.rank, step)

    def factors(self, key: str) -> dict[str, Tensor]:
        """Copies of the state kept for `key`: `p` and `q` (the last aggregated, or until
        one is seen local or initial, factors), `error` (the residual E) and `fixed` (this
        step's orthogonalised other factor)."""
        out = {
            "p": self._p.get(key),
            "q": self._q.get(key),
            "error": self._e.get(key),
            "fixed": self._fixed[key][1] if key in self._fixed else None,
        }
        return {k: v.clone() for k, v in out.items() if v is not None}

    def reset(self) -> None:
        super().reset()
        for d in (self._p, self._q, self._e, self._fixed):
            d.clear()

    def state_numel(self) -> int:
        n = sum(t.numel() for d in (self._p, self._q, self._e) for t in d.values())
        return n + sum(f.numel() for _, f in self._fixed.values())
