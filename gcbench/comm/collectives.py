"""Cost of collectives over one link level (DESIGN §7, cost-model table).

A link has bandwidth B (bytes/s, line rate, one direction), a per-step latency alpha and
an efficiency eta (achieved bus bandwidth / line rate). Every collective here costs

    steps(n) * alpha + factor(n) * S / (eta * B)

over n ranks, so one pair (steps, factor) per collective describes it; `cost_shape` gives
that pair, which is also what `gcbench.comm.calibrate` fits against. S is in the unit
nccl-tests reports as "size": the whole array for allreduce, reduce-scatter, allgather,
broadcast and reduce; the buffer of one rank for alltoall; and, for the allgather and
gather of compressed payloads, the payload m of one rank.

Ring algorithms (ACP-SGD §II-A1; ByteComp §2.1): an allreduce is a reduce-scatter then an
allgather, n-1 steps each moving S/n bytes per rank; broadcast and reduce are pipelined
along a chain, so their time tends to S/(eta B) plus one latency per hop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args


@dataclass(frozen=True)
class Link:
    bandwidth_Bps: float  # line rate, bytes per second, one direction
    latency_s: float  # per collective step
    efficiency: float  # achieved bus bandwidth / line rate, in (0, 1]

    def __post_init__(self) -> None:
        if self.bandwidth_Bps <= 0 or not 0 < self.efficiency <= 1 or self.latency_s < 0:
            raise ValueError(f"invalid link {self}")

    @property
    def effective_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring allreduce of `nbytes` over `n` ranks: 2(n-1)alpha + 2(n-1)/n * S / (eta B).

    2(n-1) steps (reduce-scatter, then allgather), each moving S/n bytes per rank; the
    bus-bandwidth factor 2(n-1)/n is nccl-tests' for allreduce.
    """
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * nbytes / link.effective_Bps


def ring_allreduce_wire_bytes(nbytes: float, n: int) -> float:
    """Bytes each rank sends in a ring allreduce of `nbytes`: 2(n-1)/n * S."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes


Collective = Literal[
    "allreduce",
    "reduce_scatter",
    "allgather",
    "allgather_payload",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
]
COLLECTIVES: tuple[str, ...] = get_args(Collective)


def _name(collective: str) -> str:
    name = collective.replace("-", "_").lower()
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
    return name


@dataclass(frozen=True)
class Shape:
    """One collective's cost over n ranks, as functions of n: `steps` latencies, `factor`
    times S/(eta B), and `wire` times S for the mean bytes a rank sends."""

    steps: Callable[[int], float]
    factor: Callable[[int], float]
    wire: Callable[[int], float]


def _ring(n: int) -> float:
    return (n - 1) / n


def _hops(n: int) -> float:
    return float(n - 1)


# The table of DESIGN §7: ring reduce-scatter, allgather and alltoall move (n-1)/n of S;
# an allreduce is both; a pipelined broadcast or reduce streams S once after n-1 hops;
# an allgather of payloads and a gather receive (n-1) payloads of m bytes, one a step.
SHAPES: dict[str, Shape] = {
    "allreduce": Shape(lambda n: 2 * float(n - 1), lambda n: 2 * (n - 1) / n,
                       lambda n: 2 * (n - 1) / n),
    "reduce_scatter": Shape(_hops, _ring, _ring),
    "allgather": Shape(_hops, _ring, _ring),
    "alltoall": Shape(_hops, _ring, _ring),
    "broadcast": Shape(_hops, lambda n: 1.0, _ring),
    "reduce": Shape(_hops, lambda n: 1.0, _ring),
    "allgather_payload": Shape(_hops, _hops, lambda n: n - 1),
    "gather": Shape(_hops, _hops, _ring),
}  # fmt: skip
assert set(SHAPES) == set(COLLECTIVES)


def cost_shape(collective: str, n: int) -> tuple[float, float]:
    """(steps, factor) of `collective` over `n` ranks: time = steps*alpha + factor*S/(eta B).

    The table of DESIGN §7 (`SHAPES`); `n <= 1` costs nothing, (0, 0).
    """
    shape = SHAPES[_name(collective)]
    if n <= 1:
        return 0.0, 0.0
    return shape.steps(n), shape.factor(n)


def collective_s(collective: str, nbytes: float, n: int, link: Link) -> float:
    """Time of `collective` of `nbytes` (see the module docstring for S) over `n` ranks."""
    steps, factor = cost_shape(collective, n)
    if nbytes <= 0 or steps == 0:
        return 0.0
    return steps * link.latency_s + factor * nbytes / link.effective_Bps


def copy_s(nbytes: float, link: Link) -> float:
    """A point-to-point copy of S bytes over one link (a GPU <-> host PCIe copy):
    alpha + S/(eta B); nothing to copy costs nothing."""
    if nbytes <= 0:
        return 0.0
    return link.latency_s + nbytes / link.effective_Bps


def allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring allreduce: 2(n-1)alpha + 2(n-1)/n * S/(eta B) (same as `ring_allreduce_s`)."""
    return collective_s("allreduce", nbytes, n, link)


def reduce_scatter_s(nbytes: float, n: int, link: Link) -> float:
    """Ring reduce-scatter of an S-byte array: (n-1)alpha + (n-1)/n * S/(eta B)."""
    return collective_s("reduce_scatter", nbytes, n, link)


def allgather_s(nbytes: float, n: int, link: Link) -> float:
    """Ring allgather building an S-byte array (S/n from each rank):
    (n-1)alpha + (n-1)/n * S/(eta B)."""
    return collective_s("allgather", nbytes, n, link)


def allgather_payload_s(payload_bytes: float, n: int, link: Link) -> float:
    """Ring allgather of a compressed payload of m bytes per rank:
    (n-1)alpha + (n-1) * m/(eta B). Each rank then decompresses n-1 payloads
    (`allgather_decompressions`), the reason allgather schemes scale badly (DESIGN §7)."""
    return collective_s("allgather_payload", payload_bytes, n, link)


def allgather_decompressions(n: int) -> int:
    """Payloads each rank decompresses after an allgather of compressed payloads: n-1
    (its own payload it already has uncompressed)."""
    return max(0, n - 1)


def alltoall_s(nbytes: float, n: int, link: Link) -> float:
    """Alltoall of S bytes per rank (S/n to each peer): (n-1)alpha + (n-1)/n * S/(eta B)."""
    return collective_s("alltoall", nbytes, n, link)


def broadcast_s(nbytes: float, n: int, link: Link) -> float:
    """Pipelined broadcast of S bytes from one root: (n-1)alpha + S/(eta B)."""
    return collective_s("broadcast", nbytes, n, link)


def reduce_s(nbytes: float, n: int, link: Link) -> float:
    """Pipelined reduce of S bytes to one root: (n-1)alpha + S/(eta B)."""
    return collective_s("reduce", nbytes, n, link)


def gather_s(payload_bytes: float, n: int, link: Link) -> float:
    """Gather of m bytes per rank to one root: (n-1)alpha + (n-1) * m/(eta B); the root's
    ingress carries all n-1 payloads."""
    return collective_s("gather", payload_bytes, n, link)


def wire_bytes(collective: str, nbytes: float, n: int) -> float:
    """Mean bytes one rank sends in `collective` (total bytes on the wire / n).

    For the symmetric collectives every rank sends the same: allreduce 2(n-1)/n * S;
    reduce-scatter, allgather, alltoall (n-1)/n * S; allgather of payloads (n-1) * m
    (a ring forwards every other rank's payload). In a pipelined broadcast or reduce all
    ranks but one (the chain's tail, the root) send S, so the mean is (n-1)/n * S; in a
    gather the n-1 non-roots send m each, mean (n-1)/n * m.
    """
    shape = SHAPES[_name(collective)]
    if n <= 1 or nbytes <= 0:
        return 0.0
    return shape.wire(n) * nbytes


# nccl-tests' PERFORMANCE.md: busbw = algbw * factor, algbw = size / time.
_BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,  # nccl-tests' gather: size = the root's whole buffer
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = (size / time) * factor.

    allreduce 2(n-1)/n; reduce-scatter, allgather, alltoall, gather (n-1)/n; broadcast
    and reduce 1. With our cost model, busbw tends to eta*B for large sizes.
    """
    name = collective.replace("-", "_").lower()
    if name not in _BUS_FACTORS:
        raise ValueError(f"no bus factor for {collective!r}; valid: {', '.join(_BUS_FACTORS)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return float(_BUS_FACTORS[name](n))
